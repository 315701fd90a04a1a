"""LlamaIndex (idemflow.llamaindex): idemflow's FunctionAgent run by
run_durably, which saves its context at each call's stop, SIGKILLed mid
tool call (the answer dropped after idemflow executed, or the request
held before it arrived) and restored from the save, ends with one ticket;
the naive control (a fresh key per call) makes two; an app whose saved
context is lost sends the message again, and makes one (two under li1's
keys). A turn run again from the state saved before it (a regenerate)
replays. Also: two calls in one answer
are two tickets, a call waits through a partition with nothing pending
handed to the model, a call ID reused by a later turn is a second call, a
FunctionAgent run without run_durably is refused before any call (the
shared key vectors are in test_vectors.py)."""

import asyncio
import json
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client

import idemflow
from idemflow.errors import NoDurableIdentityError
from idemflow.llamaindex import run_durably

from . import children
from .agents.llamaindex_agent import ScriptedModel, agent, tool_answers
from .conftest import count, docs_block, need
from .wire import Fault, Proxy

CASES: list[tuple[str, Fault, tuple[str, ...], int, bool]] = [
    # name, fault, extra arguments, tickets after the kill and the rerun, the rerun's answer replayed
    ("restored turn, answer lost", "answer-lost", (), 1, True),
    ("restored turn, request held", "before-received", (), 1, False),
    ("control: fresh keys", "answer-lost", ("--tools", "naive"), 2, False),
    ("no saved context, the message sent again", "answer-lost", ("--unsafe",), 1, True),
    ("control: no saved context, li1 keys", "answer-lost", ("--unsafe", "--key-scheme", "li1"), 2, False),
    # Through idemflow's MCP server (mcp_tools), the model writing an
    # idempotency_key of its own each time it writes the call.
    ("MCP: restored turn", "answer-lost", ("--via", "mcp"), 1, True),
    ("MCP: no saved context, the message sent again", "answer-lost", ("--via", "mcp", "--unsafe"), 1, True),
    ("MCP control: the model's key, the message sent again", "answer-lost", ("--via", "mcp", "--unsafe", "--tools", "naive"), 2, False),
]


