"""CrewAI (idemflow.crewai), in its own environment: a real Flow with
@persist on SQLite and a crew whose agent calls idemflow's tool,
SIGKILLed mid call (the answer dropped after idemflow executed, or the
request held before it arrived) and run again with the state's ID, ends
with one ticket; the naive control (a fresh key per call) and a model
that writes other arguments on the re-run make two. Also: two calls in a method are two tickets, a call waits
through a partition with nothing pending handed to the model, a tool
made outside a flow method gets no key, and the shared key vectors."""

from __future__ import annotations

import json
import math
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

import idemflow
from idemflow.crewai import IdemflowTool, args_digest, call_key, intent_digest
from idemflow.errors import NoDurableIdentityError

from .. import children
from ..conftest import count, docs_block, need
from ..wire import Fault, Proxy
from .crewai_agent import ScriptedModel, Ticket, support_flow

KEYS = json.loads((Path(__file__).resolve().parents[3] / "testdata" / "keys.json").read_text())


CASES: list[tuple[str, Fault, tuple[str, ...], int, bool]] = [
    # name, fault, extra arguments, tickets after the kill and the rerun, the rerun's answer replayed
    ("method run again, answer lost", "answer-lost", (), 1, True),
    ("method run again, request held", "before-received", (), 1, False),
    ("control: fresh keys", "answer-lost", ("--tools", "naive"), 2, False),
    # The model words the call otherwise when the method runs again: the
    # same customer, the same intent (cr2), a replay; cr1 named the whole
    # arguments.
    ("method run again, the call reworded", "answer-lost", ("--drift",), 1, True),
    ("control: the call reworded, cr1 keys the whole arguments", "answer-lost", ("--drift", "--key-scheme", "cr1"), 2, False),
    # Through idemflow's MCP server, the model writing a key of its own each time.
    ("MCP: method run again, answer lost", "answer-lost", ("--via", "mcp"), 1, True),
    ("MCP control: CrewAI's own MCP tools, the model's key", "answer-lost", ("--via", "mcp", "--tools", "naive"), 2, False),
]


