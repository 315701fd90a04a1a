"""Pydantic AI: one tool that runs an idemflow operation exactly once per
tool call, under a key derived from the durable identity of the call in
whichever way the agent runs.

- **A plain Agent** (the app keeps the message history). The key names
  the intended call (pa2): the conversation recorded on the response that
  wrote it, the turn (the user prompt the run answers: its place among
  the conversation's prompts and its content), the tool, the call's
  arguments (RFC 8785) and their occurrence among the turn's calls of
  that tool with those arguments. Not the call's ID: a run sent again
  with the history cut before the model's answer (a regenerate), or a
  turn killed before the app saved it and sent again, makes the model
  write the same call under a new ID. The tool still stops the run
  before the call (Pydantic AI's deferred approval), and
  :func:`run_durably` saves the history, and the decision, before the
  call runs, so that a resumed run finds the call as the model wrote it,
  whatever the model would write now. (pa1, the run and the call's ID,
  is kept for the calls in flight across the upgrade: key_scheme.)
- **TemporalDurability** (tested; the older TemporalAgent is not). The tool runs in a
  Temporal activity, and its key is the activity's
  (:func:`idemflow.temporal.activity_key`): register
  :class:`idemflow.temporal.KeyInterceptor` on the worker.
- **DBOSDurability** (tested; DBOSAgent is not). Inside a DBOS workflow the call runs
  as a DBOS step, and its key is the workflow's ID and the step's ID. A
  recovered workflow runs the unfinished step again under the same ID.

A provider that numbers calls per response (call_0) brings a call ID back
in a later response: the turn and the occurrence in the plain key, the
activity call or the step in the others, tell those calls apart.

Needs Python 3.11 and the ``pydantic-ai`` extra (``pydantic-ai-temporal``
or ``pydantic-ai-dbos`` for the durable agents).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pydantic_core
from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    ApprovalRequired,
    DeferredToolRequests,
    DeferredToolResults,
    ModelMessagesTypeAdapter,
    RunContext,
    Tool,
)
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, UserPromptPart

from ._tooltext import RESUME, answer_text, arguments, pending_text, refusal_text, request_intent, send
from .client import AsyncClient, Client, Intent
from .errors import DeadlineError, NoDurableIdentityError, ProblemError
from .keys import call_arguments, call_intent, canonical, derive_key, intent_fields_of, occurrence

if TYPE_CHECKING:
    # The pydantic-ai-mcp extra (FastMCP's client): only durable_mcp_toolset
    # takes one.
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.toolsets.abstract import AbstractToolset

__all__ = [
    "ARGS_KEY_SCHEME",
    "DBOS_KEY_SCHEME",
    "KEY_SCHEME",
    "LEGACY_KEY_SCHEME",
    "IntendedCall",
    "durable_key",
    "durable_mcp_toolset",
    "idemflow_tool",
    "intended_call",
    "message_key",
    "run_durably",
    "step_key",
]

#: The scheme of a plain Agent's tool call: the intended call (conversation,
#: turn, tool, intent fields, occurrence).
KEY_SCHEME = "pa3"
#: The intended call by its whole arguments, which a model rewords: the
#: release before pa3, for a run saved across the upgrade.
ARGS_KEY_SCHEME = "pa2"
#: The scheme before pa2 (conversation, run, call ID, tool), for the calls
#: in flight across the upgrade (docs/agents/pydantic-ai.md).
LEGACY_KEY_SCHEME = "pa1"
#: The scheme of a call made as a DBOS step: workflow, step, tool.
DBOS_KEY_SCHEME = "db1"

_log = logging.getLogger("idemflow.pydantic_ai")


def durable_key(ctx: RunContext[Any], key_scheme: str = KEY_SCHEME, intent: Callable[[dict[str, Any]], str] | None = None) -> str:
    """The key of the tool call ctx is running: the Temporal activity's in
    an activity, the DBOS step's in a step, else :func:`message_key`.

    Raises NoDurableIdentityError where the call has none (see each)."""
    tool = ctx.tool_name or ""
    if _in_temporal_activity():
        from .temporal import activity_key

        return activity_key(tool)
    step = _dbos_step()
    if step is not None:
        return step_key(step[0], step[1], tool)
    return message_key(ctx.messages, ctx.tool_call_id, tool, key_scheme=key_scheme, intent=intent)


@dataclass(frozen=True)
class IntendedCall:
    """What names a plain Agent's intended call: its conversation, its turn
    (the digest of the user prompt's place among the conversation's
    prompts, from 1, and its content; 0 and nothing before the first),
    the digest of its arguments (RFC 8785) and its occurrence (from 1)
    among the turn's calls of its tool with those arguments."""

    conversation: str
    turn: str
    args: str
    occurrence: int


