"""Strands Agents (``strands-agents``): a tool that runs one of idemflow's
operations once per intended call, under a key derived from what the
agent's session holds of the call.

What Strands keeps, read in strands-agents 1.62: a session manager built
on a repository (``FileSessionManager``, ``S3SessionManager``, or a
``RepositorySessionManager`` over a repository of the app's) writes every
message as it is added (``MessageAddedEvent``), so the model's message
that asks for a call is in the session before the call runs. Each call
has a ``toolUseId``, written by the model. A process killed mid call
leaves that message with no result; the app makes the agent again on the
same session and sends the user's message again, and Strands first adds
a result saying "Tool was interrupted." to the call left open
(``Agent._convert_prompt_to_messages``). The model reads that, and writes
the call again, under a new ``toolUseId``, in a new message.

So the key (st1) names the intended call, not those IDs: the session and
the agent, the turn, the tool, the call's arguments (RFC 8785, less a
model-written ``idempotency_key``) and their occurrence among the turn's
calls of that tool with those arguments. The turn is the user's message
(its texts), and its place: how many of the session's earlier messages from the user
were answered to the end (a message of the model's that asks for no
call). A turn killed mid call never ended, so the message sent again is
the same turn, and the call written again has the same key and gets its
answer, a replay; the same words after the first were answered are
another turn. The session's whole history is read from its repository,
so a conversation manager that drops old messages from the agent's
window changes no key.

A call counts as an occurrence once its final answer is in the turn: a
call whose answer was pending (past a finite deadline) and that the model
writes again is the same call, under the same key. Two calls of one tool
with the same arguments in one message of the model's are two calls.

Needs the ``strands`` extra (``strands-agents``, Python 3.11+).
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from strands.session.repository_session_manager import RepositorySessionManager
from strands.tools.mcp import MCPAgentTool, MCPClient
from strands.types._events import ToolResultEvent
from strands.types.content import Message
from strands.types.tools import AgentTool, ToolResult, ToolSpec, ToolUse

from ._tooltext import RESUME, arguments, is_pending, outcome
from .client import AsyncClient, Client, Intent
from .errors import DeadlineError, NoDurableIdentityError
from .keys import call_arguments, call_digest, call_intent, canonical, derive_key, intent_fields_of
from .mcp import until_answered

__all__ = ["ARGS_KEY_SCHEME", "KEY_SCHEME", "IdemflowTool", "call_key", "durable_key", "durable_mcp_tools", "intended_call_key", "session_history"]

#: The scheme of a Strands tool call's key: the intended call, named by
#: its intent fields (a ticket's customer, never its wording).
KEY_SCHEME = "st2"
#: The intended call named by its whole arguments, which a model rewords:
#: the scheme before st2, for the calls in flight across the upgrade.
ARGS_KEY_SCHEME = "st1"

Intents = Mapping[str, Sequence[Mapping[str, str]]]


def call_key(
    session_id: str,
    agent_id: str,
    answered: int,
    prompt: Sequence[str],
    tool: str,
    args: Any,
    occurrence: int,
    *,
    fields: Sequence[Mapping[str, str]] = (),
    key_scheme: str = KEY_SCHEME,
) -> str:
    """The key of a call from its parts (clients/testdata/keys.json's
    strands vectors): the session, the agent, the turn (how many earlier
    messages of the user's were answered, and the message's texts), the
    tool, the call's intent (st2: call_intent(fields, args); st1: its whole
    arguments) and its occurrence."""
    turn = derive_key("turn", str(answered), canonical(list(prompt)))
    named = call_intent(fields, args) if key_scheme == KEY_SCHEME else call_arguments(args)
    return derive_key(key_scheme, session_id, agent_id, turn, tool, call_digest(named), str(occurrence))


def _is_prompt(m: Message) -> bool:
    """A message of the user's own: one with content other than tool results."""
    return m["role"] == "user" and any("toolResult" not in c for c in m["content"])


def _asks(m: Message) -> list[ToolUse]:
    return [c["toolUse"] for c in m["content"] if "toolUse" in c] if m["role"] == "assistant" else []


def _results(messages: Sequence[Message]) -> dict[str, ToolResult]:
    return {c["toolResult"]["toolUseId"]: c["toolResult"] for m in messages if m["role"] == "user" for c in m["content"] if "toolResult" in c}


def _final(result: ToolResult | None) -> bool:
    """Whether result is a final answer the model read: not missing, not
    Strands' "Tool was interrupted.", not a pending answer of idemflow's."""
    if result is None:
        return False
    text = " ".join(c.get("text", "") for c in result["content"])
    return not (result["status"] == "error" and (text == "Tool was interrupted." or is_pending(text)))


