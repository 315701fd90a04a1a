"""Agno (``agno``): a tool that runs one of idemflow's operations once per
intended call, under a key derived from what the agent's database holds of
the session and what the run holds of the call.

What Agno keeps, read in agno 3.1: an agent with a database (``db=``:
``PostgresDb``, ``SqliteDb``, ``JsonDb``, ...) stores each run of a session
when the run ends, or when it pauses for a human (a tool's
``requires_confirmation``), never before a call runs. A process killed mid
call leaves nothing of its run; the app sends the user's message again, on
the same session, as a new run, and the model writes the call again under
a new ID. A run paused for a confirmation is stored with its calls, and
``continue_run`` runs the confirmed call with the same ID, as often as it
is continued. ``continue_run(..., continue_from="last_user", fork=True)``
forks a run from its user's message into a new run (``forked_from_run_id``),
whose model writes its calls again under new IDs; the fork's user message
is the same message (its ``id`` is copied). ``regenerate=True`` keeps the
run's calls and their answers and only writes the last answer again.

So the key (ag1) names the intended call, not those IDs: the session, the
turn, the tool, the call's intent fields (the operation's, as it declares
them: a ticket's ``customer_id``; for a tool that declares none, its
arguments in RFC 8785 form, less a model-written ``idempotency_key``) and
their occurrence in the turn. The turn is the user's message (its texts)
and its place: how many of the session's earlier turns were answered. A
turn is answered once one of its runs completed (a run, with its forks
and regenerations, is one turn); earlier means stored before the run
that first held this message, or, for a message no stored run holds (a
new message, or one sent again after a kill), every answered turn
stored. A killed turn never ended, so the message sent again is the same
turn, and the call written again has the same key and gets its answer, a
replay; a fork from the message is the same turn too; the same words
after the first were answered are another turn.

A call counts as an occurrence once its final answer is in the turn: a
call whose answer was pending (past a finite deadline) and that the model
writes again is the same call, under the same key. Two calls of one tool
with the same intent in one message of the model's are two calls.

A Team's members share the team's session; their calls are not keyed
here. Needs the ``agno`` extra.
"""

from __future__ import annotations

import inspect
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agno.db.base import SessionType
from agno.models.message import Message
from agno.run.base import RunContext, RunStatus
from agno.tools.function import Function, FunctionCall
from pydantic import BaseModel, ValidationError

from ._tooltext import RESUME, arguments, is_pending, outcome, outcome_sync
from .client import AsyncClient, Client, Intent
from .errors import NoDurableIdentityError
from .keys import call_digest, call_intent, canonical, derive_key, intent_fields_of

__all__ = ["KEY_SCHEME", "adurable_key", "call_key", "durable_key", "idemflow_tool", "intended_call_key"]

#: The scheme of an Agno tool call's key: the intended call, named by its
#: intent fields.
KEY_SCHEME = "ag1"

#: A stored run with one of these statuses answered its turn (a run
#: regenerated had been answered before its answer was written again).
_ANSWERED = (RunStatus.completed, RunStatus.regenerated)


def call_key(
    session_id: str,
    answered: int,
    prompt: Sequence[str],
    tool: str,
    args: Any,
    occurrence: int,
    *,
    fields: Sequence[Mapping[str, str]] = (),
) -> str:
    """The key of a call from its parts (clients/testdata/keys.json's agno
    vectors): the session, the turn (how many earlier turns were answered,
    and the user message's texts), the tool, the call's intent
    (call_intent(fields, args)) and its occurrence."""
    turn = derive_key("turn", str(answered), canonical(list(prompt)))
    return derive_key(KEY_SCHEME, session_id, turn, tool, call_digest(call_intent(fields, args)), str(occurrence))


def _texts(m: Message) -> list[str]:
    """A message's texts: an image's or a file's bytes have no JSON form."""
    if isinstance(m.content, str):
        return [m.content]
    return [p["text"] for p in m.content or [] if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]


def _final(m: Message | None) -> bool:
    """Whether a tool's result is a final answer the model read: not
    missing, not a pending answer of idemflow's."""
    return m is not None and not is_pending(str(m.content))


def _answered_before(runs: Sequence[Any], message_id: str) -> int:
    """How many of the session's turns stored before the run that first
    held the user message message_id were answered; all of them when no
    stored run holds it."""
    at = {r.run_id: i for i, r in enumerate(runs)}
    parent = {r.run_id: r.forked_from_run_id for r in runs}

    def root(run_id: str) -> str:
        seen: set[str] = set()
        while parent.get(run_id) in at and run_id not in seen:
            seen.add(run_id)
            run_id = parent[run_id]
        return run_id

    holder = next((r.run_id for r in runs if any(m.id == message_id and not m.from_history for m in r.messages or [])), None)
    until = at[root(holder)] if holder is not None else len(runs)
    return len({root(r.run_id) for r in runs if r.status in _ANSWERED and at[root(r.run_id)] < until})


