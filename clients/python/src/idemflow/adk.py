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
ID and the same event.

The key names the intended call (ad2), not those IDs: the app, the user
and the session, the turn, the tool, the call's arguments (RFC 8785) and
their occurrence among the invocation's calls of that tool with those
arguments. The turn is the user's message the invocation answers, and its
place: how many earlier invocations of the session's live history (a
rewind, ``Runner.rewind_async``, takes the rewound ones out, as ADK's
prompt does) answered a user message to the end. So a resumed invocation,
the message sent again after a crash (an app that is not resumable: the
killed invocation never ended), and the message sent again after a
rewind (a regenerate) are the same turn, and the model's call, written
again under a new ID in a new event, is the same key; a later message in
the same words, after the first was answered, is another turn. (ad1, the
invocation, the event and the call's IDs, is kept for the calls in flight
across the upgrade: key_scheme.)

Needs the ``adk`` extra (``google-adk``, Python 3.10+).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions.session import Session
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.mcp_tool.mcp_tool import McpTool
from google.adk.tools.mcp_tool.mcp_toolset import McpToolset
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from pydantic import BaseModel

from ._tooltext import RESUME, answer_text, arguments, pending_text, refusal_text, request_intent, send
from .client import AsyncClient, Client, Intent
from .errors import DeadlineError, NoDurableIdentityError, ProblemError
from .keys import call_arguments, call_intent, canonical, derive_key, intent_fields_of, occurrence
from .mcp import call_until_answered

__all__ = [
    "ARGS_KEY_SCHEME",
    "KEY_SCHEME",
    "LEGACY_KEY_SCHEME",
    "IdemflowTool",
    "call_key",
    "durable_key",
    "durable_mcp_toolset",
    "intended_call_key",
    "live_events",
    "run_durably",
]

#: The scheme of an ADK tool call's key: the intended call, named by its
#: intent fields (a ticket's customer, never its wording).
KEY_SCHEME = "ad3"
#: The intended call named by its whole arguments, which a model rewords:
#: the scheme before ad3, for the calls in flight across the upgrade.
ARGS_KEY_SCHEME = "ad2"
#: The scheme before ad2 (the invocation, the event and the call's IDs),
#: for the calls in flight across the upgrade (docs/agents/adk.md).
LEGACY_KEY_SCHEME = "ad1"


def call_key(app: str, user: str, session: str, invocation: str, event: str, call_id: str, tool: str) -> str:
    """The ad1 key of one tool call from its parts (clients/testdata/keys.json's
    adk vectors)."""
    return derive_key(LEGACY_KEY_SCHEME, app, user, session, invocation, event, call_id, tool)


def live_events(events: Sequence[Event]) -> list[Event]:
    """The events a rewind left: an event that rewinds to before
    invocation X takes out itself and every event from X's first one on,
    and the rest stay in their order."""
    first: dict[str, int] = {}
    for i, e in enumerate(events):
        if e.invocation_id and e.invocation_id not in first:
            first[e.invocation_id] = i
    kept: list[tuple[int, Event]] = []
    for i, e in enumerate(events):
        target = e.actions.rewind_before_invocation_id if e.actions else None
        if target:
            start = first.get(target, i)
            kept = [(j, k) for j, k in kept if j < start]
        else:
            kept.append((i, e))
    return [e for _, e in kept]


def _user_text(e: Event) -> list[str] | None:
    """The texts of a user's message, or None for another event (a model's,
    or a user event of function responses: a confirmation)."""
    if e.author != "user" or e.content is None:
        return None
    texts = [p.text for p in e.content.parts or [] if p.text is not None]
    return texts or None


def intended_call_key(
    app: str,
    user: str,
    session: str,
    events: Sequence[Event],
    invocation: str,
    call_id: str,
    tool: str,
    *,
    key_scheme: str = KEY_SCHEME,
    intent: Callable[[dict[str, Any]], str] | None = None,
) -> str | None:
    """The ad3 key (under key_scheme ad2, named by the whole arguments in
    place of intent(args), call_intent of the request the call makes) of
    the call call_id of invocation, from the session's
    events (see the module's comment): derive('turn', the number of
    earlier live invocations that answered a user's message to the end,
    the RFC 8785 form of this invocation's message's texts), the tool, the
    digest of the call's arguments (RFC 8785, less the model-written
    idempotency_key of idemflow's MCP tools) and their occurrence among
    the invocation's live calls of that tool with those arguments. None
    when no live event of the invocation holds the call."""
    live = live_events(events)
    at = next(
        (i for i in range(len(live) - 1, -1, -1) if live[i].invocation_id == invocation and any(c.id == call_id for c in live[i].get_function_calls())), -1
    )
    if at < 0:
        return None
    start = next(i for i, e in enumerate(live) if e.invocation_id == invocation)
    message = next((t for e in live if e.invocation_id == invocation and (t := _user_text(e)) is not None), None)
    if message is None:
        # An invocation started by no message of the user's (a sub-agent's
        # own): its ID is all that names its turn.
        turn = derive_key("turn", "invocation", invocation)
    else:
        asked = {e.invocation_id for e in live[:start] if _user_text(e) is not None}
        answered = {e.invocation_id for e in live[:start] if e.author != "user" and e.is_final_response() and e.invocation_id in asked}
        turn = derive_key("turn", str(len(answered)), canonical(message))

    def named(c: types.FunctionCall) -> str:
        args = dict(c.args or {})
        return intent(args) if intent is not None and key_scheme == KEY_SCHEME and c.name == tool else call_arguments(args)

    calls = [(c.id or "", c.name or "", named(c)) for e in live[start : at + 1] if e.invocation_id == invocation for c in e.get_function_calls()]
    found = occurrence(calls, call_id)
    assert found is not None  # live[at] holds the call
    args, n = found
    return derive_key(key_scheme, app, user, session, turn, tool, args, str(n))


