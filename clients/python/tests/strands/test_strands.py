"""Strands Agents (idemflow.strands), in its own environment: a real Agent
with a FileSessionManager on Strands' Anthropic provider (the scripted
model behind tests/model_api.py), SIGKILLed mid call (the answer dropped
after idemflow executed, or the request held before it arrived) and sent
its message again on the restored session, ends with one ticket; the
controls (a fresh key per call, the toolUseId as the key) make two; the
same through idemflow's MCP server (durable_mcp_tools: one; Strands' own
MCP tools, the model's key deciding: two). Also:
two calls in a turn are two tickets, in one message or two; a later turn
that brings the same toolUseId back is another call; a pending answer
written again is the same key; an agent without a session manager gets no
key; the shared key vectors; the docs' program, killed and run again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from strands import Agent
from strands.models.anthropic import AnthropicModel

import idemflow
from idemflow.strands import IdemflowTool, call_key, intended_call_key

from .. import children
from ..conftest import count, docs_block, need
from ..model_api import ScriptedModel
from ..wire import Fault, through_partition
from .strands_agent import PROMPT, Ticket, agent, answers

KEYS = json.loads((Path(__file__).resolve().parents[3] / "testdata" / "keys.json").read_text())


CASES: list[tuple[str, Fault, tuple[str, ...], int, bool]] = [
    # name, fault, extra arguments, tickets after the kill and the rerun, the rerun's answer replayed
    ("message sent again, answer lost", "answer-lost", (), 1, True),
    ("message sent again, request held", "before-received", (), 1, False),
    # The model words the call otherwise when the message is sent again:
    # the same customer, the same intent (st2), a replay; st1 named the
    # whole arguments.
    ("message sent again, the call reworded", "answer-lost", (), 1, True),
    ("control: the call reworded, st1 keys the whole arguments", "answer-lost", ("--key-scheme", "st1"), 2, False),
    ("control: fresh keys", "answer-lost", ("--tools", "naive"), 2, False),
    ("control: the toolUseId as the key", "answer-lost", ("--tools", "tool-use-id"), 2, False),
    # Through idemflow's MCP server, the model writing a key of its own each time.
    ("MCP: message sent again, answer lost", "answer-lost", ("--via", "mcp"), 1, True),
    ("MCP control: Strands' own MCP tools, the model's key", "answer-lost", ("--via", "mcp", "--tools", "naive"), 2, False),
]


@pytest.mark.parametrize("name,fault,extra,tickets,replayed", CASES, ids=[c[0] for c in CASES])
def test_a_killed_strands_agent_sends_its_message_again_without_a_duplicate(
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
    thread = f"py-strands-{name.split(':')[0].split(',')[-1].strip().replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    model = model_api(thread, model_key="mcp" in extra, reword="reworded" in name)
    args = ["--sessions", str(tmp_path / "sessions"), *extra]
    children.kill_case("tests.strands.strands_agent", name, thread, args, url, db, tickets=tickets, replayed=replayed, fault=fault)
    # The model wrote the call again after the restart, under a new ID.
    assert len(set(model.calls)) == 2, model.calls


def turn(client: idemflow.Client, session: str, sessions: Path, deadline: float = float("inf")) -> Agent:
    tool = IdemflowTool(client, name="create_ticket", description="Create a support ticket.", path="/v1/tickets", input_model=Ticket, deadline=deadline)
    a = agent(session, str(sessions), [tool])
    a(PROMPT)
    return a


def test_two_calls_in_a_turn_are_two_tickets_and_a_later_turn_is_another(
    url: str, token: str, db: psycopg.Connection, tmp_path: Path, model_api: Callable[..., ScriptedModel]
) -> None:
    """Two calls with the same arguments in one turn (one after the other,
    or both in one message of the model's) are two intended calls: two
    tickets each. A later turn in the same words, whose model writes the
    same toolUseIds again, is another turn: two more."""
    with idemflow.Client(url, token) as c:
        for together in (False, True):
            who = f"py-strands-two-{together}-{uuid.uuid4().hex[:6]}"
            model_api(who, titles=["Printer on fire"] * 2, together=together, ids=["toolu_same_1", "toolu_same_2"])
            turn(c, who, tmp_path / "sessions")
            first = count(db, "ticket", who)
            turn(c, who, tmp_path / "sessions")
            how = "one message" if together else "two messages"
            print(f"two identical calls in a turn ({how}), then a later turn: {first}, then {count(db, 'ticket', who)} tickets")
            assert (first, count(db, "ticket", who)) == (2, 4)


def test_a_pending_answer_written_again_is_the_same_call(
    url: str, token: str, db: psycopg.Connection, tmp_path: Path, model_api: Callable[..., ScriptedModel]
) -> None:
    """A partition of 2.5 s and a 1 s deadline: the model reads that the
    call is pending, writes it again (as models do), and it waits again
    under the same key: one ticket, one key for every attempt."""
    who = f"py-strands-pending-{uuid.uuid4().hex[:8]}"
    model = model_api(who)

    def run(u: str) -> Agent:
        with idemflow.Client(u, token, attempt_timeout=0.5, initial_backoff=0.02, max_backoff=0.2) as c:
            return turn(c, who, tmp_path / "sessions", deadline=1.0)

    a, keys = through_partition(url, 2.5, run)
    print(f"a partition of 2.5 s, a 1 s deadline: the model wrote the call {len(model.calls)} times; keys {keys}; {count(db, 'ticket', who)} tickets")
    assert len(model.calls) >= 2 and len(keys) == 1 and count(db, "ticket", who) == 1
    assert json.loads(answers(a)[-1])["http_status"] == 201


def test_an_agent_without_a_session_manager_gets_no_key(url: str, token: str, db: psycopg.Connection, model_api: Callable[..., ScriptedModel]) -> None:
    """Nothing an agent without a session manager keeps outlives its
    process: the model reads NoDurableIdentityError, and nothing is sent."""
    who = f"py-strands-nosession-{uuid.uuid4().hex[:6]}"
    model_api(who, titles=["Printer on fire"])
    with idemflow.Client(url, token) as c:
        tool = IdemflowTool(c, name="create_ticket", description="d", path="/v1/tickets", input_model=Ticket)
        a = Agent(model=AnthropicModel(model_id="claude-sonnet-4-5", max_tokens=1024), tools=[tool], callback_handler=None)
        a(PROMPT)
    results = [c["toolResult"] for m in a.messages for c in m["content"] if "toolResult" in c]
    assert results and "NoDurableIdentityError" in results[0]["content"][0]["text"], results
    assert count(db, "ticket", who) == 0


def test_a_message_with_an_image_is_keyed_by_its_texts() -> None:
    """A user's message may hold an image's bytes, which have no JSON
    form: the turn is named by the message's texts, so the call is keyed
    (as the same message without the image is)."""
    use = {"toolUseId": "toolu_1", "name": "create_ticket", "input": {"customer_id": "c-1", "title": "Printer on fire"}}
    text = {"text": "Open a ticket: the printer is on fire."}
    image = {"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}}
    keys = [
        intended_call_key("s-1", "default", [{"role": "user", "content": content}, {"role": "assistant", "content": [{"toolUse": use}]}], "toolu_1")
        for content in ([text, image], [text])
    ]
    assert keys[0] is not None and keys[0] == keys[1], keys


@pytest.mark.parametrize("c", KEYS["strands"], ids=lambda c: c["name"])
def test_strands_key(c: dict[str, Any]) -> None:
    # An entry of scheme st1 names the whole arguments; st2's the tool's intent fields.
    fields, scheme = c.get("intent", ()), c["key"][:3]
    key = call_key(c["session_id"], c["agent_id"], c["answered"], c["prompt"], c["tool"], c["args"], c["occurrence"], fields=fields, key_scheme=scheme)
    assert key == c["key"]


def kill_and_rerun_docs_program(heading: str, url: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """The program under heading in the docs, as written but for its
    session's ID (a new one), run as a process on the scripted model
    (customer c-1): SIGKILLed while its call waits
    (the answer dropped after the ticket was made) and run again, it makes
    no second ticket."""
    code = docs_block(heading)
    # A session of its own: the same conversation in another test's run would be the same intended call.
    assert '"ticket-42"' in code
    code = code.replace('"ticket-42"', repr(f"ticket-docs-{uuid.uuid4().hex[:6]}"))
    children.kill_snippet_mid_call_and_rerun(code, tmp_path, url, lambda: count(db, "ticket", "c-1"))


def test_the_docs_snippet_runs(url: str, db: psycopg.Connection, tmp_path: Path, model_api: Callable[..., ScriptedModel]) -> None:
    """docs/agents/strands.md's program (kill_and_rerun_docs_program)."""
    model_api("c-1")
    kill_and_rerun_docs_program("# Strands Agents (Python 3.11+)\n", url, db, tmp_path)


def test_the_docs_mcp_tools_run(
    url: str, db: psycopg.Connection, tmp_path: Path, model_api: Callable[..., ScriptedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/agents/mcp.md's Strands program (kill_and_rerun_docs_program),
    idemflow on PATH, the scripted model writing an idempotency_key of its
    own each time."""
    monkeypatch.setenv("PATH", f"{Path(need('IDEMFLOW_BIN')).parent}:{os.environ.get('PATH', '')}")
    model_api("c-1", model_key=True)
    kill_and_rerun_docs_program("**Strands Agents** (`idemflow.strands.durable_mcp_tools`).", url, db, tmp_path)


def test_the_docs_http_program_runs(db: psycopg.Connection, tmp_path: Path, model_api: Callable[..., ScriptedModel]) -> None:
    """docs/agents/mcp.md's Strands program over streamable HTTP, as
    written but for the URL (the test stack's idemflow mcp --http) and its
    session's ID: with its bearer token it opens one ticket, under the
    native tool's key (st2), not the one the model wrote."""
    model_api("c-1", model_key=True)
    code = docs_block("bearer token, which decides its tenant; the rest is the same:")
    assert '"http://127.0.0.1:8090/"' in code and '"ticket-42"' in code
    code = code.replace('"http://127.0.0.1:8090/"', repr(need("IDEMFLOW_MCP_URL"))).replace('"ticket-42"', repr(f"ticket-http-{uuid.uuid4().hex[:6]}"))
    (tmp_path / "agent.py").write_text(code)
    before = count(db, "ticket", "c-1")
    p = subprocess.run([sys.executable, "agent.py"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": children.HERE}, capture_output=True, text=True, timeout=120)
    with db.cursor() as cur:
        cur.execute("SELECT idem_key FROM ticket WHERE customer_id = 'c-1' ORDER BY created_at DESC LIMIT 1")
        row = cur.fetchone()
    print(f"the HTTP program: exit {p.returncode}, {count(db, 'ticket', 'c-1') - before} new tickets, key {row}; {p.stdout.strip()} {p.stderr.strip()[-300:]}")
    assert p.returncode == 0, p.stderr
    assert count(db, "ticket", "c-1") == before + 1
    assert row is not None and str(row[0]).startswith("st2_"), row
