"""LlamaIndex: a tool for a FunctionAgent that runs one of idemflow's
operations exactly once per intended call, and the run that keeps its key
across a crash.

What LlamaIndex keeps, read in llama-index-core 0.14.25 (workflows
2.26): nothing, until the app saves it. A run lives in memory; the app
saves its Context with ``ctx.to_dict()`` and restores it with
``Context.from_dict``. A saved context holds the run's store and each
step in progress with the event it handles: a tool call's ``ToolCall``,
with the model's ``tool_id``. The agent's memory (the conversation) is
not in it. A run restored from a context saved while a call was in
progress runs that call's step again with the same ``ToolCall``; one
restored from an earlier save asks the model again, which writes new
IDs. And a plain run writes a call's ``ToolCall`` to the event stream as
the tool starts, not before: an app that saves on it races the call.

So the call stops before it acts, as LlamaIndex's own human-in-the-loop
steps do (``ctx.wait_for_event``): the tool writes ``CallPending`` with
its key to the stream and waits for ``Proceed``; the app saves the
context there, then lets it proceed. Restored from that save, the step
runs again with the same ``ToolCall`` and the call gets its key back
(each stopped call handed back to its step once: ``_release``).
``run_durably`` does the saving, the proceeding and the restoring.

The key (``li2``) names the intended call: the turn, the tool, the call's
arguments (RFC 8785) and their occurrence among the turn's calls of that
tool with those arguments. The turn is the user's message and its place
in the conversation (how many user messages the memory held before it),
which this module's ``FunctionAgent`` puts in the run's store as a turn
starts (``init_run``), and the turn's calls are the ones its model asked
for, in their order, which it records there too (``parse_agent_output``):
both are saved with the context. So the same call restored is the same
key; a turn run again from the conversation it started from (a regenerate
from a copy of the state saved before it, a turn killed before its first
save and sent again) makes the model write the same call under a new
``tool_id``, and it is the same key; a later turn, even in the same words
and with a model that reuses a ``tool_id`` (some providers number each
turn's calls from ``call_0``), is another. (li1, a random turn ID and the
``tool_id``, is kept for the turns in flight across the upgrade:
``key_scheme``.)

Needs the ``llamaindex`` extra.
"""

import json
import os
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index.core.agent.workflow import AgentOutput, ToolCall, ToolCallResult
from llama_index.core.agent.workflow import FunctionAgent as _FunctionAgent
from llama_index.core.agent.workflow.workflow_events import AgentInput, AgentWorkflowStartEvent
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.tools import FunctionTool
from pydantic import BaseModel, ConfigDict
from workflows import Context, step
from workflows.events import Event, StopEvent

from ._files import write_durably
from ._tooltext import answer_text, arguments, refusal_text, request_intent, send
from .client import AsyncClient, Client, Intent
from .errors import NoDurableIdentityError, ProblemError
from .keys import call_arguments, call_intent, canonical, derive_key, intent_fields_of, occurrence

if TYPE_CHECKING:
    # The mcp package, which only mcp_tools needs.
    from mcp import ClientSession

__all__ = [
    "ARGS_KEY_SCHEME",
    "KEY_SCHEME",
    "LEGACY_KEY_SCHEME",
    "CallPending",
    "FunctionAgent",
    "Proceed",
    "call_key",
    "idemflow_tool",
    "intended_call_key",
    "mcp_tools",
    "run_durably",
    "turn_of",
]

#: The scheme of a LlamaIndex call's key: the intended call, named by its
#: intent fields (a ticket's customer, never its wording).
KEY_SCHEME = "li3"
#: The intended call named by its whole arguments, which a model rewords:
#: the scheme before li3, for the turns in flight across the upgrade.
ARGS_KEY_SCHEME = "li2"
#: The scheme before li2 (a random turn ID and the tool_id), for the turns
#: in flight across the upgrade (docs/agents/llamaindex.md).
LEGACY_KEY_SCHEME = "li1"

#: Where FunctionAgent keeps the turn in the run's store.
TURN = "idemflow_turn"
#: Where it keeps the turn's calls, in the order the model asked for them.
CALLS = "idemflow_calls"
#: Where it keeps li1's random turn ID.
LEGACY_TURN = "idemflow_turn_id"