def intended_call(messages: Sequence[ModelMessage], tool_call_id: str | None, tool: str, intent: Callable[[dict[str, Any]], str] | None = None) -> IntendedCall:
    """The intended call that the call tool_call_id of tool is, from the
    messages of its run: the last response holding it, the last request
    with a user prompt before that (the turn), and the calls of tool in
    the turn's responses, in their order. intent(args) names a call beyond
    its turn (call_intent of the request it makes); default: its whole
    arguments.

    Raises NoDurableIdentityError when no response in messages holds the
    call, or it records no conversation (history from a Pydantic AI too
    old to record one)."""
    if not tool_call_id:
        raise NoDurableIdentityError(f"{tool}: the call has no ID, so no key can survive a resume")
    at = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], ModelResponse) and _calls(messages[i], tool_call_id)), -1)  # type: ignore[arg-type]
    if at < 0:
        raise NoDurableIdentityError(f"{tool}: no response in the run's messages holds call {tool_call_id}, so nothing durable names it")
    response = messages[at]
    assert isinstance(response, ModelResponse)
    if not response.conversation_id:
        raise NoDurableIdentityError(f"{tool}: the response that wrote call {tool_call_id} records no conversation, so no key can tell it from another's")
    prompts = [(i, prompt) for i, m in enumerate(messages[:at]) if isinstance(m, ModelRequest) and (prompt := _prompt(m)) is not None]
    start, content = prompts[-1] if prompts else (-1, None)
    turn = derive_key("turn", str(len(prompts)), canonical(pydantic_core.to_jsonable_python(content)))
    calls = [
        (p.tool_call_id, p.tool_name, intent(p.args_as_dict()) if intent is not None else call_arguments(p.args_as_dict()))
        for m in messages[start + 1 : at + 1]
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart) and p.tool_name == tool
    ]
    found = occurrence(calls, tool_call_id)
    if found is None:
        raise NoDurableIdentityError(f"{tool}: call {tool_call_id} is a call of another tool, so no key of {tool} names it")
    return IntendedCall(response.conversation_id, turn, *found)


def _prompt(request: ModelRequest) -> list[Any] | None:
    """The contents of a request's user prompts, or None where it has none
    (a request of tool answers)."""
    parts = [p.content for p in request.parts if isinstance(p, UserPromptPart)]
    return parts or None