def intended_call_key(
    session_id: str, runs: Sequence[Any], messages: Sequence[Message], call_id: str, *, intents: Mapping[str, Sequence[Mapping[str, str]]] | None = None
) -> str | None:
    """The key of call call_id (see the module's comment) from the runs
    the session's database holds and the messages of the run that makes
    the call; None when no message of the run's asks for it. A call is
    named by its tool's intent fields (intents[tool], or idemflow's own
    tool's)."""

    def parts(call: Mapping[str, Any]) -> tuple[str, Any, Sequence[Mapping[str, str]]]:
        fn = call.get("function") or {}
        tool, raw = fn.get("name", ""), fn.get("arguments") or "{}"
        fields = (intents or {})[tool] if tool in (intents or {}) else intent_fields_of(tool)
        return tool, json.loads(raw) if isinstance(raw, str) else raw, fields

    def named(call: Mapping[str, Any]) -> str:
        tool, args, fields = parts(call)
        return tool + "\0" + call_intent(fields, args)

    own = [m for m in messages if not m.from_history]
    asks = [(i, j) for i, m in enumerate(own) if m.role == "assistant" for j, c in enumerate(m.tool_calls or []) if c.get("id") == call_id]
    at = asks[-1] if asks else None
    if at is None:
        return None
    i, j = at
    start = max((k for k in range(i) if own[k].role == "user"), default=None)
    if start is None:
        return None
    call = (own[i].tool_calls or [])[j]
    this = named(call)
    results = {m.tool_call_id: m for m in own[start:] if m.role == "tool"}
    n = 1 + sum(1 for m in own[start + 1 : i] if m.role == "assistant" for c in m.tool_calls or [] if named(c) == this and _final(results.get(c.get("id"))))
    n += sum(1 for c in (own[i].tool_calls or [])[:j] if named(c) == this)
    # Earlier turns of this run (a continued run may hold several): each
    # answered once the model wrote an answer with no call after it.
    answered = _answered_before(runs, own[start].id)
    prompts = [k for k in range(start + 1) if own[k].role == "user"]
    answered += sum(1 for a, b in itertools.pairwise(prompts) if any(m.role == "assistant" and not m.tool_calls for m in own[a + 1 : b]))
    tool, args, fields = parts(call)
    return call_key(session_id, answered, _texts(own[start]), tool, args, n, fields=fields)


def _session_of(agent: Any) -> Any:
    """What agent's database answers for its session (a coroutine for an
    async database). Raises NoDurableIdentityError for an agent without a
    database: nothing it keeps outlives its process."""
    db = getattr(agent, "db", None)
    if db is None:
        raise NoDurableIdentityError("the agent has no database (db=), so nothing durable names its calls")
    return db


def _key_of(session: Any, run_context: RunContext, call_id: str, intents: Mapping[str, Sequence[Mapping[str, str]]] | None) -> str:
    key = intended_call_key(run_context.session_id, list(getattr(session, "runs", None) or []), run_context.messages or [], call_id, intents=intents)
    if key is None:
        raise NoDurableIdentityError(f"no message of run {run_context.run_id} asks for call {call_id}")
    return key


def durable_key(agent: Any, run_context: RunContext, call_id: str, *, intents: Mapping[str, Sequence[Mapping[str, str]]] | None = None) -> str:
    """The key of call call_id that agent runs in run_context, from the
    session its database holds and the run's messages
    (intended_call_key). Raises NoDurableIdentityError for an agent without
    a database, or a call no message of the run asks for; TypeError for an
    async database (adurable_key)."""
    session = _session_of(agent).get_session(session_id=run_context.session_id, session_type=SessionType.AGENT)
    if inspect.isawaitable(session):
        session.close()  # type: ignore[attr-defined]
        raise TypeError("the agent's database is async: give idemflow_tool an AsyncClient, and run the agent with arun")
    return _key_of(session, run_context, call_id, intents)


async def adurable_key(agent: Any, run_context: RunContext, call_id: str, *, intents: Mapping[str, Sequence[Mapping[str, str]]] | None = None) -> str:
    """durable_key for an agent run with arun, whose database may be async."""
    session = _session_of(agent).get_session(session_id=run_context.session_id, session_type=SessionType.AGENT)
    if inspect.isawaitable(session):
        session = await session
    return _key_of(session, run_context, call_id, intents)


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
    requires_confirmation: bool | None = None,
) -> Function:
    """An Agno tool (a Function, for Agent(tools=[...])) that runs one of
    idemflow's operations (a ticket, an order, a declared operation, an
    HTTP tool) once per intended call.

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
    what differed. requires_confirmation is Agno's: the run pauses before
    the call, and is stored, until the app confirms it (continue_run).

    With a Client, the tool is a function for agent.run; with an
    AsyncClient, a coroutine for agent.arun (and an async database)."""
    fields = tuple(intent) if intent is not None else intent_fields_of(name, path if isinstance(path, str) else None)

    def request(key: str, args: dict[str, Any]) -> Intent:
        p = path(args) if callable(path) else path
        return Intent(key, p, body(args) if body else args, by_intent=bool(fields))

    def no_key(e: NoDurableIdentityError) -> str:
        return f"NoDurableIdentityError: {name}: {e}; nothing was sent"

    if isinstance(client, AsyncClient):
        aclient = client

        async def run_async(fc: FunctionCall, run_context: RunContext, agent: Any, **raw: Any) -> str:
            try:
                args = arguments(input_model, raw)
            except ValidationError as e:
                return f"invalid arguments, nothing was sent: {e}"
            try:
                key = await adurable_key(agent, run_context, fc.call_id or "", intents={name: fields})
            except NoDurableIdentityError as e:
                return no_key(e)
            return (await outcome(aclient, request(key, args), deadline, name, RESUME["agno"]))[1]

        entry: Callable[..., Any] = run_async
    else:
        sclient = client

        def run_sync(fc: FunctionCall, run_context: RunContext, agent: Any, **raw: Any) -> str:
            try:
                args = arguments(input_model, raw)
            except ValidationError as e:
                return f"invalid arguments, nothing was sent: {e}"
            try:
                key = durable_key(agent, run_context, fc.call_id or "", intents={name: fields})
            except NoDurableIdentityError as e:
                return no_key(e)
            return outcome_sync(sclient, request(key, args), deadline, name, RESUME["agno"])

        entry = run_sync
    return Function(
        name=name,
        description=description,
        parameters=input_model.model_json_schema(),
        entrypoint=entry,
        skip_entrypoint_processing=True,
        requires_confirmation=requires_confirmation,
    )
