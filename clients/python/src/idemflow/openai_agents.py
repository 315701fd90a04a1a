"""The OpenAI Agents SDK on its own (no Temporal): a function tool whose
idempotency key is derived from the SDK's own identity of the call, so
that a run resumed from its saved RunState, which runs the call again,
replays the first answer instead of taking effect twice.

The SDK keeps a run's pending tool calls, with their IDs, only in a
RunState, and a run has one to save only where it is interrupted: a tool
that needs approval. So the key rests on the RunState the app saves
there, before the call runs (run_durably below, or the app's own loop).
A run that crashes mid tool call without one has nothing that kept the
call: it starts again, the model writes the call again with new IDs, and
that is a new key and a second effect. The README says so, and the tests
show it.

The key names the intended call (oa2): the run's group
(RunConfig.group_id, the SDK's name for a conversation or thread: the app
passes the same one to every run and resume of it), the turn (the user
message the run answers: the number of user messages in the run's input
and the last one's content, and the previous response's ID where the
server keeps the conversation), the tool, the call's arguments (RFC 8785)
and their occurrence among the run's calls of that tool with those
arguments. run_durably reads all of it from the RunState it saved, and
hands each call its key: a run sent again with the history cut before the
model's answer (a regenerate), or a turn killed before its RunState was
saved and sent again, makes the model write the same call under new IDs,
and it is the same key. A call that runs where run_durably planned none
(no approval, or a run whose conversation the server keeps by
conversation_id, whose input holds only the new message) is keyed as
before (oa1): the ID of the model's function-call item, the call's ID and
the tool. A Chat Completions model gives its items no ID (the SDK's
placeholder): the call ID alone then tells calls apart only when the
provider never reuses one, as OpenAI's does, which the tool is told with
call_ids_unique=True.

Needs the ``openai-agents`` extra: ``pip install 'idemflow[openai-agents]'``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from agents import Agent, FunctionTool, RunConfig, RunContextWrapper, Runner, RunResult, RunState
from agents.mcp import MCPServer
from agents.mcp.util import MCPToolMetaContext
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.strict_schema import ensure_strict_json_schema
from agents.tool import default_tool_error_function
from agents.tool_context import ToolContext
from pydantic import BaseModel

from ._tooltext import RESUME, answer_text, arguments, pending_text, refusal_text, send
from .client import AsyncClient, Client, Intent
from .errors import DeadlineError, NoDurableIdentityError, ProblemError
from .keys import call_arguments, call_intent, canonical, derive_key, intent_fields_of, occurrence
from .mcp import META_FINGERPRINT, META_KEY, again_until, call_until_answered

__all__ = [
    "ARGS_KEY_SCHEME",
    "CALL_KEY_SCHEME",
    "KEY_SCHEME",
    "durable_key",
    "durable_mcp_server",
    "idemflow_function_tool",
    "intended_call_keys",
    "run_durably",
]

#: The scheme of an OpenAI Agents SDK tool call's key: the intended call
#: by its intent fields (a ticket's customer, never its wording), which
#: run_durably plans from the saved RunState.
KEY_SCHEME = "oa3"
#: The intended call by its whole arguments, which a model rewords: the
#: release before oa3, for a RunState saved across the upgrade.
ARGS_KEY_SCHEME = "oa2"
#: The scheme of a call run_durably planned no key for (and of every call
#: before oa2): the call's item and call IDs.
CALL_KEY_SCHEME = "oa1"

# The keys run_durably planned for the calls of the run it is running, by
# scheme and call ID: the tools it runs read them (the run's tasks copy
# this context).
_planned: ContextVar[Mapping[str, Mapping[str, str]] | None] = ContextVar("idemflow_openai_agents_planned", default=None)

# The attribute idemflow_function_tool sets on its tool: the operation's
# intent fields, which run_durably's plan reads from the agent's tools.
_INTENT_ATTR = "idemflow_intent"


def intended_call_keys(
    group: str,
    run_input: str | Sequence[Any],
    calls: Sequence[Mapping[str, Any]],
    previous_response_id: str | None = None,
    turn_id: str | None = None,
    *,
    key_scheme: str = KEY_SCHEME,
    intents: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
) -> dict[str, str]:
    """The key of each function call of a run, by call ID: from the group
    (the conversation), the turn (the app's turn_id where it gives one,
    else previous_response_id, the number of user messages in run_input
    and the last one's content, in RFC 8785 form; a string input is one
    user message), the tool, the call's intent and its occurrence (from 1)
    among calls, the run's function calls ({call_id, name, arguments}) in
    their order, of that tool with that intent. Under oa3 the intent is
    the call's intent fields (call_intent: intents[name], or idemflow's
    own tools' by name), so a call reworded is the same call; under oa2,
    or for a tool with none, its arguments (RFC 8785, less the
    model-written idempotency_key of idemflow's MCP tools)."""
    if key_scheme not in (KEY_SCHEME, ARGS_KEY_SCHEME):
        raise ValueError(f"key_scheme {key_scheme!r}: {KEY_SCHEME} or {ARGS_KEY_SCHEME}")
    if turn_id:
        turn = derive_key("turn", turn_id)
    else:
        if isinstance(run_input, str):
            users: list[Any] = [run_input]
        else:
            users = [i.get("content") for i in run_input if isinstance(i, Mapping) and i.get("role") == "user" and i.get("type", "message") == "message"]
        turn = derive_key("turn", previous_response_id or "", str(len(users)), canonical(users[-1] if users else None))

    def named(c: Mapping[str, Any]) -> str:
        fields = ((intents or {}).get(c["name"]) or intent_fields_of(c["name"])) if key_scheme == KEY_SCHEME else ()
        if fields:
            try:
                return call_intent(fields, json.loads(c.get("arguments") or "{}"))
            except ValueError:
                pass
        return _arguments(c.get("arguments"))

    run = [(c["call_id"], c["name"], named(c)) for c in calls]
    keys: dict[str, str] = {}
    for call_id, name, _ in run:
        found = occurrence(run, call_id)
        assert found is not None  # run holds call_id
        keys[call_id] = derive_key(key_scheme, group, turn, name, found[0], str(found[1]))
    return keys


def _arguments(raw: str | None) -> str:
    """A call's arguments in their RFC 8785 form, less a top-level
    idempotency_key: idemflow's MCP tools take one the model writes, new
    each time it writes the call, so it is no part of the intended call.
    Text that is not JSON (the model's own mistake) as written."""
    try:
        return call_arguments(json.loads(raw or "{}"))
    except ValueError:
        return str(raw)


def _plan(state: RunState[Any], group: str, turn_id: str | None, intents: Mapping[str, Sequence[Mapping[str, str]]]) -> dict[str, dict[str, str]]:
    """The keys of the calls of the run state holds (intended_call_keys),
    under each scheme, from its serialized form; none where the server
    keeps the conversation by ID, whose input holds only the new message."""
    j = state.to_json()
    if j.get("conversation_id") and not turn_id:
        return {}
    calls = [
        i["raw_item"]
        for i in j.get("generated_items", [])
        if i.get("type") == "tool_call_item" and isinstance(i.get("raw_item"), dict) and i["raw_item"].get("type") == "function_call"
    ]
    return {
        scheme: intended_call_keys(group, j.get("original_input") or [], calls, j.get("previous_response_id"), turn_id, key_scheme=scheme, intents=intents)
        for scheme in (KEY_SCHEME, ARGS_KEY_SCHEME)
    }


def _intents(agent: Agent[Any], given: Mapping[str, Sequence[Mapping[str, str]]] | None) -> dict[str, Sequence[Mapping[str, str]]]:
    """The intent fields of the agent's tools, by name: those its
    idemflow_function_tools declare, and those the app gives (a team's
    tools over MCP)."""
    out: dict[str, Sequence[Mapping[str, str]]] = {}
    for t in getattr(agent, "tools", None) or []:
        fields = getattr(t, _INTENT_ATTR, None)
        if fields:
            out[t.name] = fields
    return {**out, **(given or {})}


# The member run_durably adds to the RunState JSON it saves: the turn
# whose run saved it. The SDK reads its own members and ignores the rest.
_RUN_MEMBER = "idemflow"


def _run_turn(run_input: str | Sequence[Any], turn_id: str | None) -> str:
    """What names the turn a run_durably call runs: the app's turn_id, or
    else the whole input it was sent (RFC 8785). Stricter than the key's
    turn on purpose: a state is resumed only by the very turn that saved
    it, and a turn taken for a new one is still keyed as the same intended
    call."""
    return derive_key("run", turn_id) if turn_id else derive_key("run", "", canonical(run_input))


def _dump(state: RunState[Any], turn: str) -> str:
    return json.dumps({**state.to_json(), _RUN_MEMBER: {"turn": turn}}, indent=2)


def _answers(saved: str, turn: str) -> bool:
    """Whether the state saved is the run of this turn. A state saved
    before run_durably marked its turn is compared by the input it holds."""
    try:
        j = json.loads(saved)
    except ValueError:
        return True  # not ours to judge: the SDK says what is wrong with it
    mark = j.get(_RUN_MEMBER) if isinstance(j, dict) else None
    if isinstance(mark, dict):
        return bool(mark.get("turn") == turn)
    original = j.get("original_input") if isinstance(j, dict) else None
    return original is not None and _run_turn(original, None) == turn


@contextmanager
def _planning(keys: Mapping[str, Mapping[str, str]]) -> Iterator[None]:
    token = _planned.set(keys)
    try:
        yield
    finally:
        _planned.reset(token)


def durable_key(ctx: ToolContext[Any], tool_name: str, *, call_ids_unique: bool = False, key_scheme: str = KEY_SCHEME) -> str:
    """The key of one tool call: the one run_durably planned for it (oa3,
    the intended call by its intent fields; oa2 by its arguments), or else
    (oa1) from the run's group_id, the model's function-call item ID, the
    call's ID and the tool's name.

    Raises NoDurableIdentityError when the run has no group_id (every run
    and resume of one conversation must pass the same), or the call's item
    has no ID and call_ids_unique was not given: a key made anyway would
    either protect nothing across a resume or answer a later turn that
    reuses the call ID with this one's replay.
    """
    group = ctx.run_config.group_id if ctx.run_config is not None else None
    if not group:
        raise NoDurableIdentityError(
            f"{tool_name}: the run has no group_id (pass run_config=RunConfig(group_id=<the conversation's ID>) to every run and"
            " resume of it), so no key can tell this conversation's calls from another's"
        )
    if not ctx.tool_call_id:
        raise NoDurableIdentityError(f"{tool_name}: the call has no ID, so no key can survive a resume")
    if key_scheme not in (KEY_SCHEME, ARGS_KEY_SCHEME, CALL_KEY_SCHEME):
        raise ValueError(f"key_scheme {key_scheme!r}: {KEY_SCHEME}, {ARGS_KEY_SCHEME} or {CALL_KEY_SCHEME}")
    planned = ((_planned.get() or {}).get(key_scheme) or {}).get(ctx.tool_call_id)
    if planned is not None:
        return planned
    item_id = ctx.tool_call.id if ctx.tool_call is not None else None
    if not item_id or item_id == FAKE_RESPONSES_ID:
        if not call_ids_unique:
            raise NoDurableIdentityError(
                f"{tool_name}: the model's function-call item has no ID (a Chat Completions model), so call {ctx.tool_call_id}"
                " alone would name this call, and a provider that numbers calls per response brings it back in a later turn;"
                " pass call_ids_unique=True only if the provider never reuses a call ID (OpenAI's does not)"
            )
        item_id = ""
    return derive_key(CALL_KEY_SCHEME, group, item_id, ctx.tool_call_id, tool_name)


def idemflow_function_tool(
    client: Client | AsyncClient,
    *,
    name: str,
    description: str,
    path: str | Callable[[dict[str, Any]], str],
    args_schema: type[BaseModel],
    body: Callable[[dict[str, Any]], Any] | None = None,
    deadline: float = 300.0,
    needs_approval: bool = True,
    call_ids_unique: bool = False,
    strict_json_schema: bool = True,
    key_scheme: str = KEY_SCHEME,
    intent: Sequence[Mapping[str, str]] | None = None,
) -> FunctionTool:
    """A function tool that runs one of idemflow's operations (a ticket, an
    order, a declared operation, an HTTP tool) exactly once per tool call,
    however often a resumed run calls it.

    path is the operation's (/v1/tickets, /v1/tools/refund_create) or a
    function of the arguments; body makes the request's body from them
    (default: the arguments). The model reads JSON: {http_status,
    replayed, result}, or for a final refusal {http_status, error,
    problem, body, key}.

    needs_approval (default True) interrupts the run before every call,
    so that the app saves the RunState, with the call's IDs, before the
    call can take effect (run_durably). Turn it off only for a run that
    the app can lose whole: a crash then re-asks the model, and the new
    call it writes is a second effect.

    intent is the operation's intent fields ([{"name", "norm"}], as its
    declaration publishes them); idemflow's own tools' are known by name
    or path. run_durably keys a call by them (oa3), over the call's
    arguments, and the request says so (Idempotency-Fingerprint: intent):
    a turn sent again whose model rewords the title gets the first
    ticket, a replay whose answer names what differed.

    key_scheme ARGS_KEY_SCHEME ("oa2") keys a call by its whole arguments
    and CALL_KEY_SCHEME ("oa1") by its IDs, as the releases before oa3 and
    oa2 did, for a RunState saved across the upgrade.

    deadline is how long one call waits for its final answer (seconds).
    When it ends, the tool raises DeadlineError, which fails the run
    (the SDK re-raises a tool's exception, wrapped in its UserError): an
    answer still pending may have taken effect, so it is never the
    model's to read and retry. Resume the run from its saved RunState:
    the call runs again under the same key and gets its answer.
    """
    schema = args_schema.model_json_schema()
    if strict_json_schema:
        schema = ensure_strict_json_schema(schema)
    fields = tuple(intent) if intent is not None else intent_fields_of(name, path if isinstance(path, str) else None)

    async def invoke(ctx: ToolContext[Any], raw: str) -> str:
        key = durable_key(ctx, name, call_ids_unique=call_ids_unique, key_scheme=key_scheme)
        try:
            args = arguments(args_schema, json.loads(raw or "{}"))
        except ValueError as e:  # bad JSON, or pydantic's ValidationError
            # The model's own mistake, and nothing was sent: its own to fix.
            return json.dumps({"error": "InvalidArguments", "detail": str(e), "key": key}, ensure_ascii=False)
        p = path(args) if callable(path) else path
        try:
            by_intent = bool(fields) and key.startswith(KEY_SCHEME + "_")
            return answer_text(await send(client, Intent(key, p, body(args) if body else args, by_intent=by_intent), deadline))
        except ProblemError as e:
            return refusal_text(e, key)
        except DeadlineError as e:
            raise DeadlineError(pending_text(name, key, RESUME["openai_agents"])) from e

    made = FunctionTool(
        name=name,
        description=description,
        params_json_schema=schema,
        on_invoke_tool=invoke,
        strict_json_schema=strict_json_schema,
        needs_approval=needs_approval,
    )
    setattr(made, _INTENT_ATTR, fields)
    return made


def durable_mcp_server(
    server: MCPServer,
    *,
    deadline: float = 300.0,
    wait: float = 2.0,
    call_ids_unique: bool = False,
    key_scheme: str = KEY_SCHEME,
) -> MCPServer:
    """server (an MCPServerStdio, MCPServerStreamableHttp, … pointed at
    idemflow mcp), its tool calls made as idemflow_function_tool makes
    them: each sends, in _meta, the key durable_key derives for it, the
    same the native tool gets for the same call, so the idempotency_key
    the model writes decides nothing; a call whose answer has not come
    waits on its task (idemflow.mcp) up to deadline (seconds), and past
    it raises DeadlineError, which fails the run instead of reaching the
    model. Resume it from its saved RunState (run_durably, with the
    server's require_approval="always", so that the call's IDs are saved
    before it runs): the call runs again under the same key.

    wait (seconds) is how long idemflow holds each call before answering
    with its task: keep it below the server's client_session_timeout_seconds.
    Returns server, changed in place."""

    def meta(ctx: MCPToolMetaContext) -> dict[str, Any]:
        if not isinstance(ctx.run_context, ToolContext):
            raise NoDurableIdentityError(f"{ctx.tool_name}: called outside a tool call, so no key can survive a resume")
        key = durable_key(ctx.run_context, ctx.tool_name, call_ids_unique=call_ids_unique, key_scheme=key_scheme)
        if key.startswith(KEY_SCHEME + "_") and intent_fields_of(ctx.tool_name):
            # Keyed by the tool's intent fields: idemflow compares on them.
            return {META_KEY: key, META_FINGERPRINT: "intent"}
        return {META_KEY: key}

    plain = server.call_tool

    async def call_tool(tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None) -> Any:
        key = (meta or {}).get(META_KEY)
        session = getattr(server, "session", None)
        if not isinstance(key, str) or session is None:
            return await plain(tool_name, arguments, meta)
        return await call_until_answered(
            lambda m: plain(tool_name, arguments, {**(meta or {}), **m}),
            session,
            key=key,
            tool=tool_name,
            resume=RESUME["openai_agents"],
            deadline=deadline,
            wait=wait,
        )

    listing = server.list_tools

    async def list_tools(*args: Any, **kwargs: Any) -> Any:
        # Each turn lists the tools first. A listing that gets no answer
        # (the server or its connection down) is asked again until the
        # deadline, then stops the run as a pending call does: the run
        # resumes from its saved RunState, and no call is lost.
        pending = f"idemflow's MCP server did not list its tools within {deadline:g} s; nothing was called, and no call is lost: " + RESUME["openai_agents"]
        return await again_until(asyncio.get_running_loop().time() + deadline, lambda _: listing(*args, **kwargs), pending=pending)

    formatter = server._get_failure_error_function(default_tool_error_function)

    async def failure(ctx: RunContextWrapper[Any], error: Exception) -> str:
        # A pending answer, or a call with no key, stops the run: read as
        # a tool error, it would have the model call again under a new ID.
        cause: BaseException | None = error
        while cause is not None:
            if isinstance(cause, (DeadlineError, NoDurableIdentityError)):
                raise cause
            cause = cause.__cause__
        if formatter is None:
            raise error
        out = formatter(ctx, error)
        return await out if inspect.isawaitable(out) else out

    server.tool_meta_resolver = meta
    server.call_tool = call_tool  # type: ignore[method-assign]
    server.list_tools = list_tools  # type: ignore[method-assign]
    # The SDK's own setting (MCPServer's failure_error_function): errors
    # but ours keep the server's formatter.
    server._failure_error_function = failure
    return server


async def run_durably(
    agent: Agent[Any],
    input: str | list[Any],
    *,
    run_config: RunConfig,
    load: Callable[[], Awaitable[str | None]],
    save: Callable[[str], Awaitable[None]],
    approve: Callable[[Any], Awaitable[bool]] | None = None,
    context: Any = None,
    turn_id: str | None = None,
    intents: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
) -> RunResult:
    """Runs agent to its end, or resumes the run load() returns, saving
    its RunState (save) wherever the run is interrupted, and again once
    approve (default: every call) has decided, before any call runs. A
    process killed at any point runs this again: the saved state's calls
    run again under the keys they had, and replay.

    approve decides each interruption (a ToolApprovalItem): True approves,
    False rejects. save must be durable before it returns.

    A saved state is resumed only by the turn that saved it: the same
    input (or the same turn_id). Any other turn (one more user message,
    even in the same words, or another turn_id) is a new run from input,
    whatever load() returns, so one store per conversation serves every
    turn of it.

    Each call the resumed run makes runs under the key of the intended
    call it is (intended_call_keys), planned from the saved state. turn_id
    is the app's ID of the user message the run answers, where it has one
    (a chat UI's message ID): the same on every run of that turn, which
    the key then names instead of the input's user messages. An app that
    sends each turn alone (no history, session or previous response) needs
    it, or two turns in the same words are one intent.

    A call is keyed by its intent fields: those its idemflow_function_tool
    declares, idemflow's own tools' by name, and intents (tool name to
    fields) for the app's other tools (a team's operation over MCP).
    """
    known = _intents(agent, intents)
    group = run_config.group_id or ""
    turn = _run_turn(input, turn_id)
    saved = await load()
    if saved is not None and _answers(saved, turn):
        state: RunState[Any] = await RunState.from_string(agent, saved)
        with _planning(_plan(state, group, turn_id, known)):
            result = await Runner.run(agent, state, run_config=run_config)
    else:
        # Nothing saved, or a state saved by another turn's run: this turn
        # is a run of its own. Resumed instead, the old run would answer
        # it, and its calls would never be made.
        result = await Runner.run(agent, input, run_config=run_config, context=context)
    while result.interruptions:
        state = result.to_state()
        await save(_dump(state, turn))  # the calls, with their IDs, before a decision
        for item in result.interruptions:
            if approve is None or await approve(item):
                state.approve(item)
            else:
                state.reject(item)
        await save(_dump(state, turn))  # the decisions, before any call runs
        with _planning(_plan(state, group, turn_id, known)):
            result = await Runner.run(agent, state, run_config=run_config)
    return result