def message_key(
    messages: Sequence[ModelMessage],
    tool_call_id: str | None,
    tool: str,
    *,
    key_scheme: str = KEY_SCHEME,
    intent: Callable[[dict[str, Any]], str] | None = None,
) -> str:
    """The key of a plain Agent's call tool_call_id of tool: under pa3, the
    intended call (intended_call) it is, named by intent(args) (call_intent
    of the request it makes: its intent fields); under pa2, the same named
    by its whole arguments; under pa1 (the legacy scheme),
    the response in messages that wrote it: its conversation, its run, the
    call's ID and, when an earlier response of the same run used that ID
    too, how many did.

    Raises NoDurableIdentityError when no response in messages holds the
    call, or it records no conversation (or, under pa1, no run)."""
    if key_scheme in (KEY_SCHEME, ARGS_KEY_SCHEME):
        c = intended_call(messages, tool_call_id, tool, intent if key_scheme == KEY_SCHEME else None)
        return derive_key(key_scheme, c.conversation, c.turn, tool, c.args, str(c.occurrence))
    if key_scheme != LEGACY_KEY_SCHEME:
        raise ValueError(f"key_scheme {key_scheme!r}: {KEY_SCHEME}, {ARGS_KEY_SCHEME} or {LEGACY_KEY_SCHEME}")
    if not tool_call_id:
        raise NoDurableIdentityError(f"{tool}: the call has no ID, so no key can survive a resume")
    holders = [m for m in messages if isinstance(m, ModelResponse) and any(_calls(m, tool_call_id))]
    if not holders:
        raise NoDurableIdentityError(f"{tool}: no response in the run's messages holds call {tool_call_id}, so nothing durable names it")
    response = holders[-1]
    if not response.run_id or not response.conversation_id:
        raise NoDurableIdentityError(f"{tool}: the response that wrote call {tool_call_id} records no run or conversation, so no key can tell it from another")
    again = sum(1 for m in holders[:-1] if m.run_id == response.run_id)
    extra = [str(again)] if again else []
    return derive_key(LEGACY_KEY_SCHEME, response.conversation_id, response.run_id, tool_call_id, tool, *extra)


def step_key(workflow_id: str, step_id: int, tool: str) -> str:
    """The key of a call of tool made as step step_id of DBOS workflow
    workflow_id. A recovered workflow runs its unfinished step again under
    the same ID; each step of a workflow has its own."""
    return derive_key(DBOS_KEY_SCHEME, workflow_id, str(step_id), tool)


def _calls(response: ModelResponse, tool_call_id: str) -> list[ToolCallPart]:
    return [p for p in response.parts if isinstance(p, ToolCallPart) and p.tool_call_id == tool_call_id]


def _in_temporal_activity() -> bool:
    try:
        from temporalio import activity
    except ImportError:
        return False
    return activity.in_activity()


def _dbos_workflow() -> str | None:
    try:
        from dbos import DBOS
    except ImportError:
        return None
    return DBOS.workflow_id


def _dbos_step() -> tuple[str, int] | None:
    if _dbos_workflow() is None:
        return None
    from dbos import DBOS

    wid, step = DBOS.workflow_id, DBOS.step_id
    return (wid, step) if wid is not None and step is not None else None