# The turn run_durably starts (turn_of): init_run puts it in the store.
_turn: ContextVar[str | None] = ContextVar("idemflow_llamaindex_turn", default=None)

# The tool_id of the call the current call_tool step handles: LlamaIndex
# hands a tool its arguments, not its call.
_tool_id: ContextVar[str | None] = ContextVar("idemflow_llamaindex_tool_id", default=None)

# Set by run_durably for the run it drives (a run's steps inherit it): a
# call's stop waits for a Proceed that only run_durably sends.
_durable: ContextVar[bool] = ContextVar("idemflow_llamaindex_durable", default=False)

# The keys of the calls a restored run found at their stop (run_durably
# sets them): saved already, they act without stopping again.
_released: ContextVar[frozenset[str]] = ContextVar("idemflow_llamaindex_released", default=frozenset())


def call_key(turn: str, tool_id: str, tool: str) -> str:
    """The li1 key of one call from its parts (clients/testdata/keys.json's
    llamaindex vectors)."""
    return derive_key(LEGACY_KEY_SCHEME, turn, tool_id, tool)


def turn_of(history: list[ChatMessage], user_msg: str | ChatMessage) -> str:
    """The turn that user_msg starts after history (the memory's messages):
    derive('turn', how many user messages history holds, the RFC 8785
    form of user_msg's text)."""
    text = user_msg if isinstance(user_msg, str) else (user_msg.content or "")
    return derive_key("turn", str(sum(1 for m in history if m.role == "user")), canonical(text))


def intended_call_key(
    turn: str, calls: list[list[str]], tool_id: str, tool: str, *, key_scheme: str = KEY_SCHEME, intent: Callable[[dict[str, Any]], str] | None = None
) -> str | None:
    """The li3 key of the call tool_id of the turn: the turn, the tool, the
    digest of the call's intent (intent(args): call_intent of the request
    it makes; under li2, or without intent, its arguments in RFC 8785 form)
    and its occurrence among calls (the turn's [tool_id, tool, arguments
    in RFC 8785 form], in their order) of that tool with that intent.
    None when calls does not hold tool_id."""

    def named(c: list[str]) -> str:
        return intent(json.loads(c[2])) if intent is not None and key_scheme == KEY_SCHEME and c[1] == tool else c[2]

    found = occurrence([(c[0], c[1], named(c)) for c in calls], tool_id)
    if found is None:
        return None
    args, n = found
    return derive_key(key_scheme, turn, tool, args, str(n))


class CallPending(Event):
    """A call about to act, in the run's event stream: save the context
    now, then send Proceed(key=...) (run_durably does both)."""

    key: str
    tool_name: str
    tool_id: str
    args: dict[str, Any]


class Proceed(Event):
    """Lets the call under key act: the context was saved."""

    key: str


class FunctionAgent(_FunctionAgent):
    """LlamaIndex's FunctionAgent, which names each turn in the run's
    store, records the calls its model asks for, and tells idemflow's
    tools which call they run."""

    @step
    async def init_run(self, ctx: Context, ev: AgentWorkflowStartEvent) -> AgentInput:
        turn = _turn.get()
        if not _durable.get() or turn is None:
            # Its calls would stop and wait for a Proceed nobody sends.
            raise NoDurableIdentityError("idemflow.llamaindex.FunctionAgent runs under run_durably, which saves the run before each call acts")
        # A step runs once per turn: a restored run does not start again.
        await ctx.store.set(TURN, turn)
        await ctx.store.set(CALLS, [])
        await ctx.store.set(LEGACY_TURN, uuid.uuid4().hex)
        result: AgentInput = await super().init_run(ctx, ev)
        return result

    @step
    async def parse_agent_output(self, ctx: Context, ev: AgentOutput) -> StopEvent | AgentInput | ToolCall | None:
        # The calls the model asked for, in its order, before any of them
        # runs: the order a re-run's model writes them in again.
        if ev.tool_calls:
            calls = await ctx.store.get(CALLS, default=[])
            calls += [[c.tool_id, c.tool_name, call_arguments(c.tool_kwargs or {})] for c in ev.tool_calls]
            await ctx.store.set(CALLS, calls)
        result: StopEvent | AgentInput | ToolCall | None = await super().parse_agent_output(ctx, ev)
        return result

    @step
    async def call_tool(self, ctx: Context, ev: ToolCall) -> ToolCallResult:
        token = _tool_id.set(ev.tool_id)
        try:
            result: ToolCallResult = await super().call_tool(ctx, ev)
            return result
        finally:
            _tool_id.reset(token)


