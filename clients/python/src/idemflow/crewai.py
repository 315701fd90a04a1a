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

mcp_tools makes the same tools of idemflow's MCP server (idemflow mcp),
keyed the same way: CrewAI's own MCP tools (``Agent(mcps=[...])``) send
no ``_meta``, so there the idempotency_key the model writes decides.

Needs the ``crewai`` extra, in an environment of its own
(``requirements-crewai.lock``: crewai takes openai <3, which the OpenAI
Agents SDK does not).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import json
import math
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from crewai.flow.flow import Flow
from crewai.flow.flow_context import current_flow_method_name
from crewai.tools import BaseTool
from pydantic import BaseModel, PrivateAttr

from ._tooltext import RESUME, answer_text, arguments, pending_text, refusal_text
from .client import Client, Intent
from .errors import DeadlineError, NoDurableIdentityError, ProblemError
from .keys import call_arguments, call_digest, call_intent, derive_key, intent_fields_of

if TYPE_CHECKING:
    from crewai.mcp import MCPServerConfig

__all__ = ["ARGS_KEY_SCHEME", "KEY_SCHEME", "IdemflowTool", "args_digest", "call_key", "intent_digest", "mcp_tools"]

#: The scheme of a CrewAI call's key: the intended call within the flow
#: method's run, named by its intent fields (a ticket's customer, never
#: its wording).
KEY_SCHEME = "cr2"
#: The same named by the call's whole arguments, which a model rewords:
#: the scheme before cr2, for a method in flight across the upgrade.
ARGS_KEY_SCHEME = "cr1"


def args_digest(args: dict[str, Any]) -> str:
    """The digest of a call's arguments, in their RFC 8785 form, less the
    idempotency_key an MCP tool takes from the model (call_arguments)."""
    return derive_key("args", call_arguments(args))


def intent_digest(fields: Sequence[Mapping[str, str]], args: dict[str, Any]) -> str:
    """The digest of a call's intent: derive_key("intent", its intent
    fields' canonical text), or args_digest for a tool without them."""
    return call_digest(call_intent(fields, args))


def call_key(flow_id: str, method: str, scope: str, tool: str, digest: str, occurrence: int, key_scheme: str = KEY_SCHEME) -> str:
    """The key of one call from its parts (clients/testdata/keys.json's
    crewai vectors); an empty scope is left out, as in every client."""
    return derive_key(key_scheme, flow_id, method, tool, digest, str(occurrence), *([scope] if scope else []))


class _KeyedTool(BaseTool):
    """A CrewAI tool whose calls are keyed by the intended call within the
    flow method's run (cr2: by its intent fields), counted once answered;
    _send makes the call."""

    args_schema: type[BaseModel]
    _deadline: float = PrivateAttr(default=math.inf)
    _flow_id: str = PrivateAttr()
    _method: str = PrivateAttr()
    _scope: str = PrivateAttr(default="")
    _seen: Counter[str] = PrivateAttr(default_factory=Counter)
    _fields: tuple[Mapping[str, str], ...] = PrivateAttr(default=())
    _key_scheme: str = PrivateAttr(default=KEY_SCHEME)

    def _request(self, args: dict[str, Any]) -> Any:
        """The request a call makes of its arguments."""
        return args

    def _run(self, **kwargs: Any) -> str:
        try:
            args = arguments(self.args_schema, kwargs)
        except ValueError as e:  # pydantic's ValidationError
            return json.dumps({"error": "InvalidArguments", "detail": str(e)}, ensure_ascii=False)
        digest = intent_digest(self._fields, self._request(args)) if self._key_scheme == KEY_SCHEME else args_digest(args)
        occurrence = self._seen[digest] + 1
        key = call_key(self._flow_id, self._method, self._scope, self.name, digest, occurrence, self._key_scheme)
        try:
            answer = self._send(args, key)
        except DeadlineError:
            # Not counted: the same call asked again is this one, under its key.
            return pending_text(self.name, key, RESUME["crewai"])
        self._seen[digest] = occurrence
        return answer

    def _send(self, args: dict[str, Any], key: str) -> str:
        """The text the agent reads of the call's final answer; DeadlineError
        past the tool's deadline."""
        raise NotImplementedError

    def _by_intent(self, key: str) -> bool:
        """Whether key was named by the tool's intent fields, which the
        request then says (idemflow compares on them alone)."""
        return bool(self._fields) and key.startswith(KEY_SCHEME + "_")