def intended_call_key(
    session_id: str, agent_id: str, history: Sequence[Message], tool_use_id: str, *, key_scheme: str = KEY_SCHEME, intents: Intents | None = None
) -> str | None:
    """The key of call tool_use_id from the session's whole history (see
    the module's comment); None when no message of the current turn asks
    for it. Under st2 a call is named by its tool's intent fields
    (intents[tool], or idemflow's own tool's), so a call reworded is the
    same call; under st1 by its whole arguments."""

    def fields(tool: str) -> Sequence[Mapping[str, str]]:
        if key_scheme != KEY_SCHEME:
            return ()
        return (intents or {})[tool] if tool in (intents or {}) else intent_fields_of(tool)

    def named(u: ToolUse) -> str:
        return call_intent(fields(u["name"]), u["input"])

    starts = [i for i, m in enumerate(history) if _is_prompt(m)]
    if not starts:
        return None
    start = starts[-1]
    turn = history[start:]
    at = next(((i, j) for i in range(len(turn) - 1, -1, -1) for j, u in enumerate(_asks(turn[i])) if u["toolUseId"] == tool_use_id), None)
    if at is None:
        return None
    i, j = at
    use = _asks(turn[i])[j]
    args = named(use)
    results = _results(turn)
    same = [u for m in turn[:i] for u in _asks(m) if u["name"] == use["name"] and named(u) == args]
    n = 1 + sum(1 for u in same if _final(results.get(u["toolUseId"])))
    n += sum(1 for u in _asks(turn[i])[:j] if u["name"] == use["name"] and named(u) == args)
    answered = 0
    for a, b in zip(starts, [*starts[1:], len(history)], strict=True):
        if a < start and any(m["role"] == "assistant" and not _asks(m) for m in history[a + 1 : b]):
            answered += 1
    # The message's texts: an image's or a document's bytes have no JSON form.
    texts = [c["text"] for c in history[start]["content"] if "text" in c]
    return call_key(session_id, agent_id, answered, texts, use["name"], use["input"], n, fields=fields(use["name"]), key_scheme=key_scheme)


def session_history(agent: Any) -> tuple[str, list[Message]]:
    """The ID of agent's session and every message its repository holds,
    the ones a conversation manager dropped from the agent's window too.
    Raises NoDurableIdentityError for an agent without a session manager
    on a repository: nothing it keeps outlives its process."""
    manager = getattr(agent, "_session_manager", None)
    if not isinstance(manager, RepositorySessionManager):
        raise NoDurableIdentityError(
            "the agent has no session manager on a repository (FileSessionManager, S3SessionManager, RepositorySessionManager), "
            "so nothing durable names its calls"
        )
    stored = manager.session_repository.list_messages(manager.session_id, agent.agent_id)
    return manager.session_id, [s.to_message() for s in stored]


def durable_key(agent: Any, tool_use: ToolUse, *, key_scheme: str = KEY_SCHEME, intents: Intents | None = None) -> str:
    """The key of the call tool_use that agent runs, from its session's
    history (intended_call_key). Raises NoDurableIdentityError for an agent
    without a session manager on a repository, or a call no message of the
    session's current turn asks for."""
    session_id, history = session_history(agent)
    key = intended_call_key(session_id, agent.agent_id, history, tool_use["toolUseId"], key_scheme=key_scheme, intents=intents)
    if key is None:
        raise NoDurableIdentityError(f"no message of session {session_id}'s current turn asks for call {tool_use['toolUseId']}")
    return key