@pytest.mark.parametrize("name,fault,extra,tickets,replayed", CASES, ids=[c[0] for c in CASES])
def test_a_killed_crewai_flow_runs_its_method_again_without_a_duplicate(
    name: str, fault: Fault, extra: tuple[str, ...], tickets: int, replayed: bool, url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    thread = f"py-crewai-{name.split(':')[0].split(',')[-1].strip().replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    # The first POST reaches the gateway and its answer is dropped (or it
    # never arrives), and the agent is SIGKILLed while it waits; the app
    # then runs it again, the way it resumes.
    args = ["--state", str(tmp_path / "flows.db"), *extra]
    children.kill_case("tests.crewai.crewai_agent", name, thread, args, url, db, tickets=tickets, replayed=replayed, fault=fault)


def run_flow(url: str, token: str, tmp_path: Path, model: ScriptedModel, state: str, **kw: Any) -> str:
    with idemflow.Client(url, token, attempt_timeout=0.5, initial_backoff=0.02, max_backoff=0.2) as c:
        flow = support_flow(str(tmp_path / "flows.db"), c, model, **kw)
        return str(flow.kickoff(inputs={"id": state}))


def test_two_calls_in_a_method_are_two_tickets_and_a_rerun_replays_both(url: str, token: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """The model asks for two tickets in one run of the method: two
    intended calls, two tickets. The method run again (as after a crash,
    the state's ID given again) makes the same two calls, which replay."""
    who = f"py-crewai-two-{uuid.uuid4().hex[:8]}"
    run_flow(url, token, tmp_path, ScriptedModel(model="scripted", customer=who, calls=2), who)
    assert count(db, "ticket", who) == 2
    run_flow(url, token, tmp_path, ScriptedModel(model="scripted", customer=who, calls=2), who)
    print(f"two calls in a method, the method run twice: {count(db, 'ticket', who)} tickets")
    assert count(db, "ticket", who) == 2


def test_a_call_waits_through_a_partition_and_no_pending_answer_reaches_the_model(url: str, token: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """A partition of 2.5 s: by default the call waits for its final
    answer under its key, and the agent never reads a pending one: one
    ticket. With a 1 s deadline the agent reads that the call is pending,
    and the model, as models do, asks again in other words: the same
    customer, the same intent (cr2), one ticket. The control is that tool
    under cr1, which named the whole arguments: two tickets."""
    proxy = Proxy(url, "answer-lost", path="/never")
    try:
        outcome = {}
        for name, deadline, scheme in (
            ("waits", math.inf, "cr2"),
            ("a 1 s deadline, asked again in other words", 1.0, "cr2"),
            ("control: a 1 s deadline under cr1", 1.0, "cr1"),
        ):
            who = f"py-crewai-pending-{uuid.uuid4().hex[:8]}"
            proxy.partitioned = True
            heal = threading.Timer(2.5, lambda: setattr(proxy, "partitioned", False))
            heal.start()
            try:
                run_flow(proxy.url, token, tmp_path, ScriptedModel(model="scripted", customer=who), who, deadline=deadline, key_scheme=scheme)
            finally:
                heal.cancel()
            outcome[name] = count(db, "ticket", who)
    finally:
        proxy.close()
    print(f"a partition of 2.5 s: {outcome}")
    assert outcome["waits"] == 1 and outcome["a 1 s deadline, asked again in other words"] == 1, outcome
    assert outcome["control: a 1 s deadline under cr1"] >= 2, outcome


def test_a_tool_made_outside_a_flow_method_gets_no_key(url: str, token: str, tmp_path: Path) -> None:
    """Outside a flow method (at module level, say) there is no method to
    name: NoDurableIdentityError, before anything is sent."""
    with idemflow.Client(url, token) as c:
        flow = support_flow(str(tmp_path / "flows.db"), c, ScriptedModel(model="scripted"))
        with pytest.raises(NoDurableIdentityError, match="outside a flow method"):
            IdemflowTool(c, flow=flow, name="create_ticket", description="d", path="/v1/tickets", args_schema=Ticket)


@pytest.mark.parametrize("c", KEYS["crewai"], ids=lambda c: c["name"])
def test_crewai_key(c: dict[str, Any]) -> None:
    # An entry of scheme cr1 names the whole arguments; cr2's the tool's intent fields.
    scheme = c["key"][:3]
    digest = intent_digest(c.get("intent", ()), c["args"]) if scheme == "cr2" else args_digest(c["args"])
    assert digest == c["digest"]
    assert call_key(c["flow_id"], c["method"], c.get("scope", ""), c["tool"], digest, c["occurrence"], scheme) == c["key"]


def kill_and_rerun_docs_program(heading: str, model: str, url: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """The program under heading in the docs, as written, with model (a
    scripted model's expression) in place of gpt-4.1 (the only change),
    run as a process: SIGKILLed while its call waits (the answer dropped
    after the ticket was made) and run again, it makes no second ticket."""
    snippet = docs_block(heading)
    assert 'llm="gpt-4.1"' in snippet and '"ticket-42"' in snippet
    state = f"ticket-docs-{uuid.uuid4().hex[:6]}"
    scripted = f'llm=__import__("tests.crewai.crewai_agent", fromlist=["ScriptedModel"]).{model}'
    code = snippet.replace('llm="gpt-4.1"', scripted).replace('"ticket-42"', repr(state))
    children.kill_snippet_mid_call_and_rerun(code, tmp_path, url, lambda: count(db, "ticket", "c-1"))


def test_the_docs_snippet_runs(url: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """docs/agents/crewai.md's program (kill_and_rerun_docs_program)."""
    kill_and_rerun_docs_program("# CrewAI (Python 3.11+)\n", 'ScriptedModel(model="scripted", customer="c-1")', url, db, tmp_path)


def test_the_docs_mcp_tools_run(url: str, db: psycopg.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agents/mcp.md's CrewAI program (kill_and_rerun_docs_program),
    idemflow on PATH, the scripted model writing an idempotency_key of its
    own each time."""
    monkeypatch.setenv("PATH", f"{Path(need('IDEMFLOW_BIN')).parent}:{os.environ.get('PATH', '')}")
    model = 'ScriptedModel(model="scripted", customer="c-1", model_key=True)'
    kill_and_rerun_docs_program("**CrewAI** (`idemflow.crewai.mcp_tools`).", model, url, db, tmp_path)