def _key(session: Session, invocation: str, call_id: str, tool_name: str, key_scheme: str, intent: Callable[[dict[str, Any]], str] | None = None) -> str:
    """The key of the call call_id of invocation in session, under
    key_scheme. Raises NoDurableIdentityError when no event of the
    invocation in the session holds it."""
    if key_scheme not in (KEY_SCHEME, ARGS_KEY_SCHEME, LEGACY_KEY_SCHEME):
        raise ValueError(f"key_scheme {key_scheme!r}: {KEY_SCHEME}, {ARGS_KEY_SCHEME} or {LEGACY_KEY_SCHEME}")
    missing = NoDurableIdentityError(
        f"{tool_name}: no event of invocation {invocation} in session {session.id} holds call {call_id}, so nothing durable names it"
    )
    if key_scheme in (KEY_SCHEME, ARGS_KEY_SCHEME):
        key = intended_call_key(
            session.app_name, session.user_id, session.id, session.events, invocation, call_id, tool_name, key_scheme=key_scheme, intent=intent
        )
        if key is None:
            raise missing
        return key
    event = _call_event(session.events, invocation, call_id)
    if event is None:
        raise missing
    return call_key(session.app_name, session.user_id, session.id, invocation, event.id, call_id, tool_name)


def durable_key(tool_context: ToolContext, tool_name: str, key_scheme: str = KEY_SCHEME, intent: Callable[[dict[str, Any]], str] | None = None) -> str:
    """The key of the call tool_context runs: see the module's comment.

    Raises NoDurableIdentityError when the call has no ID, or no event of
    its invocation in the session holds it: nothing that survives a resume
    would then name it, and a key made anyway would protect nothing.
    """
    call_id = tool_context.function_call_id
    if not call_id:
        raise NoDurableIdentityError(f"{tool_name}: the call has no ID, so no key can survive a resume")
    return _key(tool_context.session, tool_context.invocation_id, call_id, tool_name, key_scheme, intent)


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

    intent is the operation's intent fields ([{"name", "norm"}], as its
    declaration publishes them); idemflow's own tools' are known by name
    or path. The key names the request's intent fields (ad3), and the
    request says so: a rewind or a message sent again whose model rewords
    the title gets the first ticket, a replay naming what differed.

    key_scheme ARGS_KEY_SCHEME ("ad2") keys a call by its whole arguments
    and LEGACY_KEY_SCHEME ("ad1") by its IDs, as the releases before ad3
    and ad2 did, for an invocation in flight across the upgrade.
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
        key_scheme: str = KEY_SCHEME,
        intent: Sequence[Mapping[str, str]] | None = None,
    ) -> None:
        super().__init__(name=name, description=description)
        self._client = client
        self._path = path
        self._args_schema = args_schema
        self._body = body
        self._deadline = deadline
        self._require_confirmation = require_confirmation
        self._key_scheme = key_scheme
        self._fields = tuple(intent) if intent is not None else intent_fields_of(name, path if isinstance(path, str) else None)

    def _intent(self, raw: dict[str, Any]) -> str:
        """What names a call beyond its turn: the request it makes, by the
        operation's intent fields."""
        return request_intent(self._fields, self._args_schema, self._body)(raw)

    def _get_declaration(self) -> types.FunctionDeclaration:
        return types.FunctionDeclaration(name=self.name, description=self.description, parameters_json_schema=self._args_schema.model_json_schema())

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        key = durable_key(tool_context, self.name, self._key_scheme, self._intent)
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
        key = _key(session, event.invocation_id, call.id, self.name, self._key_scheme, self._intent)
        try:
            parsed = arguments(self._args_schema, dict(call.args or {}))
        except ValueError as e:
            return {"error": "InvalidArguments", "detail": str(e), "key": key}
        answer: dict[str, Any] = await self._send(key, parsed)
        return answer

    async def _send(self, key: str, args: dict[str, Any]) -> Any:
        p = self._path(args) if callable(self._path) else self._path
        try:
            by_intent = bool(self._fields) and key.startswith(KEY_SCHEME + "_")
            intent = Intent(key, p, self._body(args) if self._body else args, by_intent=by_intent)
            return json.loads(answer_text(await send(self._client, intent, self._deadline)))
        except ProblemError as e:
            return json.loads(refusal_text(e, key))
        except DeadlineError as e:
            raise DeadlineError(pending_text(self.name, key, RESUME["adk"])) from e


