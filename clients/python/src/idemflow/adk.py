"""Google's Agent Development Kit (ADK, ``google-adk``): a tool that runs
one of idemflow's operations exactly once per tool call, under a key
derived from ADK's own durable identity of the call.

ADK writes the model's function-call event to the session (its
SessionService: SQLite, a database, Vertex AI) before the call runs, with
an ID for every call (``adk-<uuid>`` where the model gave none). An app
whose ``App`` is resumable (``ResumabilityConfig(is_resumable=True)``)
and that was killed mid call resumes the invocation with its
``invocation_id``; ADK then runs the stored calls that have no response
again, at least once (ADK's own Resume page says so), with the same call
ID and the same event. That is the call's identity:

    the app, the user, the session, the invocation, the ID of the event
    that holds the call, the call's ID, and the tool's name.

The invocation is there because a provider that numbers calls per
response (``call_0``) brings a call ID back in a later turn, which is
another invocation and another intended call; the event ID because it
may bring it back within one invocation too, in a later response.

What this key cannot cover: an app that is not resumable has no way to
run the stored call again, and sending the user's message again starts a
new invocation, in which the model writes the call again with a new ID
(a second effect). :func:`run_durably` resumes an unfinished invocation
instead, and refuses an app that is not resumable. A rewind
(``Runner.rewind_async``) drops the invocation from the session: what
runs after it is a new intent, as the operator asked.

Needs the ``adk`` extra (``google-adk``, Python 3.10+).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions.session import Session
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from pydantic import BaseModel

from ._tooltext import RESUME, answer_text, arguments, pending_text, refusal_text, send
from .client import AsyncClient, Client, Intent
from .errors import DeadlineError, NoDurableIdentityError, ProblemError
from .keys import derive_key

__all__ = ["KEY_SCHEME", "IdemflowTool", "call_key", "durable_key", "run_durably"]

#: The scheme of an ADK tool call's key.
KEY_SCHEME = "ad1"


def call_key(app: str, user: str, session: str, invocation: str, event: str, call_id: str, tool: str) -> str:
    """The key of one tool call from its parts (clients/testdata/keys.json's
    adk vectors)."""
    return derive_key(KEY_SCHEME, app, user, session, invocation, event, call_id, tool)


def durable_key(tool_context: ToolContext, tool_name: str) -> str:
    """The key of the call tool_context runs: see the module's comment.

    Raises NoDurableIdentityError when the call has no ID, or no event of
    its invocation in the session holds it: nothing that survives a resume
    would then name it, and a key made anyway would protect nothing.
    """
    call_id = tool_context.function_call_id
    if not call_id:
        raise NoDurableIdentityError(f"{tool_name}: the call has no ID, so no key can survive a resume")
    invocation = tool_context.invocation_id
    session = tool_context.session
    event = _call_event(session.events, invocation, call_id)
    if event is None:
        raise NoDurableIdentityError(
            f"{tool_name}: no event of invocation {invocation} in session {session.id} holds call {call_id}, so nothing durable names it"
        )
    return call_key(session.app_name, session.user_id, session.id, invocation, event.id, call_id, tool_name)


def _call_event(events: list[Event], invocation: str, call_id: str) -> Event | None:
    """The last event of the invocation that holds call_id: the call being
    run (an earlier response may have used the same ID)."""
    for e in reversed(events):
        if e.invocation_id == invocation and any(c.id == call_id for c in e.get_function_calls()):
            return e
    return None


class IdemflowTool(BaseTool):
    """An ADK tool that runs one of idemflow's operations (a ticket, an
    order, a declared operation, an HTTP tool) exactly once per tool call,
    however often a resumed invocation runs it.

    path is the operation's (/v1/tickets, /v1/tools/refund_create) or a
    function of the arguments; body makes the request's body from them
    (default: the arguments). The model reads {http_status, replayed,
    result}, or for a final refusal {http_status, error, problem, body,
    key}: a rejection stored under the key, or idemflow's refusal of the
    arguments, which nothing recorded.

    require_confirmation asks the user first, as ADK's own tools do (the
    call's confirmation is a FunctionResponse to ADK's request); the
    confirmed call has the same ID and event, so the same key.

    deadline is how long one call waits for its final answer (seconds).
    When it ends, the tool raises DeadlineError, which ends the invocation
    with the answer unknown: handed to the model, it would read as a
    failure to retry, under a new call ID and a new key. Resume the
    invocation (run_durably): the call runs again under its key and gets
    its answer.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        name: str,
        description: str,
        path: str | Callable[[dict[str, Any]], str],
        args_schema: type[BaseModel],
        body: Callable[[dict[str, Any]], Any] | None = None,
        deadline: float = 300.0,
        require_confirmation: bool = False,
    ) -> None:
        super().__init__(name=name, description=description)
        self._client = client
        self._path = path
        self._args_schema = args_schema
        self._body = body
        self._deadline = deadline
        self._require_confirmation = require_confirmation

    def _get_declaration(self) -> types.FunctionDeclaration:
        return types.FunctionDeclaration(name=self.name, description=self.description, parameters_json_schema=self._args_schema.model_json_schema())

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        key = durable_key(tool_context, self.name)
        try:
            parsed = arguments(self._args_schema, args)
        except ValueError as e:  # pydantic's ValidationError
            # The model's own mistake, and nothing was sent: its own to fix.
            return {"error": "InvalidArguments", "detail": str(e), "key": key}
        if self._require_confirmation:
            confirmation = tool_context.tool_confirmation
            if confirmation is None:
                tool_context.request_confirmation(hint=f"Approve or reject {self.name} with these arguments: {json.dumps(parsed, ensure_ascii=False)}")
                tool_context.actions.skip_summarization = True
                return {"status": "awaiting confirmation", "key": key}
            if not confirmation.confirmed:
                return {"status": "rejected by the user; nothing was sent", "key": key}
        return await self._send(key, parsed)

    async def answer(self, session: Session, event: Event, call: types.FunctionCall) -> dict[str, Any]:
        """The final answer of a stored call whose invocation ended before
        it had one (the tool raised DeadlineError): the call sent again
        under the key it had. run_durably hands it to the invocation."""
        assert call.id is not None
        key = call_key(session.app_name, session.user_id, session.id, event.invocation_id, event.id, call.id, self.name)
        try:
            parsed = arguments(self._args_schema, dict(call.args or {}))
        except ValueError as e:
            return {"error": "InvalidArguments", "detail": str(e), "key": key}
        answer: dict[str, Any] = await self._send(key, parsed)
        return answer

    async def _send(self, key: str, args: dict[str, Any]) -> Any:
        p = self._path(args) if callable(self._path) else self._path
        try:
            return json.loads(answer_text(await send(self._client, Intent(key, p, self._body(args) if self._body else args), self._deadline)))
        except ProblemError as e:
            return json.loads(refusal_text(e, key))
        except DeadlineError as e:
            raise DeadlineError(pending_text(self.name, key, RESUME["adk"])) from e