def idemflow_tool(
    client: Client | AsyncClient,
    *,
    name: str,
    description: str,
    path: str | Callable[[dict[str, Any]], str],
    args_schema: type[BaseModel],
    body: Callable[[dict[str, Any]], Any] | None = None,
    key_scheme: str = KEY_SCHEME,
    intent: Sequence[Mapping[str, str]] | None = None,
) -> FunctionTool:
    """A tool for this module's FunctionAgent that runs one of idemflow's
    operations (a ticket, an order, a declared operation, an HTTP tool)
    once per intended call. path is the operation's, or a function of the
    arguments; body makes the request's body from them (default: the
    arguments). The model reads {http_status, replayed, result}, or for a
    final refusal {http_status, error, problem, body, key}.

    Before it acts, the call stops at CallPending (see the module's
    comment). Then it waits for its final answer however long it takes,
    retrying under its key: LlamaIndex hands the model whatever a tool
    returns or raises, and a model told that a call is pending writes it
    again, under another tool_id. A process killed while it waits is
    restored from its save, and the call gets its key back.

    intent is the operation's intent fields ([{"name", "norm"}], as its
    declaration publishes them); idemflow's own tools' are known by name
    or path. The key names the request's intent fields (li3), and the
    request says so: a turn run again whose model rewords the title gets
    the first ticket, a replay naming what differed.

    key_scheme ARGS_KEY_SCHEME ("li2") keys a call by its whole arguments
    and LEGACY_KEY_SCHEME ("li1") as the release before li2 did, for a turn
    saved across the upgrade.
    """
    if key_scheme not in (KEY_SCHEME, ARGS_KEY_SCHEME, LEGACY_KEY_SCHEME):
        raise ValueError(f"key_scheme {key_scheme!r}: {KEY_SCHEME}, {ARGS_KEY_SCHEME} or {LEGACY_KEY_SCHEME}")
    fields = tuple(intent) if intent is not None else intent_fields_of(name, path if isinstance(path, str) else None)

    intent_of = request_intent(fields, args_schema, body)

    async def call(ctx: Context, **kwargs: Any) -> str:
        tool_id, turn = await _running_call(ctx, name)
        try:
            args = arguments(args_schema, kwargs)
        except ValueError as e:  # pydantic's ValidationError
            return json.dumps({"error": "InvalidArguments", "detail": str(e)}, ensure_ascii=False)
        key = await _key_of(ctx, name, tool_id, turn, key_scheme, intent_of)
        await _stop_before_acting(ctx, key, name, tool_id, args)
        target = path(args) if callable(path) else path
        by_intent = bool(fields) and key.startswith(KEY_SCHEME + "_")
        try:
            return answer_text(await send(client, Intent(key, target, body(args) if body else args, by_intent=by_intent), float("inf")))
        except ProblemError as e:
            return refusal_text(e, key)

    return FunctionTool.from_defaults(async_fn=call, name=name, description=description, fn_schema=args_schema)


