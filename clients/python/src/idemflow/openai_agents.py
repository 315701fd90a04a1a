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

The key is derived from the run's group (RunConfig.group_id, the SDK's
name for a conversation or thread: the app passes the same one to every
run and resume of it), the ID of the model's function-call item, the
call's ID and the tool's name. The item's ID is there because some
providers number tool calls per response (call_0): a later turn brings
the same call ID back, and is another intended call. A Chat Completions
model gives its items no ID (the SDK's placeholder): the call ID alone
then tells calls apart only when the provider never reuses one, as
OpenAI's does, which the tool is told with call_ids_unique=True.

Needs the ``openai-agents`` extra: ``pip install 'idemflow[openai-agents]'``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, FunctionTool, RunConfig, Runner, RunResult, RunState
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.strict_schema import ensure_strict_json_schema
from agents.tool_context import ToolContext
from pydantic import BaseModel

from ._tooltext import RESUME, answer_text, arguments, pending_text, refusal_text, send
from .client import AsyncClient, Client, Intent
from .errors import DeadlineError, NoDurableIdentityError, ProblemError
from .keys import derive_key

__all__ = ["KEY_SCHEME", "durable_key", "idemflow_function_tool", "run_durably"]

#: The scheme of an OpenAI Agents SDK tool call's key.
KEY_SCHEME = "oa1"


def durable_key(ctx: ToolContext[Any], tool_name: str, *, call_ids_unique: bool = False) -> str:
    """The key of one tool call: from the run's group_id, the model's
    function-call item ID, the call's ID and the tool's name.

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
    item_id = ctx.tool_call.id if ctx.tool_call is not None else None
    if not item_id or item_id == FAKE_RESPONSES_ID:
        if not call_ids_unique:
            raise NoDurableIdentityError(
                f"{tool_name}: the model's function-call item has no ID (a Chat Completions model), so call {ctx.tool_call_id}"
                " alone would name this call, and a provider that numbers calls per response brings it back in a later turn;"
                " pass call_ids_unique=True only if the provider never reuses a call ID (OpenAI's does not)"
            )
        item_id = ""
    return derive_key(KEY_SCHEME, group, item_id, ctx.tool_call_id, tool_name)


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

    async def invoke(ctx: ToolContext[Any], raw: str) -> str:
        key = durable_key(ctx, name, call_ids_unique=call_ids_unique)
        try:
            args = arguments(args_schema, json.loads(raw or "{}"))
        except ValueError as e:  # bad JSON, or pydantic's ValidationError
            # The model's own mistake, and nothing was sent: its own to fix.
            return json.dumps({"error": "InvalidArguments", "detail": str(e), "key": key}, ensure_ascii=False)
        p = path(args) if callable(path) else path
        try:
            return answer_text(await send(client, Intent(key, p, body(args) if body else args), deadline))
        except ProblemError as e:
            return refusal_text(e, key)
        except DeadlineError as e:
            raise DeadlineError(pending_text(name, key, RESUME["openai_agents"])) from e

    return FunctionTool(
        name=name,
        description=description,
        params_json_schema=schema,
        on_invoke_tool=invoke,
        strict_json_schema=strict_json_schema,
        needs_approval=needs_approval,
    )


async def run_durably(
    agent: Agent[Any],
    input: str | list[Any],
    *,
    run_config: RunConfig,
    load: Callable[[], Awaitable[str | None]],
    save: Callable[[str], Awaitable[None]],
    approve: Callable[[Any], Awaitable[bool]] | None = None,
    context: Any = None,
) -> RunResult:
    """Runs agent to its end, or resumes the run load() returns, saving
    its RunState (save) wherever the run is interrupted, and again once
    approve (default: every call) has decided, before any call runs. A
    process killed at any point runs this again: the saved state's calls
    run again under the keys they had, and replay.

    approve decides each interruption (a ToolApprovalItem): True approves,
    False rejects. save must be durable before it returns.
    """
    saved = await load()
    if saved is not None:
        state: RunState[Any] | None = await RunState.from_string(agent, saved)
        result = await Runner.run(agent, state, run_config=run_config)  # type: ignore[arg-type]
    else:
        result = await Runner.run(agent, input, run_config=run_config, context=context)
    while result.interruptions:
        state = result.to_state()
        await save(state.to_string())  # the calls, with their IDs, before a decision
        for item in result.interruptions:
            if approve is None or await approve(item):
                state.approve(item)
            else:
                state.reject(item)
        await save(state.to_string())  # the decisions, before any call runs
        result = await Runner.run(agent, state, run_config=run_config)
    return result