def idemflow_tool(
    client: Client | AsyncClient,
    *,
    name: str,
    description: str,
    path: str | Callable[[dict[str, Any]], str],
    args_schema: type[BaseModel],
    body: Callable[[dict[str, Any]], Any] | None = None,
    deadline: float = 300.0,
    requires_approval: bool | None = None,
    key_scheme: str = KEY_SCHEME,
    intent: Sequence[Mapping[str, str]] | None = None,
) -> Tool[Any]:
    """A Pydantic AI tool that runs one of idemflow's operations (a ticket,
    an order, a declared operation, an HTTP tool) exactly once per tool
    call. path is the operation's (/v1/tickets, /v1/tools/refund_create)
    or a function of the arguments; body makes the request's body from
    them (default: the arguments). The model reads JSON: {http_status,
    replayed, result}, or for a final refusal {http_status, error,
    problem, body, key}.

    requires_approval: None (the default) stops a plain Agent's run
    before every call (deferred approval, so that :func:`run_durably`
    saves the history first), and not a Temporal or DBOS durable agent's,
    whose engine has saved the call already. False never stops: a plain
    run killed mid call then re-asks the model, and the call it writes is
    the same intended call only if the model writes the same arguments.

    intent is the operation's intent fields ([{"name", "norm"}], as its
    declaration publishes them); idemflow's own tools' are known by name
    or path. A plain Agent's call is keyed by them (pa3), and the request
    says so: a regenerate whose model rewords the title gets the first
    ticket, a replay whose answer names what differed.

    key_scheme ARGS_KEY_SCHEME ("pa2") keys a plain Agent's call by its
    whole arguments and LEGACY_KEY_SCHEME ("pa1") by its IDs, as the
    releases before pa3 and pa2 did, for a run saved across the upgrade.

    A final answer that does not come within deadline seconds raises
    DeadlineError, which fails the run (the model never reads it as an
    error to retry): run_durably again, or let Temporal retry the
    activity, and the call gets its answer under the same key. Inside a
    DBOS workflow the step waits on instead, under the same key, since a
    failed step stays failed when the workflow recovers: idemflow settles
    every call within its reconcile horizon.
    """

    fields = tuple(intent) if intent is not None else intent_fields_of(name, path if isinstance(path, str) else None)

    intent_of = request_intent(fields, args_schema, body)

    async def call(ctx: RunContext[Any], raw: dict[str, Any], waits: bool) -> str:
        key = durable_key(ctx, key_scheme, intent_of)
        try:
            args = arguments(args_schema, raw)
        except ValueError as e:  # pydantic's ValidationError
            # The model's own mistake, and nothing was sent: its own to fix.
            return json.dumps({"error": "InvalidArguments", "detail": str(e), "key": key}, ensure_ascii=False)
        p = path(args) if callable(path) else path
        # Keyed by the intent fields (pa3): idemflow compares on them.
        intent = Intent(key, p, body(args) if body else args, by_intent=bool(fields) and key.startswith(KEY_SCHEME + "_"))
        while True:
            try:
                return answer_text(await send(client, intent, deadline))
            except ProblemError as e:
                return refusal_text(e, key)
            except DeadlineError as e:
                if waits:
                    _log.warning("%s", pending_text(name, key, RESUME["dbos"]))
                    continue
                raise DeadlineError(pending_text(name, key, RESUME["pydantic_ai"])) from e

    async def invoke(ctx: RunContext[Any], **raw: Any) -> str:
        workflow = _dbos_workflow()
        durable = _in_temporal_activity() or workflow is not None
        if (requires_approval or (requires_approval is None and not durable)) and not ctx.tool_call_approved:
            raise ApprovalRequired()
        if workflow is not None and _dbos_step() is None:
            # The call's own step: its ID is the key, and a recovered
            # workflow runs it again, unfinished, under the same ID.
            from dbos import DBOS

            result: str = await DBOS.run_step_async({"name": f"idemflow.{name}"}, call, ctx, raw, True)
            return result
        return await call(ctx, raw, workflow is not None)

    tool: Tool[Any] = Tool.from_schema(invoke, name=name, description=description, json_schema=args_schema.model_json_schema(), takes_ctx=True)
    return tool


def durable_mcp_toolset(toolset: MCPToolset[Any], *, deadline: float = 300.0, wait: float = 2.0, key_scheme: str = KEY_SCHEME) -> AbstractToolset[Any]:
    """toolset (Pydantic AI's MCPToolset, on idemflow mcp), its calls made
    as idemflow_tool makes a plain Agent's: each call needs approval (the
    returned toolset), so that run_durably saves the history with it
    before it runs; each sends, in _meta, the key durable_key derives for
    it (pa3, by the tool's intent fields where idemflow's own tool has
    them, else its arguments less the idempotency_key the model writes),
    so a regenerate, a reworded call or a turn sent again is a replay; a call whose
    answer has not come waits on its task (idemflow.mcp) up to deadline
    (seconds), and past it raises DeadlineError, which fails the run
    instead of reaching the model: run_durably again, and the call gets
    its answer under the same key. The model reads the tool's structured
    content: {http_status, replayed, result}, or the words of a refusal.

    The call goes through the toolset's own FastMCP client
    (call_tool_mcp), whose raw result names the task of a pending answer;
    MCPToolset's mapped result does not."""

    from .mcp import call_until_answered, result_text  # the mcp package: the pydantic-ai-mcp extra

    async def process(ctx: RunContext[Any], call_tool: Any, name: str, args: dict[str, Any]) -> Any:
        fields = intent_fields_of(name)
        key = durable_key(ctx, key_scheme, lambda a: call_intent(fields, a))
        client = toolset.client
        result = await call_until_answered(
            lambda m: client.call_tool_mcp(name, args, meta=m),
            client.session,
            key=key,
            tool=name,
            resume=RESUME["pydantic_ai"],
            deadline=deadline,
            wait=wait,
            by_intent=bool(fields) and key.startswith(KEY_SCHEME + "_"),
        )
        if result.structured_content is not None:
            return result.structured_content
        return result_text(result)

    toolset.process_tool_call = process
    return toolset.approval_required()