async def mcp_tools(session: "ClientSession", *, names: list[str] | None = None) -> list[FunctionTool]:
    """The tools of idemflow's MCP server (idemflow mcp, through the mcp
    package's ClientSession, connected by the app), as tools for this
    module's FunctionAgent keyed as idemflow_tool keys its calls: each call
    stops at CallPending before it acts, then sends, in _meta, the key of
    its intended call (li3, by the intent fields the tool publishes in its
    _meta, or its arguments less the idempotency_key the model writes), so
    a regenerate, a reworded call or a turn run again is a replay;
    it waits on the call's task (idemflow.mcp) however long it takes, as
    idemflow_tool waits. The model reads the tool's text: {http_status,
    replayed, result}, or its words for a refusal.

    This stands in for LlamaIndex's own MCP tools (llama-index-tools-mcp's
    McpToolSpec), whose client's call_tool sends the name and the
    arguments only, no _meta. names: the tools to take (default: all)."""
    from .mcp import intent_fields

    listed = (await session.list_tools()).tools
    return [_mcp_tool(session, t.name, t.description or "", dict(t.input_schema), intent_fields(t)) for t in listed if names is None or t.name in names]


def _mcp_tool(session: "ClientSession", name: str, description: str, schema: dict[str, Any], fields: Sequence[Mapping[str, str]] = ()) -> FunctionTool:
    from .mcp import call_as_task, result_text

    class Arguments(BaseModel):
        """The MCP tool's input schema, as the model is shown it."""

        model_config = ConfigDict(extra="allow")

        @classmethod
        def model_json_schema(cls, *args: Any, **kw: Any) -> dict[str, Any]:
            return schema

    async def call(ctx: Context, **kwargs: Any) -> str:
        tool_id, turn = await _running_call(ctx, name)
        key = await _key_of(ctx, name, tool_id, turn, KEY_SCHEME, lambda a: call_intent(fields, a))
        await _stop_before_acting(ctx, key, name, tool_id, kwargs)
        # No deadline, as idemflow_tool's: LlamaIndex hands the model
        # whatever a tool returns or raises, so the call waits for its answer.
        return result_text(await call_as_task(session, name, kwargs, key=key, resume="", deadline=float("inf"), by_intent=bool(fields)))

    return FunctionTool.from_defaults(async_fn=call, name=name, description=description, fn_schema=Arguments)


async def _running_call(ctx: Context, name: str) -> tuple[str, str]:
    """The tool_id of the call the current step runs, and its turn."""
    tool_id = _tool_id.get()
    turn = await ctx.store.get(TURN, default=None)
    if tool_id is None or turn is None:
        raise NoDurableIdentityError(f"{name}: called outside idemflow.llamaindex.FunctionAgent, which names the turn and the call")
    return tool_id, turn


async def _key_of(ctx: Context, name: str, tool_id: str, turn: str, key_scheme: str, intent: Callable[[dict[str, Any]], str] | None = None) -> str:
    """The key of the call tool_id of turn, under key_scheme."""
    if key_scheme == LEGACY_KEY_SCHEME:
        # A turn saved before the upgrade has its random ID under TURN.
        return call_key(await ctx.store.get(LEGACY_TURN, default=turn), tool_id, name)
    key = intended_call_key(turn, await ctx.store.get(CALLS, default=[]), tool_id, name, key_scheme=key_scheme, intent=intent)
    if key is None:
        raise NoDurableIdentityError(f"{name}: the turn's recorded calls do not hold {tool_id} (a turn saved before li2: key_scheme='li1')")
    return key


async def _stop_before_acting(ctx: Context, key: str, name: str, tool_id: str, args: dict[str, Any]) -> None:
    """The call's stop before it acts: CallPending, until run_durably,
    having saved the run, sends Proceed. LlamaIndex runs the step again
    from its start once Proceed arrives; the second time this returns at
    once. A call restored from its stop was saved there, and goes on."""
    if key in _released.get():
        return
    await ctx.wait_for_event(
        Proceed,
        waiter_event=CallPending(key=key, tool_name=name, tool_id=tool_id, args=args),
        waiter_id=key,
        requirements={"key": key},
        # The stop ends when run_durably sends Proceed, never on a clock
        # (LlamaIndex's default is 2000 s).
        timeout=None,
    )