class IdemflowTool(_KeyedTool):
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

    intent is the operation's intent fields ([{"name", "norm"}], as its
    declaration publishes them); idemflow's own tools' are known by name
    or path. The key names them (cr2): the method run again whose model
    rewords the title gets the first ticket, a replay naming what
    differed. key_scheme ARGS_KEY_SCHEME ("cr1") names the whole arguments,
    as the release before cr2 did.
    """

    _client: Client = PrivateAttr()
    _path: str | Callable[[dict[str, Any]], str] = PrivateAttr()
    _body: Callable[[dict[str, Any]], Any] | None = PrivateAttr(default=None)

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
        intent: Sequence[Mapping[str, str]] | None = None,
        key_scheme: str = KEY_SCHEME,
    ) -> None:
        super().__init__(name=name, description=description, args_schema=args_schema)
        self._flow_id, self._method = _identity(flow, name)
        self._client, self._path, self._body, self._deadline = client, path, body, deadline
        self._scope = scope
        self._fields = tuple(intent) if intent is not None else intent_fields_of(name, path if isinstance(path, str) else None)
        self._key_scheme = key_scheme

    def _request(self, args: dict[str, Any]) -> Any:
        return self._body(args) if self._body else args

    def _send(self, args: dict[str, Any], key: str) -> str:
        path = self._path(args) if callable(self._path) else self._path
        try:
            return answer_text(self._client.do(Intent(key, path, self._request(args), by_intent=self._by_intent(key)), deadline=self._deadline))
        except ProblemError as e:
            return refusal_text(e, key)


def _identity(flow: Flow[Any], name: str) -> tuple[str, str]:
    """The flow state's ID and the running method's name, which every call
    of a tool made there is keyed by."""
    flow_id = getattr(flow.state, "id", None)
    if not flow_id:
        raise NoDurableIdentityError(f"{name}: the flow's state has no ID (@persist gives it one), so no key can outlive a crash")
    method = current_flow_method_name.get()
    if method == "unknown":
        raise NoDurableIdentityError(f"{name}: made outside a flow method; make the tool inside the method whose crew uses it")
    return str(flow_id), method


T = TypeVar("T")


def _run_sync(coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """coro's result from sync code, as CrewAI's own MCP tools get it: in
    a thread of its own when an event loop runs here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro())
    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(ctx.run, asyncio.run, coro()).result()


def _mcp_client(server: MCPServerConfig) -> Any:
    """A new CrewAI MCPClient on server, as CrewAI makes one for each call
    of its own MCP tools (so that calls share no connection)."""
    from crewai.mcp import MCPClient, MCPServerHTTP, MCPServerSSE, MCPServerStdio
    from crewai.mcp.transports.http import HTTPTransport
    from crewai.mcp.transports.sse import SSETransport
    from crewai.mcp.transports.stdio import StdioTransport

    transport: Any
    if isinstance(server, MCPServerStdio):
        transport = StdioTransport(command=server.command, args=server.args, env=server.env)
    elif isinstance(server, MCPServerHTTP):
        transport = HTTPTransport(url=server.url, headers=server.headers, streamable=server.streamable)
    elif isinstance(server, MCPServerSSE):
        transport = SSETransport(url=server.url, headers=server.headers)
    else:
        raise TypeError(f"an MCP server config of CrewAI's (MCPServerStdio, MCPServerHTTP, MCPServerSSE), not {type(server).__name__}")
    return MCPClient(transport=transport, cache_tools_list=False)


def mcp_tools(server: MCPServerConfig, *, flow: Flow[Any], names: list[str] | None = None, deadline: float = math.inf, scope: str = "") -> list[BaseTool]:
    """The tools of idemflow's MCP server (idemflow mcp) on server (CrewAI's
    MCPServerStdio, MCPServerHTTP or MCPServerSSE), as CrewAI tools keyed as
    IdemflowTool keys its calls (cr1: the flow state's ID, the method, the
    tool, the arguments less the idempotency_key the model writes, and
    their occurrence): each call sends that key in _meta, asks for an MCP
    task and waits for its result, however long it takes by default, as
    IdemflowTool waits (deadline, scope: as IdemflowTool's). Make them
    inside the flow method whose crew uses them, with flow=self.

    This stands in for CrewAI's own MCP tools (Agent(mcps=[server])),
    whose calls send the tool's name and arguments only. names: the tools
    to take (default: all). The agent reads the tool's text:
    {http_status, replayed, result}, or its words for a refusal."""
    flow_id, method = _identity(flow, "idemflow's MCP tools")

    async def listed() -> list[dict[str, Any]]:
        client = _mcp_client(server)
        await client.connect()
        try:
            return list(await client.list_tools())
        finally:
            await client.disconnect()

    return [
        _McpTool(server, t, flow_id=flow_id, method=method, scope=scope, deadline=deadline) for t in _run_sync(listed) if names is None or t["name"] in names
    ]


class _McpTool(_KeyedTool):
    """One of idemflow's MCP tools, called under its intended call's key."""

    _server: Any = PrivateAttr()

    def __init__(self, server: MCPServerConfig, listed: dict[str, Any], *, flow_id: str, method: str, scope: str, deadline: float) -> None:
        from crewai.utilities.pydantic_schema_utils import create_model_from_schema

        name = listed["name"]
        # The model is shown the schema as CrewAI's own MCP tools show it.
        schema = create_model_from_schema(listed.get("inputSchema") or {"type": "object"}, model_name=f"{name}Schema", enrich_descriptions=True)
        super().__init__(name=name, description=listed.get("description") or name, args_schema=schema)
        self._server, self._flow_id, self._method, self._scope, self._deadline = server, flow_id, method, scope, deadline
        published = (listed.get("_meta") or {}).get("io.idemflow/intent") or []
        # CrewAI's client may list a tool without its _meta: idemflow's own
        # tools' fields are known by name.
        fields = tuple({"name": str(f["name"]), "norm": str(f["norm"])} for f in published if isinstance(f, dict) and "name" in f and "norm" in f)
        self._fields = fields or intent_fields_of(name)

    def _send(self, args: dict[str, Any], key: str) -> str:
        from .mcp import call_as_task, result_text

        async def call() -> str:
            client = _mcp_client(self._server)
            await client.connect()
            try:
                return result_text(
                    await call_as_task(
                        client.session, self.name, args, key=key, resume=RESUME["crewai"], deadline=self._deadline, by_intent=self._by_intent(key)
                    )
                )
            finally:
                await client.disconnect()

        return _run_sync(call)
