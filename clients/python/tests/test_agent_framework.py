"""Microsoft Agent Framework (idemflow.agent_framework): a real Agent on
the framework's OpenAI Chat Completions client (the scripted model behind
tests/model_api.py), its session saved after each run, SIGKILLed mid call
(the answer dropped after idemflow executed, or the request held before it
arrived) before anything of its run was saved, and sent its message again
on the restored session, ends with one ticket; killed after its run was
saved stopped for an approval, and approved again, one ticket; the control
(a fresh key per call) makes two. Also: two calls in a turn are two
tickets, in one message or two, and a later turn in the same words is
another; a pending answer written again is the same key; an agent without
keyed_calls, or a run without a session, gets no key; the docs' program,
killed and run again."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agent_framework import AgentSession

import idemflow
from idemflow.agent_framework import idemflow_tool, keyed_calls

from . import children
from .agents.maf_agent import PROMPT, Ticket, agent, answers
from .conftest import count, docs_block
from .model_api import ScriptedModel
from .wire import Fault, through_partition


@pytest.fixture
def chat_api(model_api: Callable[..., ScriptedModel], monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., ScriptedModel]]:
    """Scripted models behind the stand-in's Chat Completions route, with
    OPENAI_BASE_URL pointed at the last one started."""

    def serve(customer: str, **kw: Any) -> ScriptedModel:
        m = model_api(customer, **kw)
        monkeypatch.setenv("OPENAI_BASE_URL", m.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        return m

    yield serve


CASES: list[tuple[str, Fault, tuple[str, ...], int, bool]] = [
    # name, fault, extra arguments, tickets after the kill and the rerun, the rerun's answer replayed
    ("message sent again, answer lost", "answer-lost", (), 1, True),
    ("message sent again, request held", "before-received", (), 1, False),
    ("message sent again, the call reworded", "answer-lost", (), 1, True),
    ("control: fresh keys", "answer-lost", ("--tools", "naive"), 2, False),
    # The run was saved stopped for an approval, approved, and killed mid
    # call: approved again from what was saved, the call keeps its key.
    ("approved again, answer lost", "answer-lost", ("--approve",), 1, True),
    ("approved, control: fresh keys", "answer-lost", ("--approve", "--tools", "naive"), 2, False),
]


@pytest.mark.parametrize("name,fault,extra,tickets,replayed", CASES, ids=[c[0] for c in CASES])
def test_a_killed_agent_framework_agent_goes_on_without_a_duplicate(
    name: str,
    fault: Fault,
    extra: tuple[str, ...],
    tickets: int,
    replayed: bool,
    url: str,
    db: psycopg.Connection,
    tmp_path: Path,
    chat_api: Callable[..., ScriptedModel],
) -> None:
    thread = f"py-maf-{name.split(':')[-1].split(',')[-1].strip().replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    model = chat_api(thread, reword="reworded" in name)
    children.kill_case(
        "tests.agents.maf_agent", name, thread, ["--state", str(tmp_path / "state.json"), *extra], url, db, tickets=tickets, replayed=replayed, fault=fault
    )
    # Sent again, the model wrote the call again; approved again, the
    # framework ran the saved call again.
    assert len(model.calls) == (1 if "--approve" in extra else 2), model.calls


async def turn(client: idemflow.AsyncClient, session: AgentSession, deadline: float = float("inf")) -> Any:
    tool = idemflow_tool(client, name="create_ticket", description="Create a support ticket.", path="/v1/tickets", input_model=Ticket, deadline=deadline)
    return await agent([tool], middleware=[keyed_calls]).run(PROMPT, session=session)


def test_two_calls_in_a_turn_are_two_tickets_and_a_later_turn_is_another(
    url: str, token: str, db: psycopg.Connection, chat_api: Callable[..., ScriptedModel]
) -> None:
    """Two calls with the same arguments in one turn (one after the other,
    or both in one message of the model's) are two intended calls: two
    tickets each. A later turn in the same words, on the session saved and
    restored, whose model writes the same call IDs again, is another turn:
    two more."""

    async def go() -> None:
        async with idemflow.AsyncClient(url, token) as c:
            for together in (False, True):
                who = f"py-maf-two-{together}-{uuid.uuid4().hex[:6]}"
                chat_api(who, titles=["Printer on fire"] * 2, together=together, ids=["call_same_1", "call_same_2"])
                session = AgentSession(session_id=who)
                await turn(c, session)
                first = count(db, "ticket", who)
                await turn(c, AgentSession.from_dict(json.loads(json.dumps(session.to_dict()))))
                how = "one message" if together else "two messages"
                print(f"two identical calls in a turn ({how}), then a later turn: {first}, then {count(db, 'ticket', who)} tickets")
                assert (first, count(db, "ticket", who)) == (2, 4)

    asyncio.run(go())


def test_a_regenerate_makes_the_same_call_once(url: str, token: str, db: psycopg.Connection, chat_api: Callable[..., ScriptedModel]) -> None:
    """A regenerate: the app sends the turn again on the session as it saved
    it before the turn, and the model writes the call again, reworded. It
    is the same turn, so the same key: one ticket, and the regenerated
    answer is a replay naming what differed."""
    who = f"py-maf-regenerate-{uuid.uuid4().hex[:6]}"
    model = chat_api(who, reword=True)

    async def go() -> Any:
        async with idemflow.AsyncClient(url, token) as c:
            before = AgentSession(session_id=who).to_dict()
            await turn(c, AgentSession.from_dict(before))
            return await turn(c, AgentSession.from_dict(before))

    response = asyncio.run(go())
    answer = json.loads(answers(response)[-1])
    print(f"a turn, then regenerated with the call reworded: {count(db, 'ticket', who)} tickets; the answer {answer}")
    assert len(model.calls) == 2 and count(db, "ticket", who) == 1
    assert answer["replayed"] is True and answer["differed"] == ["title"]


def test_a_pending_answer_written_again_is_the_same_call(url: str, token: str, db: psycopg.Connection, chat_api: Callable[..., ScriptedModel]) -> None:
    """A partition of 2.5 s and a 1 s deadline: the model reads that the
    call is pending, writes it again (as models do), and it waits again
    under the same key: one ticket, one key for every attempt."""
    who = f"py-maf-pending-{uuid.uuid4().hex[:8]}"
    model = chat_api(who)

    def run(u: str) -> Any:
        async def go() -> Any:
            async with idemflow.AsyncClient(u, token, attempt_timeout=0.5, initial_backoff=0.02, max_backoff=0.2) as c:
                return await turn(c, AgentSession(session_id=who), deadline=1.0)

        return asyncio.run(go())

    response, keys = through_partition(url, 2.5, run)
    print(f"a partition of 2.5 s, a 1 s deadline: the model wrote the call {len(model.calls)} times; keys {keys}; {count(db, 'ticket', who)} tickets")
    assert len(model.calls) >= 2 and len(keys) == 1 and count(db, "ticket", who) == 1
    assert json.loads(answers(response)[-1])["http_status"] == 201


def test_an_agent_without_keyed_calls_or_a_session_gets_no_key(url: str, token: str, db: psycopg.Connection, chat_api: Callable[..., ScriptedModel]) -> None:
    """Without the middleware nothing plans the call's key, and without a
    session nothing durable names it: the model reads
    NoDurableIdentityError, and nothing is sent."""
    who = f"py-maf-nokey-{uuid.uuid4().hex[:6]}"

    async def go() -> None:
        async with idemflow.AsyncClient(url, token) as c:
            tool = idemflow_tool(c, name="create_ticket", description="d", path="/v1/tickets", input_model=Ticket)
            for how, middleware, session in (("no middleware", [], AgentSession(session_id=who)), ("no session", [keyed_calls], None)):
                chat_api(who, titles=["Printer on fire"])
                response = await agent([tool], middleware=middleware).run(PROMPT, session=session)
                results = [str(c.result) for m in response.messages for c in m.contents if c.type == "function_result"]
                assert results and "NoDurableIdentityError" in results[0], (how, results)

    asyncio.run(go())
    assert count(db, "ticket", who) == 0


def test_the_docs_snippet_runs(url: str, db: psycopg.Connection, tmp_path: Path, chat_api: Callable[..., ScriptedModel]) -> None:
    """docs/agents/agent-framework.md's program, as written but for its
    session's ID (a new one), run as a process on the scripted model
    (customer c-1): SIGKILLed while its call waits (the answer dropped
    after the ticket was made) and run again, it makes no second ticket."""
    chat_api("c-1")
    code = docs_block("# Microsoft Agent Framework (Python 3.11+)\n")
    assert '"ticket-42"' in code
    code = code.replace('"ticket-42"', repr(f"ticket-docs-{uuid.uuid4().hex[:6]}"))
    children.kill_snippet_mid_call_and_rerun(code, tmp_path, url, lambda: count(db, "ticket", "c-1"))


KEYS = json.loads((Path(__file__).resolve().parents[2] / "testdata" / "keys.json").read_text())


@pytest.mark.parametrize("c", KEYS["agent_framework"], ids=lambda c: c["name"])
def test_agent_framework_key(c: dict[str, Any]) -> None:
    from idemflow.agent_framework import call_key
    from idemflow.keys import call_intent

    assert call_key(c["session_id"], c["answered"], c["prompt"], c["tool"], call_intent(c.get("intent", ()), c["args"]), c["occurrence"]) == c["key"]
