"""The Claude Agent SDK for Python (idemflow.claude_agent): the SDK's own
CLI against a scripted model behind a local stand-in for the Messages API
(tests/model_api.py; no network), SIGKILLed mid call (the answer dropped
after idemflow executed, or the request held before it arrived) and run
again, sending the same turn on its resumed session, ends with one ticket;
the controls (a fresh key per call, an app that keeps no turn ID) make
two. Also: two calls in a turn are two tickets, in one message or two, and
a later turn's same call another; a pending answer written again is the
same key; a call outside run_durably gets no key; the shared key vectors
(the TypeScript client's claude_agent); the docs' program, killed and run
again."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from claude_agent_sdk import ToolResultBlock, UserMessage, query

import idemflow
from idemflow.claude_agent import call_key

from . import children
from .agents.claude_agent import PROMPT, options, result_text, turn
from .conftest import count, docs_block
from .model_api import ScriptedModel
from .wire import Fault, through_partition

#: The model_api fixture: serve(customer, ...) starts a scripted model.
Serve = Callable[..., ScriptedModel]

KEYS = json.loads((Path(__file__).resolve().parents[2] / "testdata" / "keys.json").read_text())

CASES: list[tuple[str, Fault, tuple[str, ...], int, bool]] = [
    # name, fault, extra arguments, tickets after the kill and the rerun, the rerun's answer replayed
    ("turn sent again, answer lost", "answer-lost", (), 1, True),
    # The model words the call otherwise when the turn is sent again: the
    # same customer, the same intent (cl2), a replay.
    ("turn sent again, the call reworded", "answer-lost", (), 1, True),
    ("control: the call reworded, named by its whole arguments", "answer-lost", ("--by-arguments",), 2, False),
    ("turn sent again, request held", "before-received", (), 1, False),
    ("control: fresh keys", "answer-lost", ("--tools", "naive"), 2, False),
    ("control: an app that keeps no turn ID", "answer-lost", ("--unsafe",), 2, False),
    # Sent again as a fork into a new session (a chat's "retry in a new
    # branch"): the same turn where the app says it re-runs it; a new
    # conversation where it does not.
    ("a fork into a new session that re-runs the turn", "answer-lost", ("--fork", "rerun"), 1, True),
    ("control: a fork into a new session as a new conversation", "answer-lost", ("--fork", "new"), 2, False),
]


@pytest.mark.parametrize("name,fault,extra,tickets,replayed", CASES, ids=[c[0] for c in CASES])
def test_a_killed_claude_agent_resumes_its_session_without_a_duplicate(
    name: str, fault: Fault, extra: tuple[str, ...], tickets: int, replayed: bool, url: str, db: psycopg.Connection, tmp_path: Path, model_api: Serve
) -> None:
    thread = f"py-claude-{name.split(':')[0].split(',')[-1].strip().replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    model_api(thread, reword="reworded" in name)
    args = ["--state", str(tmp_path / "turn.json"), *extra]
    children.kill_case("tests.agents.claude_agent", name, thread, args, url, db, tickets=tickets, replayed=replayed, fault=fault)


async def run_turn(url: str, token: str, folder: Path, session_id: str, turn_id: str, wait: float = 300.0) -> list[str]:
    async with idemflow.AsyncClient(url, token, attempt_timeout=0.5, initial_backoff=0.02, max_backoff=0.2) as c:
        return await turn(options(c, folder, wait=wait), session_id, turn_id, folder / "turn.json")


def test_two_calls_in_a_turn_are_two_tickets_and_a_later_turn_is_another(
    url: str, token: str, db: psycopg.Connection, tmp_path: Path, model_api: Serve
) -> None:
    """Two identical calls in one turn (one after the other, or both in one
    message of the model's) are two intended calls: two tickets. The same
    turn sent again replays them; a later turn (another turn ID) in the
    same words is another: two more."""
    for together in (False, True):
        who = f"py-claude-two-{together}-{uuid.uuid4().hex[:6]}"
        model_api(who, titles=["Printer on fire"] * 2, together=together)
        session = str(uuid.uuid4())
        folder = tmp_path / who
        folder.mkdir()
        asyncio.run(run_turn(url, token, folder, session, "msg-1"))
        first = count(db, "ticket", who)
        asyncio.run(run_turn(url, token, folder, session, "msg-2"))
        how = "one message" if together else "two messages"
        print(f"two identical calls in a turn ({how}), then a later turn: {first}, then {count(db, 'ticket', who)} tickets")
        assert (first, count(db, "ticket", who)) == (2, 4)


def test_a_pending_answer_written_again_is_the_same_call(url: str, token: str, db: psycopg.Connection, tmp_path: Path, model_api: Serve) -> None:
    """A partition of 2.5 s and a 1 s wait: the model reads that the call is
    pending, writes it again (as models do), and it waits again under the
    same key: one ticket, one key for every attempt."""
    who = f"py-claude-pending-{uuid.uuid4().hex[:8]}"
    model = model_api(who)
    seen, keys = through_partition(url, 2.5, lambda u: asyncio.run(run_turn(u, token, tmp_path, str(uuid.uuid4()), "msg-1", wait=1.0)))
    print(f"a partition of 2.5 s, a 1 s wait: the model wrote the call {len(model.calls)} times; keys {keys}; {count(db, 'ticket', who)} tickets")
    assert len(model.calls) >= 2 and len(keys) == 1 and count(db, "ticket", who) == 1
    assert json.loads(seen[-1])["http_status"] == 201


def test_a_call_outside_run_durably_gets_no_key(url: str, token: str, db: psycopg.Connection, tmp_path: Path, model_api: Serve) -> None:
    """Outside run_durably nothing records the call before it runs: the
    model reads NoDurableIdentityError, and nothing is sent."""
    who = f"py-claude-outside-{uuid.uuid4().hex[:6]}"
    model_api(who)
    texts: list[str] = []

    async def run() -> None:
        async with idemflow.AsyncClient(url, token) as c:
            async for m in query(prompt=PROMPT, options=options(c, tmp_path)):
                if isinstance(m, UserMessage) and isinstance(m.content, list):
                    texts.extend(result_text(p) for p in m.content if isinstance(p, ToolResultBlock))

    asyncio.run(run())
    assert texts and "called outside run_durably" in texts[0], texts
    assert count(db, "ticket", who) == 0


@pytest.mark.parametrize("c", KEYS["claude_agent"], ids=lambda c: c["name"])
def test_claude_agent_key(c: dict[str, Any]) -> None:
    # An entry of scheme cl1 names the whole arguments; cl2's the tool's intent fields.
    assert call_key(c["session_id"], c["turn_id"], c["tool"], c["args"], c["occurrence"], fields=c.get("intent", ()), key_scheme=c["key"][:3]) == c["key"]


def test_the_docs_snippet_runs(url: str, db: psycopg.Connection, tmp_path: Path, model_api: Serve, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agents/claude-agent-sdk.md's Python program, as written, run as a
    process on the scripted model: SIGKILLed while its call waits (the
    answer dropped after the ticket was made) and run again, it sends the
    turn again on its resumed session and makes no second ticket."""
    code = docs_block("## Python\n")
    model_api("c-1")
    # Claude's sessions beside the program's files, not in ~/.claude.
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    children.kill_snippet_mid_call_and_rerun(code, tmp_path, url, lambda: count(db, "ticket", "c-1"))
    assert os.path.exists(tmp_path / "turn-6f1c2a9e-4b7d-4c1e-9a3f-2d5b8c0e7a14.json")