# The key of the call an MCP tool of durable_mcp_toolset's is running, and
# where its session's call_tool notes a pending answer: the tool's own run,
# in the same task, reads and writes them.
_mcp_key: ContextVar[tuple[str, list[DeadlineError], bool] | None] = ContextVar("idemflow_adk_mcp_key", default=None)


def durable_mcp_toolset(toolset: McpToolset, *, deadline: float = 300.0, wait: float = 2.0, key_scheme: str = KEY_SCHEME) -> McpToolset:
    """toolset (ADK's McpToolset, pointed at idemflow mcp), its tools'
    calls made as IdemflowTool makes them: each sends, in _meta, the key
    durable_key derives for it from the session's events (ad2, the same
    the native tool gets for the same call), so the idempotency_key the
    model writes decides nothing; a call whose answer has not come waits
    on its task (idemflow.mcp) up to deadline (seconds), and past it raises
    DeadlineError, which ends the invocation: resume it (run_durably), and
    the call is sent again under its key.

    The tools stay ADK's McpTools, with their sessions, confirmation and
    everything else: only their run, which names the key, and the
    session's call_tool, which sends it, are wrapped. Returns toolset,
    changed in place."""
    plain_get_tools = toolset.get_tools

    async def get_tools(readonly_context: Any = None) -> list[BaseTool]:
        tools = await plain_get_tools(readonly_context)
        for t in tools:
            if isinstance(t, McpTool) and not getattr(t, "_idemflow_keyed", False):
                _key_mcp_tool(t, deadline, wait, key_scheme)
        return list(tools)

    toolset.get_tools = get_tools
    toolset._idemflow_keyed = True  # type: ignore[attr-defined]
    return toolset


def _key_mcp_tool(tool: McpTool, deadline: float, wait: float, key_scheme: str) -> None:
    plain_run = tool.run_async
    plain_session = tool._create_session

    async def run_async(*, args: dict[str, Any], tool_context: ToolContext) -> Any:
        pending: list[DeadlineError] = []
        fields = intent_fields_of(tool.name)
        key = durable_key(tool_context, tool.name, key_scheme, lambda a: call_intent(fields, a))
        token = _mcp_key.set((key, pending, bool(fields) and key.startswith(KEY_SCHEME + "_")))
        try:
            out = await plain_run(args=args, tool_context=tool_context)
        finally:
            _mcp_key.reset(token)
        if pending:
            # McpTool hands a call's exception to the model as an error
            # (ADK's graceful MCP error handling), which it would call again
            # under a new ID: a pending answer ends the invocation instead.
            raise pending[0]
        return out

    async def create_session(*, headers: dict[str, str] | None) -> Any:
        return _KeyedSession(await plain_session(headers=headers), deadline, wait)

    async def answer(session: Session, event: Event, call: types.FunctionCall) -> dict[str, Any]:
        # A stored call whose invocation ended before its answer (the
        # tool raised DeadlineError), sent again under the key it had
        # (run_durably): the response, as ADK's McpTool gives it.
        assert call.id is not None
        fields = intent_fields_of(tool.name)
        key = _key(session, event.invocation_id, call.id, tool.name, key_scheme, lambda a: call_intent(fields, a))
        token = _mcp_key.set((key, [], bool(fields) and key.startswith(KEY_SCHEME + "_")))
        try:
            result = await (await create_session(headers=None)).call_tool(tool.name, dict(call.args or {}))
        finally:
            _mcp_key.reset(token)
        out: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        out.pop("resultType", None)
        return out

    tool.run_async = run_async  # type: ignore[method-assign]
    tool._create_session = create_session
    tool._idemflow_keyed = True  # type: ignore[attr-defined]
    tool._idemflow_answer = answer  # type: ignore[attr-defined]


