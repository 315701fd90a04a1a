"""Microsoft Agent Framework (``agent-framework-core``): a tool that runs
one of idemflow's operations once per intended call, under a key derived
from the agent's session.

What the framework keeps, read in agent-framework-core 1.26: an
``AgentSession`` holds a state dict, where its history provider
(``InMemoryHistoryProvider`` by default) keeps the conversation; the app
saves the session (``to_dict``) where it likes, and restores it
(``AgentSession.from_dict``). The history is written when a run ends, and
when it stops for a human's approval of a call (a tool's
``approval_mode="always_require"``), never before a call runs. A process
killed mid call saved nothing of its run: the app sends the user's message
again on the restored session, and the model writes the call again under
a new ``call_id``. A call approved runs with the approval response the
app sends, as often as it is sent.

So the key (mf1) names the intended call: the session's ID, the turn, the
tool, the call's intent fields (the operation's, as it declares them: a
ticket's ``customer_id``; for a tool that declares none, its arguments in
RFC 8785 form, less a model-written ``idempotency_key``) and their
occurrence among the turn's calls of that tool with that intent. The turn
is the user's message and its place: how many earlier messages of the
user's in the conversation were answered to the end (by a message of the
model's that asks for no call). ``keyed_calls``, a chat middleware the
agent runs, reads each model response's calls and the conversation before
it and plans their keys in the session's state; the tool takes its call's
key from that plan. A plan made before an approval is saved with the
session, so the approved call keeps its key after a restart. A killed turn
never ended, so the message sent again is the same turn, and the call
written again, reworded or not, has the same key and gets the first
answer, a replay; the same words after the first were answered are
another turn.

A call counts as an occurrence once its final answer is in the turn: a
call whose answer was pending (past a finite deadline) and that the model
writes again is the same call, under the same key.

Needs the ``agent-framework`` extra (``agent-framework-core``).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agent_framework import ChatContext, FunctionInvocationContext, FunctionTool, Message, chat_middleware
from pydantic import BaseModel, ValidationError

from ._tooltext import RESUME, arguments, is_pending, outcome, request_intent
from .client import AsyncClient, Client, Intent
from .errors import NoDurableIdentityError
from .keys import call_digest, call_intent, canonical, derive_key, intent_fields_of

__all__ = ["KEY_SCHEME", "call_key", "idemflow_tool", "keyed_calls", "planned_keys"]

#: The scheme of an Agent Framework call's key: the intended call, named by
#: its intent fields.
KEY_SCHEME = "mf1"

#: Where the plan lives in the session's state.
_STATE = "idemflow"

#: What names a call of each tool: its name, and a function of the model's
#: arguments (call_intent of the request the tool makes of them).
Namers = Mapping[str, Callable[[dict[str, Any]], str]]


def call_key(session_id: str, answered: int, prompt: Sequence[str], tool: str, call: str, occurrence: int) -> str:
    """The key of a call from its parts: the session, the turn (how many
    earlier messages of the user's were answered, and the turn's message's
    texts), the tool, the call's intent (call_intent's text) and its
    occurrence."""
    turn = derive_key("turn", str(answered), canonical(list(prompt)))
    return derive_key(KEY_SCHEME, session_id, turn, tool, call_digest(call), str(occurrence))


def _texts(m: Message) -> list[str]:
    return [c.text for c in m.contents if c.type == "text" and c.text is not None]


def _calls(m: Message) -> list[Any]:
    return [c for c in m.contents if c.type == "function_call"] if m.role == "assistant" else []


def _args(c: Any) -> dict[str, Any]:
    raw = c.arguments
    if isinstance(raw, str):
        try:
            raw = json.loads(raw or "{}")
        except ValueError:
            return {"_raw": raw}
    return dict(raw or {})


def _final(result: Any) -> bool:
    """Whether a call's result is a final answer the model read: not
    missing, not a pending answer of idemflow's."""
    return result is not None and not is_pending(str(result.result))