async def run_durably(agent: FunctionAgent, state: str | os.PathLike[str], user_msg: str | None = None) -> AgentOutput:
    """Runs a turn of agent, saving its context (and its memory) to the
    file state at each call's CallPending, durably, before the call acts.

    If state holds a turn that did not finish (the process was killed),
    that turn is restored and goes on, and user_msg is not sent again:
    every call the saved context holds at its stop proceeds under its key.
    Otherwise a new turn starts with user_msg, on the conversation state
    holds (or a new one): its calls are keyed as the intended calls they
    are in that conversation (turn_of), so the same turn run again from
    the same state is the same calls. When the turn ends, state holds its
    context for the next turn.

    A user_msg other than the unfinished turn's (a later turn sent before
    the last one was restored) is a turn of its own: the last one is
    restored and finished first, then user_msg starts the next, never
    dropped for the last one.
    """
    path = Path(state)
    saved = json.loads(path.read_text()) if path.exists() else None
    asked = saved.get("user_msg", user_msg) if saved and saved["running"] else user_msg
    released: frozenset[str] = frozenset()
    if saved and saved["running"]:
        saved["ctx"], released = _release(saved["ctx"])
    ctx = Context.from_dict(agent, saved["ctx"]) if saved else Context(agent)
    memory = Memory.from_defaults(session_id=str(path))
    if saved:
        await memory.aput_messages([ChatMessage.model_validate(m) for m in saved["memory"]])
    # For the run's steps, which copy this context.
    _durable.set(True)
    _released.set(released)
    if saved and saved["running"]:
        handler = agent.run(ctx=ctx)
        # LlamaIndex leaves the memory out of a saved context: it goes
        # back in by hand (nothing before a call's answer reads it).
        await handler.ctx.store.set("memory", memory)
    elif user_msg is None:
        raise ValueError(f"{path} holds no unfinished turn, and no user_msg was given to start one")
    else:
        _turn.set(turn_of(await memory.aget_all(), user_msg))
        handler = agent.run(user_msg=user_msg, ctx=ctx, memory=memory)

    async def save(running: bool) -> None:
        with warnings.catch_warnings():
            # The memory, which LlamaIndex warns it leaves out, is saved
            # beside the context.
            warnings.filterwarnings("ignore", message=".*unserializable key: memory")
            doc = {
                "running": running,
                "user_msg": asked,
                "ctx": handler.ctx.to_dict(),
                "memory": [m.model_dump(mode="json") for m in await memory.aget_all()],
            }
        write_durably(path, json.dumps(doc))

    async for ev in handler.stream_events():
        if isinstance(ev, CallPending):
            await save(running=True)
            handler.ctx.send_event(Proceed(key=ev.key))
    result: AgentOutput = await handler
    await save(running=False)
    if user_msg is not None and user_msg != asked:
        return await run_durably(agent, state, user_msg)
    return result


def _release(ctx: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """A saved context whose calls at their stop run once when restored,
    and their keys.

    LlamaIndex keeps a stopped step as a waiter, and restores it without
    the requirements it matches its event by: until the step has run again
    to its stop, a Proceed for one call resumes every restored waiter, so a
    call ran twice or three times and its answer reached the model as
    often. So each waiter for Proceed goes, and its ToolCall is queued for
    the call_tool step again, which runs it once, without a stop (its key
    is released: it was saved at its stop). A waiter that Proceed had
    already resolved has its work item queued or in progress already; it
    only goes."""
    want = f"{Proceed.__module__}.{Proceed.__qualname__}"
    keys: set[str] = set()
    for worker in ctx.get("workers", {}).values():
        waiters = worker.get("collected_waiters", [])
        stopped = [w for w in waiters if w.get("waiting_for_event") == want]
        if not stopped:
            continue
        worker["collected_waiters"] = [w for w in waiters if w not in stopped]
        running = {a.get("work_item_id") for a in [*worker.get("queue", []), *worker.get("in_progress", [])]}
        for w in stopped:
            keys.add(w["waiter_id"])
            if w.get("resolved_event") is None and w.get("work_item_id") not in running:
                worker.setdefault("queue", []).append(
                    {
                        "event": w["event"],
                        "bound_events": w.get("bound_events"),
                        "scope_path": w.get("scope_path", []),
                        "collection_release_payload": w.get("collection_release_payload"),
                        "work_item_id": w.get("work_item_id"),
                    }
                )
    return ctx, frozenset(keys)
