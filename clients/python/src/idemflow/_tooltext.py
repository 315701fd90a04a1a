"""What an agent framework's tool sends and hands the model, the same in
every integration: the request body made from the model's arguments, the
wait for its final answer, and that answer or a final refusal. Never a
pending answer: each integration stops its run instead (its own way),
since a model that reads one as an error retries under a new key."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel

from .answers import Result
from .client import AsyncClient, Client, Intent
from .errors import DeadlineError, ProblemError
from .keys import call_arguments, call_intent


def answer_text(r: Result) -> str:
    """A final answer: {http_status, replayed, result}; a replay of a call
    keyed by its intent fields whose other arguments differed also names
    them (differed), so that the model does not think its new wording was
    saved: the result holds what was made."""
    out: dict[str, Any] = {"http_status": r.status, "replayed": r.replayed, "result": r.body}
    if r.differed:
        out["differed"] = list(r.differed)
        out["note"] = DIFFERED_NOTE
    return json.dumps(out, ensure_ascii=False)


#: What a replay whose other arguments differed tells the model.
DIFFERED_NOTE = "this intent was already done: the result is what was made then, not the arguments of this call"


def refusal_text(e: ProblemError, key: str) -> str:
    """A final refusal is the model's to read, not a crash of the run: a
    rejection stored under the key (the operation's or its downstream's,
    whose body is as it came), or idemflow's refusal of the arguments,
    which nothing recorded."""
    return json.dumps({**e.to_dict(), "replayed": False, "key": key}, ensure_ascii=False)


#: How each integration's run goes on after a pending answer: always the
#: same call under the same key, never a new one (tests/modeltext.py holds
#: them to the rule every client shares).
RESUME = {
    "langgraph": "resume the run to wait for its answer",
    "openai_agents": "resume the run from its saved RunState to wait for its answer",
    "pydantic_ai": "resume the agent from its saved history (run_durably), or let Temporal make the activity's next attempt under the same key",
    "dbos": "the DBOS step waits on under the same key",
    "adk": "resume the invocation with its invocation_id (run_durably) to wait for its answer",
    "crewai": "the same call with the same arguments waits on under the same key",
    "claude": "send the same turn on its session (run_durably, the same turn_id) to wait for its answer",
    "strands": "the same call with the same arguments, in this turn or this message sent again, waits on under the same key",
    "agent_framework": "the same call, in this turn or this message sent again on the restored session, waits on under the same key",
    "agno": "the same call, in this turn, this message sent again on the session or a fork from it, waits on under the same key",
}


#: What every pending text says, and how a framework's key rule tells a
#: pending answer in its history from a final one.
_PENDING = "the call is pending under key"


def pending_text(name: str, key: str, resume: str) -> str:
    """Why a call whose answer did not come within the wait stops the run,
    and how to go on (resume: the framework's own way)."""
    return f"{name}: no final answer within the wait; {_PENDING} {key} and must not be made again: {resume}"


def is_pending(text: str) -> bool:
    """Whether a call's result the model read is a pending answer
    (pending_text), not a final one: the call written again is the same
    call, not one more occurrence."""
    return _PENDING in text


def arguments(args_schema: type[BaseModel], raw: dict[str, Any]) -> dict[str, Any]:
    """The model's arguments as args_schema reads them, as JSON. An
    optional argument the model left out (its default, None) is left out,
    not sent as null, which the operation's schema refuses for a typed
    field."""
    args = args_schema(**raw).model_dump(mode="json")
    for field, info in args_schema.model_fields.items():
        if not info.is_required() and info.default is None and args.get(field, 0) is None:
            del args[field]
    return args


def request_intent(
    fields: Sequence[Mapping[str, str]], args_schema: type[BaseModel], body: Callable[[dict[str, Any]], Any] | None
) -> Callable[[dict[str, Any]], str]:
    """What names a call of a tool whose request is made from the model's
    arguments (call_intent of the request, as the operation's intent fields
    read it), for a framework's key; arguments the schema refuses are named
    by themselves alone (the call fails before it sends anything)."""

    def intent_of(raw: dict[str, Any]) -> str:
        try:
            args = arguments(args_schema, dict(raw))
        except ValueError:
            return call_arguments(raw)
        return call_intent(fields, body(args) if body else args)

    return intent_of


async def send(client: Client | AsyncClient, intent: Intent, deadline: float) -> Result:
    """intent's final answer from either client, for a framework whose
    tools are coroutines: a Client's blocking wait runs in a thread, so
    that it holds no event loop."""
    if isinstance(client, AsyncClient):
        return await client.do(intent, deadline=deadline)
    return await asyncio.to_thread(client.do, intent, deadline=deadline)


def outcome_sync(client: Client, intent: Intent, deadline: float, name: str, resume: str) -> str:
    """outcome's text for a framework whose tools are plain functions: the
    Client's blocking wait, in the tool's own thread."""
    try:
        return answer_text(client.do(intent, deadline=deadline))
    except ProblemError as e:
        return refusal_text(e, intent.key)
    except DeadlineError:
        return pending_text(name, intent.key, resume)


async def outcome(client: Client | AsyncClient, intent: Intent, deadline: float, name: str, resume: str) -> tuple[Literal["answer", "refusal", "pending"], str]:
    """What the model reads of intent, sent under its key (send): its final
    answer, a final refusal, or, past deadline, that it is pending (resume:
    how the framework goes on); and which of the three it is."""
    try:
        return "answer", answer_text(await send(client, intent, deadline))
    except ProblemError as e:
        return "refusal", refusal_text(e, intent.key)
    except DeadlineError:
        return "pending", pending_text(name, intent.key, resume)