class IdemflowTool(AgentTool):
    """A Strands tool that runs one of idemflow's operations (a ticket, an
    order, a declared operation, an HTTP tool) once per intended call.

    path is the operation's, or a function of the arguments; body makes the
    request's body from them (default: the arguments, as input_model reads
    them). The model reads {http_status, replayed, result}, or for a final
    refusal {http_status, error, problem, body, key}.

    By default a call waits for its final answer however long it takes,
    retrying under its key. A finite deadline (seconds) is for an app that
    prefers an answer to the agent: past it, the model reads that the call
    is pending under its key and must not be made again; written again, it
    is the same call, under the same key.

    intent is the operation's intent fields ([{"name", "norm"}], members of
    the call's arguments); idemflow's own tools' are known by name or
    path. The key names them (st2), and the request says so: the message
    sent again whose model rewords the title gets the first ticket, a
    replay naming what differed. key_scheme ARGS_KEY_SCHEME ("st1") names
    the whole arguments, as the release before st2 did.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        name: str,
        description: str,
        path: str | Callable[[dict[str, Any]], str],
        input_model: type[BaseModel],
        body: Callable[[dict[str, Any]], Any] | None = None,
        deadline: float = math.inf,
        intent: Sequence[Mapping[str, str]] | None = None,
        key_scheme: str = KEY_SCHEME,
    ) -> None:
        super().__init__()
        self._client, self._name, self._description, self._path = client, name, description, path
        self._model, self._body, self._deadline = input_model, body, deadline
        self._fields = tuple(intent) if intent is not None else intent_fields_of(name, path if isinstance(path, str) else None)
        self._key_scheme = key_scheme

    @property
    def tool_name(self) -> str:
        return self._name

    @property
    def tool_spec(self) -> ToolSpec:
        return {"name": self._name, "description": self._description, "inputSchema": {"json": self._model.model_json_schema()}}

    @property
    def tool_type(self) -> str:
        return "idemflow"

    async def stream(self, tool_use: ToolUse, invocation_state: dict[str, Any], **kwargs: Any) -> AsyncGenerator[Any, None]:
        yield ToolResultEvent(await self._call(tool_use, invocation_state.get("agent")))

    async def _call(self, tool_use: ToolUse, agent: Any) -> ToolResult:
        try:
            args = arguments(self._model, dict(tool_use["input"]))
        except ValidationError as e:
            return _result(tool_use, "error", f"invalid arguments, nothing was sent: {e}")
        try:
            key = durable_key(agent, tool_use, key_scheme=self._key_scheme, intents={self._name: self._fields})
        except NoDurableIdentityError as e:
            return _no_key(tool_use, self._name, e)
        path = self._path(args) if callable(self._path) else self._path
        # A key named by the intent fields (st2): idemflow compares on them.
        by_intent = bool(self._fields) and key.startswith(KEY_SCHEME + "_")
        intent = Intent(key, path, self._body(args) if self._body else args, by_intent=by_intent)
        kind, text = await outcome(self._client, intent, self._deadline, self._name, RESUME["strands"])
        return _result(tool_use, "success" if kind == "answer" else "error", text)


def _result(tool_use: ToolUse, status: str, text: str) -> ToolResult:
    """The result of call tool_use that the model reads: text."""
    return {"toolUseId": tool_use["toolUseId"], "status": status, "content": [{"text": text}]}  # type: ignore[typeddict-item]


def _no_key(tool_use: ToolUse, name: str, e: NoDurableIdentityError) -> ToolResult:
    """Why call tool_use was not sent. Strands hands what a tool raises to
    the model as an error; this one says why, and that nothing was sent."""
    return _result(tool_use, "error", f"NoDurableIdentityError: {name}: {e}; nothing was sent")


def durable_mcp_tools(mcp_client: MCPClient, *, names: Sequence[str] | None = None, deadline: float = math.inf, wait: float = 2.0) -> list[AgentTool]:
    """The tools of idemflow's MCP server (idemflow mcp) that mcp_client
    (Strands' MCPClient, started: inside its with) lists, as tools keyed
    as IdemflowTool keys its calls (st1, the model-written idempotency_key
    no part of it): each call sends that key in _meta, so the model's key
    decides nothing. This stands in for Strands' own MCP tools
    (Agent(tools=[mcp_client])), whose calls send the model's arguments
    only.

    A call idemflow holds longer than wait (seconds) is answered NO ANSWER
    YET; the tool calls again under the same key, which attaches to the
    same intent, until the final answer or deadline (seconds; by default
    none). Past deadline, the model reads that the call is pending under
    its key and must not be made again. names: the tools to take (default:
    all)."""
    return [
        _DurableMcpTool(t.mcp_tool, mcp_client, deadline=deadline, wait=wait) for t in mcp_client.list_tools_sync() if names is None or t.tool_name in names
    ]


class _DurableMcpTool(MCPAgentTool):
    """One of idemflow's MCP tools, called under its intended call's key."""

    def __init__(self, tool: Any, mcp_client: MCPClient, *, deadline: float, wait: float) -> None:
        super().__init__(tool, mcp_client)
        self._deadline, self._wait = deadline, wait

    async def stream(self, tool_use: ToolUse, invocation_state: dict[str, Any], **kwargs: Any) -> AsyncGenerator[Any, None]:
        yield ToolResultEvent(await self._call(tool_use, invocation_state.get("agent")))

    async def _call(self, tool_use: ToolUse, agent: Any) -> ToolResult:
        try:
            key = durable_key(agent, tool_use)
        except NoDurableIdentityError as e:
            return _no_key(tool_use, self.tool_name, e)
        by_intent = bool(intent_fields_of(self.tool_name)) and key.startswith(KEY_SCHEME + "_")

        async def call(meta: dict[str, Any]) -> ToolResult:
            return await self.mcp_client.call_tool_async(tool_use["toolUseId"], self.mcp_tool.name, dict(tool_use["input"]), meta=meta)

        async def settle(answer: ToolResult, end: float) -> ToolResult | None:
            # NO ANSWER YET: the same call again, under the same key.
            pending = answer["status"] == "error" and any(c.get("text", "").startswith("NO ANSWER YET") for c in answer["content"])
            return None if pending else answer

        try:
            return await until_answered(
                call, settle, key=key, tool=self.tool_name, resume=RESUME["strands"], deadline=self._deadline, wait=self._wait, by_intent=by_intent
            )
        except DeadlineError as e:
            return _result(tool_use, "error", str(e))
