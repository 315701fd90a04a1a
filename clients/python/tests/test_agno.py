"""Agno (idemflow.agno): a real Agent with a JsonDb on Agno's Claude model
(the scripted model behind tests/model_api.py), SIGKILLed mid call (the
answer dropped after idemflow executed, or the request held before it
arrived) before anything of its run was stored, and sent its message
again on the session, ends with one ticket; killed after its run was
stored paused for a confirmation, and continued again, one ticket; the
controls (a fresh key per call, the call's ID as the key) make two. Also:
a fork from the user's message (continue_run from last_user) is the same
turn, a regenerate makes no call; two calls in a turn are two tickets, in
one message or two, and a later turn in the same words is another; a
pending answer written again is the same key; an agent without a
database gets no key; the shared key vectors; the docs' program, killed
and run again."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agno.agent import Agent
from agno.models.anthropic import Claude

import idemflow
from idemflow.agno import call_key, idemflow_tool

from . import children
from .agents.agno_agent import PROMPT, Ticket, agent, answers
from .conftest import count, docs_block
from .model_api import ScriptedModel
from .wire import Fault, through_partition

KEYS = json.loads((Path(__file__).resolve().parents[2] / "testdata" / "keys.json").read_text())

CASES: list[tuple[str, Fault, tuple[str, ...], int, bool]] = [
    # name, fault, extra arguments, tickets after the kill and the rerun, the rerun's answer replayed
    ("message sent again, answer lost", "answer-lost", (), 1, True),
    ("message sent again, request held", "before-received", (), 1, False),
    # The model words the call otherwise when the message is sent again:
    # the same customer, the same intent, a replay.
    ("message sent again, the call reworded", "answer-lost", (), 1, True),
    ("control: fresh keys", "answer-lost", ("--tools", "naive"), 2, False),
    ("control: the call ID as the key", "answer-lost", ("--tools", "call-id"), 2, False),
    # The run was stored paused before the call, confirmed, and killed
    # mid call: continued again from what was stored, the call keeps its ID.
    ("confirmed and continued again, answer lost", "answer-lost", ("--confirm",), 1, True),
    ("confirmed, control: fresh keys", "answer-lost", ("--confirm", "--tools", "naive"), 2, False),
]


@pytest.mark.parametrize("name,fault,extra,tickets,replayed", CASES, ids=[c[0] for c in CASES])
def test_a_killed_agno_agent_goes_on_without_a_duplicate(
    name: str,
    fault: Fault,
    extra: tuple[str, ...],
    tickets: int,
    replayed: bool,
    url: str,
    db: psycopg.Connection,
    tmp_path: Path,
    model_api: Callable[..., ScriptedModel],
) -> None:
    thread = f"py-agno-{name.split(':')[-1].split(',')[-1].strip().replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    model = model_api(thread, reword="reworded" in name)
    children.kill_case(
        "tests.agents.agno_agent", name, thread, ["--db", str(tmp_path / "db"), *extra], url, db, tickets=tickets, replayed=replayed, fault=fault
    )
    # Sent again, the model wrote the call again under a new ID; continued,
    # Agno ran the stored call again.
    assert len(set(model.calls)) == (1 if "--confirm" in extra else 2), model.calls


def turn(client: idemflow.Client, session: str, db: Path, deadline: float = float("inf")) -> tuple[Agent, Any]:
    tool = idemflow_tool(client, name="create_ticket", description="Create a support ticket.", path="/v1/tickets", input_model=Ticket, deadline=deadline)
    a = agent(session, str(db), [tool])
    return a, a.run(PROMPT)


def test_a_fork_from_the_message_is_the_same_turn_and_a_regenerate_makes_no_call(
    url: str, token: str, db: psycopg.Connection, tmp_path: Path, model_api: Callable[..., ScriptedModel]
) -> None:
    """A chat app's "retry" forks the run from the user's message
    (continue_run(continue_from="last_user", fork=True)): the model writes
    the call again, reworded, under a new ID, and it is the same intended
    call, a replay of the first ticket; Agno's regenerate keeps the calls
    and writes only the last answer again. The turn forked is the second
    of its session, so the fork must count the first one alone."""
    who = f"py-agno-fork-{uuid.uuid4().hex[:6]}"
    model = model_api(who, titles=["Printer on fire"], reword=True)
    with idemflow.Client(url, token) as c:
        turn(c, who, tmp_path / "db")
        a, second = turn(c, who, tmp_path / "db")
        assert count(db, "ticket", who) == 2
        forked = a.continue_run(run_id=second.run_id, session_id=who, continue_from="last_user", fork=True)
        regenerated = a.continue_run(run_id=forked.run_id, session_id=who, regenerate=True)
    fork_answer = json.loads(answers(forked)[-1])
    print(f"two turns, a fork of the second, a regenerate: {count(db, 'ticket', who)} tickets; the fork's answer {fork_answer}; calls {model.calls}")
    assert forked.forked_from_run_id == second.run_id and len(model.calls) == 3
    assert fork_answer["replayed"] is True and fork_answer["result"] == json.loads(answers(second)[-1])["result"]
    assert regenerated.forked_from_run_id == forked.run_id and len(model.calls) == 3
    assert count(db, "ticket", who) == 2


def test_two_calls_in_a_turn_are_two_tickets_and_a_later_turn_is_another(
    url: str, token: str, db: psycopg.Connection, tmp_path: Path, model_api: Callable[..., ScriptedModel]
) -> None:
    """Two calls with the same arguments in one turn (one after the other,
    or both in one message of the model's) are two intended calls: two
    tickets each. A later turn in the same words, whose model writes the
    same call IDs again, is another turn: two more."""
    with idemflow.Client(url, token) as c:
        for together in (False, True):
            who = f"py-agno-two-{together}-{uuid.uuid4().hex[:6]}"
            model_api(who, titles=["Printer on fire"] * 2, together=together, ids=["toolu_same_1", "toolu_same_2"])
            turn(c, who, tmp_path / "db")
            first = count(db, "ticket", who)
            turn(c, who, tmp_path / "db")
            how = "one message" if together else "two messages"
            print(f"two identical calls in a turn ({how}), then a later turn: {first}, then {count(db, 'ticket', who)} tickets")
            assert (first, count(db, "ticket", who)) == (2, 4)


def test_a_pending_answer_written_again_is_the_same_call(
    url: str, token: str, db: psycopg.Connection, tmp_path: Path, model_api: Callable[..., ScriptedModel]
) -> None:
    """A partition of 2.5 s and a 1 s deadline: the model reads that the
    call is pending, writes it again (as models do), and it waits again
    under the same key: one ticket, one key for every attempt."""
    who = f"py-agno-pending-{uuid.uuid4().hex[:8]}"
    model = model_api(who)

    def run(u: str) -> Any:
        with idemflow.Client(u, token, attempt_timeout=0.5, initial_backoff=0.02, max_backoff=0.2) as c:
            return turn(c, who, tmp_path / "db", deadline=1.0)[1]

    result, keys = through_partition(url, 2.5, run)
    print(f"a partition of 2.5 s, a 1 s deadline: the model wrote the call {len(model.calls)} times; keys {keys}; {count(db, 'ticket', who)} tickets")
    assert len(model.calls) >= 2 and len(keys) == 1 and count(db, "ticket", who) == 1
    assert json.loads(answers(result)[-1])["http_status"] == 201


def test_an_agent_without_a_database_gets_no_key(url: str, token: str, db: psycopg.Connection, model_api: Callable[..., ScriptedModel]) -> None:
    """Nothing an agent without a database keeps outlives its process:
    the model reads NoDurableIdentityError, and nothing is sent."""
    who = f"py-agno-nodb-{uuid.uuid4().hex[:6]}"
    model_api(who, titles=["Printer on fire"])
    with idemflow.Client(url, token) as c:
        tool = idemflow_tool(c, name="create_ticket", description="d", path="/v1/tickets", input_model=Ticket)
        run = Agent(model=Claude(id="claude-sonnet-4-5"), tools=[tool]).run(PROMPT)
    results = [str(m.content) for m in run.messages or [] if m.role == "tool"]
    assert results and "NoDurableIdentityError" in results[0], results
    assert count(db, "ticket", who) == 0


@pytest.mark.parametrize("c", KEYS["agno"], ids=lambda c: c["name"])
def test_agno_key(c: dict[str, Any]) -> None:
    key = call_key(c["session_id"], c["answered"], c["prompt"], c["tool"], c["args"], c["occurrence"], fields=c.get("intent", ()))
    assert key == c["key"]


def test_the_docs_snippet_runs(url: str, db: psycopg.Connection, tmp_path: Path, model_api: Callable[..., ScriptedModel]) -> None:
    """docs/agents/agno.md's program, as written but for its session's ID
    (a new one), run as a process on the scripted model (customer c-1):
    SIGKILLed while its call waits (the answer dropped after the ticket was
    made) and run again, it makes no second ticket."""
    model_api("c-1")
    code = docs_block("# Agno (Python 3.10+)\n")
    assert '"ticket-42"' in code
    code = code.replace('"ticket-42"', repr(f"ticket-docs-{uuid.uuid4().hex[:6]}"))
    children.kill_snippet_mid_call_and_rerun(code, tmp_path, url, lambda: count(db, "ticket", "c-1"))