def unfinished_invocation(events: list[Event]) -> str | None:
    """The session's last invocation, when it did not end: its last event
    is not the end of its agent (ADK writes one when an invocation of a
    resumable app ends)."""
    if not events:
        return None
    last = events[-1]
    return None if last.actions.end_of_agent else last.invocation_id


def unanswered_calls(events: list[Event], invocation: str) -> list[tuple[Event, types.FunctionCall]]:
    """The calls of invocation that have no response in the session, with
    the events that hold them."""
    answered = {r.id for e in events if e.invocation_id == invocation for r in e.get_function_responses()}
    return [(e, c) for e in events if e.invocation_id == invocation for c in e.get_function_calls() if c.id not in answered]


def _idemflow_tools(agent: Any) -> dict[str, IdemflowTool]:
    """The IdemflowTools of agent and its sub-agents, by name."""
    found = {t.name: t for t in getattr(agent, "tools", []) or [] if isinstance(t, IdemflowTool)}
    for sub in getattr(agent, "sub_agents", []) or []:
        found.update(_idemflow_tools(sub))
    return found


async def run_durably(runner: Runner, *, user_id: str, session_id: str, new_message: types.Content) -> AsyncIterator[Event]:
    """Runs one turn of a resumable app, or finishes the one it was in:

    - the session's last invocation did not end (the process was killed
      in it): it is resumed with its invocation_id, and ADK runs its
      unanswered calls again, under the keys they had, which replay;
    - it ended in an error while an IdemflowTool call had no answer (the
      tool raised DeadlineError: ADK records a tool's exception and never
      runs that call again): each such call is sent again under its key,
      and its final answer is handed to the invocation as the call's
      FunctionResponse, as ADK takes a human's answer to a paused call;
    - otherwise new_message starts a new invocation (so does a message
      that answers a paused call, such as a confirmation: ADK finds the
      invocation from the call it answers).

    Yields the events, as Runner.run_async does (the answers handed to an
    invocation too). Raises NoDurableIdentityError for an app that is not
    resumable: ADK cannot run a stored call again there, and sending the
    message again would be a new call, under a new key.
    """
    config = runner.resumability_config
    if config is None or not config.is_resumable:
        raise NoDurableIdentityError(
            f"{runner.app_name}: the app is not resumable (App(resumability_config=ResumabilityConfig(is_resumable=True))), so a call"
            " killed mid way cannot run again under its key"
        )
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=user_id, session_id=session_id)
    if session is None:
        session = await runner.session_service.create_session(app_name=runner.app_name, user_id=user_id, session_id=session_id)
    invocation = unfinished_invocation(session.events)
    events: AsyncIterator[Event]
    if any(p.function_response for p in new_message.parts or []):
        events = runner.run_async(user_id=user_id, session_id=session_id, new_message=new_message)
    elif invocation is not None and session.events[-1].error_code:
        tools = _idemflow_tools(runner.agent)
        parts = [
            types.Part(function_response=types.FunctionResponse(id=call.id, name=call.name, response=await tools[call.name].answer(session, event, call)))
            for event, call in unanswered_calls(session.events, invocation)
            if call.name in tools
        ]
        if parts:
            events = runner.run_async(user_id=user_id, session_id=session_id, new_message=types.Content(role="user", parts=parts), yield_user_message=True)
        else:
            events = runner.run_async(user_id=user_id, session_id=session_id, new_message=new_message)
    elif invocation is not None:
        events = runner.run_async(user_id=user_id, session_id=session_id, invocation_id=invocation)
    else:
        events = runner.run_async(user_id=user_id, session_id=session_id, new_message=new_message)
    async for event in events:
        yield event