@pytest.mark.parametrize("name,fault,extra,tickets,replayed", CASES, ids=[c[0] for c in CASES])
def test_a_killed_llamaindex_agent_is_restored_without_a_duplicate(
    name: str, fault: Fault, extra: tuple[str, ...], tickets: int, replayed: bool, url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    thread = f"py-llamaindex-{name.split(':')[0].split(',')[-1].strip().replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    # The first POST reaches the gateway and its answer is dropped (or it
    # never arrives), and the agent is SIGKILLed while it waits; the app
    # then runs it again, which restores the turn from its save.
    args = ["--state", str(tmp_path / "run.json"), *extra]
    resumed = "resuming" if extra in ((), ("--via", "mcp")) else None
    children.kill_case("tests.agents.llamaindex_agent", name, thread, args, url, db, tickets=tickets, replayed=replayed, fault=fault, resumed=resumed)


REGENERATES = [
    # name, the model's options, key scheme, tickets after the regenerate (the first turn made its own), its answers replayed
    ("the same call under a new tool_id", {}, "li3", 2, [True]),
    ("two identical calls, both written again", {"calls": 2, "identical": True}, "li3", 4, [True, True]),
    ("a model that rewords the call: the same intent, a replay", {"reword": True}, "li3", 2, [True]),
    ("control: li2 keys the whole arguments", {"reword": True}, "li2", 3, [False]),
    ("control: li1 keys a random turn and the tool_id", {}, "li1", 3, [False]),
]


@pytest.mark.parametrize("name,model,scheme,tickets,replayed", REGENERATES, ids=[r[0] for r in REGENERATES])
def test_a_turn_run_again_from_the_state_before_it_makes_the_same_call_once(
    name: str, model: dict[str, Any], scheme: str, tickets: int, replayed: list[bool], url: str, token: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    """A regenerate: the app keeps the state saved before a turn, and runs
    the turn again from it with the same message. The model writes the
    same call under a new tool_id: the same intended call, a replay. (A
    first turn in other words made its own ticket, a turn before.) The
    same where the model words the call otherwise (the ticket's customer
    is its intent): the answer names what differed. Two identical calls
    stay two; the controls key the whole arguments (li2) and a random turn
    ID and the tool_id (li1)."""
    who = f"py-llamaindex-regen-{uuid.uuid4().hex[:6]}"
    state = tmp_path / "run.json"
    before = tmp_path / "before.json"

    async def scenario() -> tuple[int, list[str], list[str]]:
        async with idemflow.AsyncClient(url, token) as c:
            support = agent(c, who, key_scheme=scheme, **model)
            await run_durably(support, state, user_msg="Hello.")
            before.write_bytes(state.read_bytes())
            await run_durably(support, state, user_msg="Open a ticket: the printer is on fire.")
            n = count(db, "ticket", who)
            first = [json.loads(a)["result"]["idempotency_key"] for a in tool_answers(state)]
            await run_durably(support, before, user_msg="Open a ticket: the printer is on fire.")
            return n, first, tool_answers(before)

    n_turn, first, again = asyncio.run(scenario())
    n = count(db, "ticket", who)
    answers = [json.loads(a) for a in again]
    keys = [a["result"]["idempotency_key"] for a in answers]
    print(
        f"{name}: {n_turn} tickets after two turns, {n} after the second run again; replayed {[a['replayed'] for a in answers]},"
        f" differed {[a.get('differed') for a in answers]}; keys {first} then {keys}"
    )
    assert (n, [a["replayed"] for a in answers]) == (tickets, replayed)
    if model.get("reword") and all(replayed):
        assert [a.get("differed") for a in answers] == [["title"]], answers


@pytest.mark.parametrize(
    "calls,nth",
    [(2, 1), (2, 2), (3, 1), (3, 3)],
    ids=["2 calls, killed after 1", "2 calls, killed after both", "3 calls, killed after 1", "3 calls, killed after all 3"],
)
def test_every_call_of_a_restored_turn_runs_once_and_the_model_reads_each_answer_once(
    calls: int, nth: int, url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    """The model asks for calls tickets in one answer; the agent is
    SIGKILLed while the nth POST's answer is held (its effect done), and
    restored from its save: one ticket per call, each call's POST sent
    once by the restored process, and the model reads each call's answer
    once, under its own ID."""
    who = f"py-llamaindex-restored-{calls}-{nth}-{uuid.uuid4().hex[:6]}"
    proxy = Proxy(url, "answer-lost", hold=True, nth=nth)
    try:
        args = ["--thread", who, "--state", str(tmp_path / "run.json"), "--calls", str(calls)]
        _, p, out = children.kill_mid_call_and_rerun("tests.agents.llamaindex_agent", args, children.agent_env(proxy.url), proxy.hit)
    finally:
        proxy.close()
    assert p.returncode == 0 and any(s.startswith("DONE") for s in out), out
    reads = json.loads(next(s for s in out if s.startswith("model reads ")).split(" ", 2)[2])
    keys = [k for k in proxy.keys if k]
    sends = {k: keys.count(k) for k in keys}
    n = count(db, "ticket", who)
    print(f"{calls} calls, killed after {nth}: {n} tickets; the model read {reads}; POSTs per key {sorted(sends.values())}")
    assert n == calls
    assert sorted(reads["answered"]) == sorted(reads["asked"]) and len(reads["asked"]) == calls, reads
    # Each call is sent at most once by each process (the killed one may
    # have died before it sent a call).
    assert len(sends) == calls and max(sends.values()) <= 2, sends


@pytest.mark.parametrize("later", ["My network is down too.", "My printer is on fire."], ids=["a later turn", "the same message sent again"])
def test_a_later_turn_sent_before_the_last_was_restored_is_a_turn_of_its_own(later: str, url: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """The agent is SIGKILLed mid call (its answer dropped, the effect
    done) and the app sends turn 2's message before turn 1 was restored.
    run_durably restores turn 1 and finishes it (its call replays), then
    runs turn 2, whose call is a second ticket, never dropped for turn 1.
    The same message sent again is turn 1 finished: one ticket."""
    who = f"py-llamaindex-later-{uuid.uuid4().hex[:6]}"
    proxy = Proxy(url, "answer-lost", hold=True)
    try:
        args = ["--thread", who, "--state", str(tmp_path / "run.json")]
        _, p, out = children.kill_mid_call_and_rerun("tests.agents.llamaindex_agent", args, children.agent_env(proxy.url), proxy.hit, rerun=("--later", later))
    finally:
        proxy.close()
    assert p.returncode == 0 and any(s.startswith("DONE") for s in out), out
    n = count(db, "ticket", who)
    print(f"{later!r} sent after the kill: {n} tickets; {out}")
    assert n == (2 if later != "My printer is on fire." else 1)


def turns(url: str, token: str, state: Path, who: str, n: int, **kw: Any) -> list[bool]:
    """n turns of one conversation, each to its end: whether each tool
    answer was a replay."""

    async def run() -> list[bool]:
        replayed = []
        async with idemflow.AsyncClient(url, token) as c:
            for _ in range(n):
                await run_durably(agent(c, who, **kw), state, user_msg="My printer is on fire.")
                replayed += [json.loads(a)["replayed"] for a in tool_answers(state)]
        return replayed

    return asyncio.run(run())


def test_two_calls_in_one_answer_are_two_tickets(url: str, token: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """The model asks for two tickets in one answer: two intended calls,
    each stopped and saved before it acts, two tickets."""
    who = f"py-llamaindex-two-{uuid.uuid4().hex[:8]}"
    replayed = turns(url, token, tmp_path / "run.json", who, 1, calls=2)
    n = count(db, "ticket", who)
    print(f"two calls in one answer: replayed {replayed}, {n} tickets")
    assert (replayed, n) == ([False, False], 2)


def test_a_call_id_reused_in_a_later_turn_is_a_second_call(url: str, token: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """A provider that numbers calls per answer brings call_0 back in the
    next turn of the same conversation: two turns, two tickets, neither
    answered as the other's replay."""
    who = f"py-llamaindex-reused-{uuid.uuid4().hex[:8]}"
    replayed = turns(url, token, tmp_path / "run.json", who, 2, call_id="call_0")
    n = count(db, "ticket", who)
    print(f"two turns under call_0: replayed {replayed}, {n} tickets")
    assert (replayed, n) == ([False, False], 2)


def test_a_call_waits_through_a_partition_and_no_pending_answer_reaches_the_model(url: str, token: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """Every answer is dropped for 2.5 s: the call retries under its key
    until one comes, and the model reads that one, a final answer (a
    replay of the first attempt's ticket), never a pending one: LlamaIndex
    hands a tool's error to the model, which would write the call again
    under a new tool_id."""
    proxy = Proxy(url, "answer-lost", path="/never")
    who = f"py-llamaindex-partition-{uuid.uuid4().hex[:8]}"
    proxy.partitioned = True
    heal = threading.Timer(2.5, lambda: setattr(proxy, "partitioned", False))
    heal.start()

    async def run() -> list[str]:
        async with idemflow.AsyncClient(proxy.url, token, attempt_timeout=0.3, initial_backoff=0.02, max_backoff=0.1) as c:
            await run_durably(agent(c, who), tmp_path / "run.json", user_msg="My printer is on fire.")
        return tool_answers(tmp_path / "run.json")

    try:
        answers = asyncio.run(run())
    finally:
        heal.cancel()
        proxy.close()
    keys = {k for k in proxy.keys if k}
    print(f"a partition of 2.5 s: {len(proxy.keys)} attempts under {len(keys)} key; the model read {answers}")
    assert len(proxy.keys) > 1, "the partition dropped no answer: the test proved nothing"
    assert len(keys) == 1
    assert [json.loads(a)["http_status"] for a in answers] == [201], answers
    assert count(db, "ticket", who) == 1


def test_a_run_without_run_durably_is_refused_before_any_call(url: str, token: str, db: psycopg.Connection) -> None:
    """agent.run() alone would stop at each call's stop for a Proceed
    nobody sends: the run fails at its start, naming run_durably, and
    nothing is sent."""
    who = f"py-llamaindex-plain-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        async with idemflow.AsyncClient(url, token) as c:
            await agent(c, who).run(user_msg="My printer is on fire.")

    with pytest.raises(NoDurableIdentityError, match="run_durably"):
        asyncio.run(run())
    assert count(db, "ticket", who) == 0


def test_the_docs_snippet_runs(url: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """docs/agents/llamaindex.md's program, as written, with the scripted
    model in place of Gemini (the only change), run as a process:
    SIGKILLed while its call waits (the answer dropped after the ticket
    was made) and run again, it is restored and makes no second ticket."""
    snippet = docs_block("# LlamaIndex (Python 3.11+)\n")
    gemini = 'llm=GoogleGenAI(model="gemini-2.5-flash")'
    assert gemini in snippet
    model = 'llm=__import__("tests.agents.llamaindex_agent", fromlist=["ScriptedModel"]).ScriptedModel(customer="c-1"), streaming=False'
    code = snippet.replace(gemini, model)
    again = children.kill_snippet_mid_call_and_rerun(code, tmp_path, url, lambda: count(db, "ticket", "c-1"))
    assert "The ticket is open." in again.stdout, again.stdout


def test_the_docs_mcp_tools_run(url: str, token: str, db: psycopg.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agents/mcp.md's LlamaIndex snippet, as written (session and
    llm the function's parameters, turn.json in a fresh folder), after the
    same turn made through the native idemflow_tool: the call through MCP,
    with a model-written key of its own, has the native tool's key, so it
    is that call's replay, one ticket."""
    block = docs_block("**LlamaIndex** (`idemflow.llamaindex.mcp_tools`).")
    scope: dict[str, Any] = {}
    exec("async def snippet(session, llm):\n" + textwrap.indent(block + "return result\n", "    "), scope)
    monkeypatch.chdir(tmp_path)
    who = f"py-li-docs-mcp-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[list[str], list[str]]:
        async with idemflow.AsyncClient(url, token) as c:
            await run_durably(agent(c, who), tmp_path / "native.json", user_msg="My printer is on fire.")
        env = {**get_default_environment(), "IDEMFLOW_URL": url, "IDEMFLOW_TOKEN": token}
        params = StdioServerParameters(command=need("IDEMFLOW_BIN"), args=["mcp"], env=env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await scope["snippet"](session, ScriptedModel(customer=who, model_key=True))
        return tool_answers(tmp_path / "native.json"), tool_answers(tmp_path / "turn.json")

    first, again = asyncio.run(scenario())
    answers = [json.loads(first[0]), json.loads(again[0])]
    assert [a["replayed"] for a in answers] == [False, True], answers
    assert answers[1]["result"] == answers[0]["result"]
    assert count(db, "ticket", who) == 1