def planned_keys(session_id: str, conversation: Sequence[Message], response: Sequence[Message], namers: Namers) -> list[tuple[str, str, str]]:
    """The mf1 key of each call of response, the model's answer to
    conversation (see the module's comment), as (tool, call_intent's text,
    key). A tool namers does not name is named by idemflow's own intent
    fields for it, or its whole arguments."""

    def named(c: Any) -> str:
        namer = namers.get(c.name)
        return namer(_args(c)) if namer is not None else call_intent(intent_fields_of(c.name), _args(c))

    prompts = [i for i, m in enumerate(conversation) if m.role == "user" and _texts(m)]
    if not prompts:
        raise NoDurableIdentityError("no message of the user's asks for these calls")
    start = prompts[-1]
    answered = sum(1 for a, b in itertools.pairwise(prompts) if any(m.role == "assistant" and _texts(m) and not _calls(m) for m in conversation[a + 1 : b]))
    turn = conversation[start:]
    results = {c.call_id: c for m in turn for c in m.contents if c.type == "function_result"}
    seen: dict[tuple[str, str], int] = {}
    for m in turn:
        for c in _calls(m):
            if _final(results.get(c.call_id)):
                slot = (c.name, named(c))
                seen[slot] = seen.get(slot, 0) + 1
    out = []
    for m in response:
        for c in _calls(m):
            slot = (c.name, named(c))
            seen[slot] = seen.get(slot, 0) + 1
            out.append((c.name, slot[1], call_key(session_id, answered, _texts(conversation[start]), c.name, slot[1], seen[slot])))
    return out


def _namers(context: ChatContext) -> dict[str, Callable[[dict[str, Any]], str]]:
    """How each of idemflow's tools in the request names its calls."""
    tools = (context.options or {}).get("tools") or []
    return {t.name: t.namer for t in tools if isinstance(t, _IdemflowTool)}


@chat_middleware
async def keyed_calls(context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
    """The chat middleware that plans the keys of idemflow's tools' calls
    (Agent(..., middleware=[keyed_calls])): each model response's calls,
    named from the conversation before it, planned in the session's state,
    where each call's tool takes its key."""
    await call_next()
    result = context.result
    if context.session is None or result is None or not hasattr(result, "messages"):
        return
    namers = _namers(context)
    planned = planned_keys(context.session.session_id, list(context.messages), list(result.messages), namers)
    plan: dict[str, list[str]] = context.session.state.setdefault(_STATE, {}).setdefault("planned", {})
    for tool, call, key in planned:
        # Only idemflow's tools take keys; a key planned again (the same
        # call of a run that failed before its tool took it) is there once.
        if tool not in namers:
            continue
        queue = plan.setdefault(tool + "\0" + call, [])
        if key not in queue:
            queue.append(key)


def _take(ctx: FunctionInvocationContext | None, tool: str, call: str) -> str:
    """The key planned for a call of tool named call, taken from the
    session's plan. Raises NoDurableIdentityError where none was planned."""
    session = ctx.session if ctx is not None else None
    if session is None:
        raise NoDurableIdentityError("the agent runs without a session (agent.run(..., session=...)), so nothing durable names its calls")
    keys = session.state.get(_STATE, {}).get("planned", {}).get(tool + "\0" + call)
    if not keys:
        raise NoDurableIdentityError("no key was planned for this call: give the agent idemflow.agent_framework.keyed_calls as middleware")
    return str(keys.pop(0))


def idemflow_tool(
    client: Client | AsyncClient,
    *,
    name: str,
    description: str,
    path: str | Callable[[dict[str, Any]], str],
    input_model: type[BaseModel],
    body: Callable[[dict[str, Any]], Any] | None = None,
    deadline: float = math.inf,
    intent: Sequence[Mapping[str, str]] | None = None,
    approval_mode: str | None = None,
) -> FunctionTool:
    """An Agent Framework tool (Agent(tools=[...])) that runs one of
    idemflow's operations (a ticket, an order, a declared operation, an
    HTTP tool) once per intended call. The agent needs keyed_calls as
    middleware, and each run a session.

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
    the call's arguments); idemflow's own tools' are known by name or path.
    The key names them, and the request says so: the message sent again
    whose model rewords the title gets the first ticket, a replay naming
    what differed. approval_mode is the framework's ("always_require": the
    run stops for a human's approval before the call)."""
    fields = tuple(intent) if intent is not None else intent_fields_of(name, path if isinstance(path, str) else None)
    namer = request_intent(fields, input_model, body)

    async def run(ctx: FunctionInvocationContext, **raw: Any) -> str:
        try:
            args = arguments(input_model, raw)
        except ValidationError as e:
            return f"invalid arguments, nothing was sent: {e}"
        try:
            key = _take(ctx, name, namer(raw))
        except NoDurableIdentityError as e:
            return f"NoDurableIdentityError: {name}: {e}; nothing was sent"
        p = path(args) if callable(path) else path
        sent = Intent(key, p, body(args) if body else args, by_intent=bool(fields))
        return (await outcome(client, sent, deadline, name, RESUME["agent_framework"]))[1]

    return _IdemflowTool(namer, name=name, description=description, func=run, input_model=input_model, approval_mode=approval_mode)


class _IdemflowTool(FunctionTool):
    """A FunctionTool that says how it names its calls, for keyed_calls."""

    def __init__(self, namer: Callable[[dict[str, Any]], str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.namer = namer
