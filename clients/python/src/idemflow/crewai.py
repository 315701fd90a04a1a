"""CrewAI: a tool that runs one of idemflow's operations exactly once per
intended call of a crew that runs inside a CrewAI Flow.

What CrewAI keeps, read in crewai 1.15: a Flow's state has an ID, and
``@persist`` saves the state when a flow method completes, never during
one. A crew runs inside a method, and its tool calls are not saved
before they run (a crew's agent executor is a Flow of its own, whose
context variables name it, not the app's flow). A process killed mid call
runs the flow again with ``kickoff(inputs={"id": <the state's ID>})``:
the unfinished method runs again from its start, its crew asks the model
again, and the model writes the call again, with new IDs. So no ID of the
call itself survives; what does is the flow's state ID and the method.

The key is therefore derived from what the call is, within the method's
run (``cr1``): the flow's state ID, the method, an optional scope, the
tool's name, the digest of the call's arguments (RFC 8785, so their order
does not matter) and the call's occurrence among the method's calls of
the tool with those arguments. The call a re-run method makes again with
the same arguments has the key it had, and replays. Its limits, which the
docs say: a model that writes other arguments on the re-run makes
another call (a second effect), and a method that runs twice in one flow
(a loop) must pass ``scope`` (say, the loop's count from the state), or
its second run's calls replay the first's.

Needs the ``crewai`` extra, in an environment of its own
(``requirements-crewai.lock``: crewai takes openai <3, which the OpenAI
Agents SDK does not).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from crewai.flow.flow import Flow
from crewai.flow.flow_context import current_flow_method_name
from crewai.tools import BaseTool
from pydantic import BaseModel, PrivateAttr

from ._tooltext import RESUME, answer_text, arguments, pending_text, refusal_text
from .client import Client, Intent
from .errors import DeadlineError, NoDurableIdentityError, ProblemError
from .keys import canonical, derive_key

__all__ = ["KEY_SCHEME", "IdemflowTool", "args_digest", "call_key"]

#: The scheme of a CrewAI call's key.
KEY_SCHEME = "cr1"


def args_digest(args: dict[str, Any]) -> str:
    """The digest of a call's arguments, in their RFC 8785 form."""
    return derive_key("args", canonical(args))


def call_key(flow_id: str, method: str, scope: str, tool: str, digest: str, occurrence: int) -> str:
    """The key of one call from its parts (clients/testdata/keys.json's
    crewai vectors); an empty scope is left out, as in every client."""
    return derive_key(KEY_SCHEME, flow_id, method, tool, digest, str(occurrence), *([scope] if scope else []))


class IdemflowTool(BaseTool):
    """A CrewAI tool that runs one of idemflow's operations (a ticket, an
    order, a declared operation, an HTTP tool) once per intended call.

    Make it inside the flow method whose crew uses it, with flow=self: it
    takes the flow's state ID and the method's name there. path is the
    operation's, or a function of the arguments; body makes the request's
    body from them (default: the arguments). The agent reads {http_status,
    replayed, result}, or for a final refusal {http_status, error,
    problem, body, key}.

    By default a call waits for its final answer however long it takes
    (retrying under its key): CrewAI hands whatever a tool returns or
    raises to the model, and a model told that a call is pending may write
    it again with other arguments, another key. A process killed while it
    waits runs the method again, and the call gets its key back. A finite
    deadline (seconds) is for an app that prefers an answer to the agent:
    past it, the agent reads that the call is pending under its key and
    must not be made again (a pending call is not counted: the same call
    asked again is the same key).
    """

    args_schema: type[BaseModel]
    _client: Client = PrivateAttr()
    _path: str | Callable[[dict[str, Any]], str] = PrivateAttr()
    _body: Callable[[dict[str, Any]], Any] | None = PrivateAttr(default=None)
    _deadline: float = PrivateAttr(default=math.inf)
    _flow_id: str = PrivateAttr()
    _method: str = PrivateAttr()
    _scope: str = PrivateAttr(default="")
    _seen: Counter[str] = PrivateAttr(default_factory=Counter)

    def __init__(
        self,
        client: Client,
        *,
        flow: Flow[Any],
        name: str,
        description: str,
        path: str | Callable[[dict[str, Any]], str],
        args_schema: type[BaseModel],
        body: Callable[[dict[str, Any]], Any] | None = None,
        deadline: float = math.inf,
        scope: str = "",
    ) -> None:
        super().__init__(name=name, description=description, args_schema=args_schema)
        flow_id = getattr(flow.state, "id", None)
        if not flow_id:
            raise NoDurableIdentityError(f"{name}: the flow's state has no ID (@persist gives it one), so no key can outlive a crash")
        method = current_flow_method_name.get()
        if method == "unknown":
            raise NoDurableIdentityError(f"{name}: made outside a flow method; make the tool inside the method whose crew uses it")
        self._client, self._path, self._body, self._deadline = client, path, body, deadline
        self._flow_id, self._method, self._scope = str(flow_id), method, scope

    def _run(self, **kwargs: Any) -> str:
        try:
            args = arguments(self.args_schema, kwargs)
        except ValueError as e:  # pydantic's ValidationError
            return json.dumps({"error": "InvalidArguments", "detail": str(e)}, ensure_ascii=False)
        digest = args_digest(args)
        occurrence = self._seen[digest] + 1
        key = call_key(self._flow_id, self._method, self._scope, self.name, digest, occurrence)
        path = self._path(args) if callable(self._path) else self._path
        try:
            answer = answer_text(self._client.do(Intent(key, path, self._body(args) if self._body else args), deadline=self._deadline))
        except ProblemError as e:
            answer = refusal_text(e, key)
        except DeadlineError:
            # Not counted: the same call asked again is this one, under its key.
            return pending_text(self.name, key, RESUME["crewai"])
        self._seen[digest] = occurrence
        return answer