async def run_durably(
    agent: Agent[Any, Any],
    prompt: str | None,
    *,
    load: Callable[[], Awaitable[bytes | None]],
    save: Callable[[bytes], Awaitable[None]],
    approve: Callable[[ToolCallPart], Awaitable[bool]] | None = None,
    message_history: Sequence[ModelMessage] | None = None,
    **run: Any,
) -> AgentRunResult[Any]:
    """Runs agent on prompt (after message_history) to its end, or resumes
    the run load() returns. Wherever the run stops for approval, it saves
    the history with the calls, then the decisions of approve (default:
    every call), before any call runs. A process killed at any point runs
    this again: the saved calls run again under the keys they had, and
    replay. save must be durable before it returns; run passes on to
    Agent.run (deps, usage_limits and so on). The agent's output types
    must include DeferredToolRequests.

    A saved run is resumed only by the turn that saved it: the same
    prompt at the same place (after as many messages of history). Any
    other turn (a later prompt, even in the same words) is a new run,
    whatever load() returns, so one store per conversation serves every
    turn of it."""
    turn = _run_turn(prompt, len(message_history or ()))
    saved = await load()
    state = json.loads(saved) if saved is not None else None
    if state is not None and _answers(state, turn, prompt, len(message_history or ())):
        history = ModelMessagesTypeAdapter.validate_python(state["messages"])
        result = await _resume(agent, history, state, approve, save, run)
    else:
        # Nothing saved, or another turn's run: this turn is a run of its
        # own. Resumed instead, the old run would answer it, and its calls
        # would never be made.
        result = await agent.run(prompt, message_history=message_history, **run)
    while isinstance(result.output, DeferredToolRequests):
        history = result.all_messages()
        state = {
            "turn": turn,
            "messages": ModelMessagesTypeAdapter.dump_python(history, mode="json"),
            "calls": [c.tool_call_id for c in result.output.approvals],
        }
        await save(json.dumps(state).encode())  # the calls, with their IDs, before a decision
        result = await _resume(agent, history, state, approve, save, run)
    return result


def _run_turn(prompt: str | None, place: int) -> str:
    """What names the turn a run_durably call runs: its prompt and how
    many messages of history came before it."""
    return derive_key("run", str(place), canonical(prompt))


def _answers(state: dict[str, Any], turn: str, prompt: str | None, place: int) -> bool:
    """Whether the run saved is this turn's. One saved before run_durably
    marked its turn is this turn's where its history holds the prompt at
    this place."""
    if "turn" in state:
        return bool(state["turn"] == turn)
    messages = state.get("messages") or []
    if place >= len(messages):
        return False
    at = messages[place]
    parts = (at.get("parts") or []) if isinstance(at, dict) else []
    return any(p.get("part_kind") == "user-prompt" and p.get("content") == prompt for p in parts if isinstance(p, dict))


async def _resume(
    agent: Agent[Any, Any],
    history: list[ModelMessage],
    state: dict[str, Any],
    approve: Callable[[ToolCallPart], Awaitable[bool]] | None,
    save: Callable[[bytes], Awaitable[None]],
    run: dict[str, Any],
) -> AgentRunResult[Any]:
    approvals: dict[str, bool] | None = state.get("approvals")
    if approvals is None:
        parts = {p.tool_call_id: p for m in history if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)}
        approvals = {c: approve is None or await approve(parts[c]) for c in state["calls"]}
        await save(json.dumps({**state, "approvals": approvals}).encode())  # the decisions, before any call runs
    return await agent.run(message_history=history, deferred_tool_results=DeferredToolResults(approvals=dict(approvals)), **run)