class _KeyedSession:
    """An MCP session whose call_tool sends the running call's key and
    waits on its task; everything else is the session's."""

    def __init__(self, session: Any, deadline: float, wait: float) -> None:
        self._session = session
        self._deadline = deadline
        self._wait = wait

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *args: Any, meta: dict[str, Any] | None = None, **kw: Any) -> Any:
        running = _mcp_key.get()
        if running is None:
            return await self._session.call_tool(name, arguments, *args, meta=meta, **kw)
        key, pending, by_intent = running
        try:
            return await call_until_answered(
                lambda m: self._session.call_tool(name, arguments, *args, meta={**(meta or {}), **m}, **kw),
                self._session,
                key=key,
                tool=name,
                resume=RESUME["adk"],
                deadline=self._deadline,
                wait=self._wait,
                by_intent=by_intent,
            )
        except DeadlineError as e:
            pending.append(e)
            raise


def unfinished_invocation(events: list[Event]) -> str | None:
    """The session's last invocation, when it did not end: its last event
    is not the end of its agent (ADK writes one when an invocation of a
    resumable app ends), nor a rewind."""
    if not events:
        return None
    last = events[-1]
    if last.actions.end_of_agent or last.actions.rewind_before_invocation_id:
        return None  # ended, or a rewind: the next message starts a turn
    return last.invocation_id


def unanswered_calls(events: list[Event], invocation: str) -> list[tuple[Event, types.FunctionCall]]:
    """The calls of invocation that have no response in the session, with
    the events that hold them."""
    answered = {r.id for e in events if e.invocation_id == invocation for r in e.get_function_responses()}
    return [(e, c) for e in events if e.invocation_id == invocation for c in e.get_function_calls() if c.id not in answered]


Answer = Callable[[Session, Event, types.FunctionCall], Awaitable[dict[str, Any]]]


async def _answerers(agent: Any) -> dict[str, Answer]:
    """How each tool of idemflow's in agent and its sub-agents (an
    IdemflowTool, or a tool of a durable_mcp_toolset) answers a stored call
    sent again under its key, by the tool's name."""
    found: dict[str, Answer] = {}
    for t in getattr(agent, "tools", []) or []:
        if isinstance(t, IdemflowTool):
            found[t.name] = t.answer
        elif isinstance(t, McpToolset) and getattr(t, "_idemflow_keyed", False):
            found.update({m.name: m._idemflow_answer for m in await t.get_tools() if hasattr(m, "_idemflow_answer")})
    for sub in getattr(agent, "sub_agents", []) or []:
        found.update(await _answerers(sub))
    return found


async def run_durably(runner: Runner, *, user_id: str, session_id: str, new_message: types.Content) -> AsyncIterator[Event]:
    """Runs one turn of a resumable app, or finishes the one it was in:

    - the session's last invocation did not end (the process was killed
      in it): it is resumed with its invocation_id, and ADK runs its
      unanswered calls again, under the keys they had, which replay;
    - it ended in an error while a call of an IdemflowTool, or of a
      durable_mcp_toolset's tool, had no answer (the tool raised
      DeadlineError: ADK records a tool's exception and never runs that
      call again): each such call is sent again under its key,
      and its final answer is handed to the invocation as the call's
      FunctionResponse, as ADK takes a human's answer to a paused call;
    - otherwise new_message starts a new invocation (so does a message
      that answers a paused call, such as a confirmation: ADK finds the
      invocation from the call it answers).

    A new_message in other words than the unfinished invocation's (a
    later turn sent before the last one was resumed) is a turn of its own:
    the last one is finished first, as above, then new_message starts the
    next invocation, never dropped for the last one.

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
    finish: AsyncIterator[Event] | None = None
    if any(p.function_response for p in new_message.parts or []):
        invocation = None
    elif invocation is not None and session.events[-1].error_code:
        tools = await _answerers(runner.agent)
        parts = [
            types.Part(function_response=types.FunctionResponse(id=call.id, name=call.name, response=await tools[call.name](session, event, call)))
            for event, call in unanswered_calls(session.events, invocation)
            if call.name in tools
        ]
        if parts:
            finish = runner.run_async(user_id=user_id, session_id=session_id, new_message=types.Content(role="user", parts=parts), yield_user_message=True)
    elif invocation is not None:
        finish = runner.run_async(user_id=user_id, session_id=session_id, invocation_id=invocation)
    if finish is not None:
        async for event in finish:
            yield event
        if invocation is not None and _texts(new_message) == _asked(session.events, invocation):
            return  # the same turn, sent again: finished
        # Another turn, sent while the last one had not ended: it is a
        # turn of its own, after the last one, never dropped for it.
    async for event in runner.run_async(user_id=user_id, session_id=session_id, new_message=new_message):
        yield event


def _texts(content: types.Content | None) -> list[str]:
    return [p.text for p in (content.parts if content is not None else None) or [] if p.text is not None]


def _asked(events: list[Event], invocation: str) -> list[str]:
    """The user's words that started invocation."""
    for e in events:
        if e.invocation_id == invocation and e.author == "user" and _texts(e.content):
            return _texts(e.content)
    return []
