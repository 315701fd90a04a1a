"""Pydantic AI's durable agents: TemporalDurability on idemflow's Temporal
server, whose worker is SIGKILLed mid tool activity after idemflow took
the call, and DBOSDurability on the test PostgreSQL, whose process is
SIGKILLed mid step. Each resumes its own way (Temporal retries the
activity on another worker; DBOS recovers the workflow at launch) with
one ticket; the control, a fresh key per attempt, makes two."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from temporalio.client import Client

from . import children
from .conftest import count, docs_block, need
from .wire import Proxy


@pytest.mark.parametrize(
    "tools,tickets,wrapper",
    [("idemflow", 1, "durability"), ("naive", 2, "durability"), ("idemflow", 1, "agent")],
    ids=["activity key", "control, a key per attempt", "TemporalAgent, activity key"],
)
def test_a_killed_temporal_durable_pydantic_agent_makes_one_ticket(tools: str, tickets: int, wrapper: str, url: str, db: psycopg.Connection) -> None:
    need("TEMPORAL_ADDRESS")
    from .agents.pydantic_temporal_agent import SupportWorkflow, connect

    customer = f"py-pa-temporal-{tools}-{uuid.uuid4().hex[:6]}"
    task_queue = f"agent-{customer}"
    proxy = Proxy(url, "answer-lost", hold=True)
    env = {
        **os.environ,
        "IDEMFLOW_URL": proxy.url,
        "IDEMFLOW_AGENT_TOOLS": tools,
        "IDEMFLOW_AGENT_WRAPPER": wrapper,
        "IDEMFLOW_AGENT_CUSTOMER": customer,
        "PYTHONUNBUFFERED": "1",
    }
    procs: list[subprocess.Popen[str]] = []

    def worker() -> queue.Queue[str | None]:
        p, lines = children.start("tests.agents.pydantic_temporal_agent", "--task-queue", task_queue, env=env)
        procs.append(p)
        children.wait_for(lines, "worker up")
        return lines

    try:
        worker()

        async def main() -> tuple[str, list[int], list[str]]:
            client: Client = await connect()
            handle = await client.start_workflow(SupportWorkflow.run, "Open a ticket.", id=f"agent-{customer}", task_queue=task_queue)
            # The tool's first POST took effect, its answer is lost, and
            # the worker dies waiting.
            if not await asyncio.to_thread(proxy.hit.wait, 90):
                pytest.fail("the tool never called idemflow")
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait(30)
            worker()
            out = await asyncio.wait_for(handle.result(), timeout=120)
            events = (await handle.fetch_history()).events
            attempts = [e.activity_task_started_event_attributes.attempt for e in events if e.HasField("activity_task_started_event_attributes")]
            answers = [
                p.data.decode()
                for e in events
                if e.HasField("activity_task_completed_event_attributes")
                for p in e.activity_task_completed_event_attributes.result.payloads
                if b"http_status" in p.data
            ]
            return out, attempts, answers

        out, attempts, answers = asyncio.run(main())
    finally:
        proxy.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
    n = count(db, "ticket", customer)
    print(f"Temporal ({wrapper}), {tools} keys: activity attempts {attempts}, the tool's answer {answers}, {n} tickets; the agent said {out!r}")
    assert 2 in attempts, "the tool activity ran again after the kill"
    if tools == "idemflow":
        assert '\\"replayed\\": true' in answers[0] or '"replayed": true' in answers[0], answers
    assert n == tickets


@pytest.fixture
def dbos_database(db: psycopg.Connection) -> Iterator[str]:
    """A fresh database for DBOS's system tables, on the test server."""
    name = f"dbos_{uuid.uuid4().hex[:12]}"
    db.execute(f"CREATE DATABASE {name}")
    u = urlsplit(need("DATABASE_URL"))
    yield urlunsplit(("postgresql", u.netloc, f"/{name}", u.query, ""))
    db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.parametrize(
    "tools,tickets,wrapper",
    [("idemflow", 1, "durability"), ("naive", 2, "durability"), ("idemflow", 1, "agent")],
    ids=["step key", "control, a key per call", "DBOSAgent, step key"],
)
def test_a_killed_dbos_durable_pydantic_agent_makes_one_ticket(
    tools: str, tickets: int, wrapper: str, url: str, db: psycopg.Connection, dbos_database: str
) -> None:
    customer = f"py-pa-dbos-{tools}-{uuid.uuid4().hex[:6]}"
    workflow_id = f"support-{customer}"
    proxy = Proxy(url, "answer-lost", hold=True)
    env = {
        **os.environ,
        "IDEMFLOW_URL": proxy.url,
        "IDEMFLOW_AGENT_TOOLS": tools,
        "IDEMFLOW_AGENT_WRAPPER": wrapper,
        "IDEMFLOW_AGENT_CUSTOMER": customer,
        "DBOS_SYSTEM_DATABASE_URL": dbos_database,
        "PYTHONUNBUFFERED": "1",
    }
    try:
        # The tool's first POST took effect, its answer is lost, and the
        # process dies waiting, mid step. The app starts again, and
        # DBOS.launch recovers the workflow.
        seen, p, out = children.kill_mid_call_and_rerun("tests.agents.pydantic_dbos_agent", ["--workflow-id", workflow_id], env, proxy.hit)
    finally:
        proxy.close()
    n = count(db, "ticket", customer)
    print(f"DBOS ({wrapper}), {tools} keys: {n} tickets after the kill and the recovery; {seen} then {out}")
    assert p.returncode == 0 and any(s.startswith("DONE") for s in out), out
    assert any(s.startswith("recovering") for s in out), out
    if tools == "idemflow" and wrapper == "durability":
        # DBOSDurability runs the tool as a step of its own, whose output
        # the program prints; DBOSAgent calls it in workflow code, so
        # only the ticket count tells.
        answer = next(s for s in out if s.startswith("tool create_ticket "))
        assert '"replayed": true' in answer, out
    assert n == tickets


def test_the_temporal_durability_snippet_runs(db: psycopg.Connection, tmp_path: Path) -> None:
    """docs/agents.md's TemporalDurability worker, as written, run as a
    worker process with the test's scripted model in place of
    openai:gpt-4.1 (the only change): a SupportWorkflow started on its
    task queue opens one ticket under the activity's key."""
    need("IDEMFLOW_URL")
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin

    snippet = docs_block("**`TemporalDurability`**")
    assert '"openai:gpt-4.1",' in snippet
    code = snippet.replace('"openai:gpt-4.1",', 'ScriptedModel(os.environ["IDEMFLOW_AGENT_CUSTOMER"]),', 1).replace(
        "with workflow.unsafe.imports_passed_through():\n",
        "with workflow.unsafe.imports_passed_through():\n    from tests.agents.pydantic_agent import ScriptedModel\n",
        1,
    )
    customer = f"py-pa-readme-{uuid.uuid4().hex[:6]}"

    async def main() -> str:
        client = await Client.connect(need("TEMPORAL_ADDRESS"), namespace=need("TEMPORAL_NAMESPACE"), plugins=[PydanticAIPlugin()])
        out = await asyncio.wait_for(
            client.execute_workflow("SupportWorkflow", "My printer is on fire.", id=f"readme-{customer}", task_queue="pydantic-support"), timeout=120
        )
        return str(out)

    out, logs = children.with_worker_snippet(code, "readme_pydantic_temporal", tmp_path, customer, main)
    n = count(db, "ticket", customer)
    print(f"the docs' TemporalDurability worker: the agent said {out!r}; {n} ticket")
    assert n == 1, logs


def test_the_dbos_durability_snippet_runs(db: psycopg.Connection, dbos_database: str, tmp_path: Path) -> None:
    """docs/agents.md's DBOSDurability program, as written, run twice
    under one CONVERSATION_ID with the scripted model in place of
    openai:gpt-4.1 (the only change): one ticket (the second run finds the
    same workflow, done)."""
    need("IDEMFLOW_URL")
    snippet = docs_block("**`DBOSDurability`**")
    assert 'Agent("openai:gpt-4.1",' in snippet
    code = snippet.replace('Agent("openai:gpt-4.1",', 'Agent(ScriptedModel(os.environ["IDEMFLOW_AGENT_CUSTOMER"]),', 1).replace(
        "import idemflow\n", "import idemflow\nfrom tests.agents.pydantic_agent import ScriptedModel\n", 1
    )
    (tmp_path / "readme_pydantic_dbos.py").write_text(code)
    customer = f"py-pa-dbos-readme-{uuid.uuid4().hex[:6]}"
    env = {
        **os.environ,
        "IDEMFLOW_AGENT_CUSTOMER": customer,
        "DBOS_SYSTEM_DATABASE_URL": dbos_database,
        "CONVERSATION_ID": f"conv-{customer}",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": f"{children.HERE}:{tmp_path}",
    }
    for run in range(2):
        p = subprocess.run([sys.executable, "-m", "readme_pydantic_dbos"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        print(f"run {run + 1}: exit {p.returncode}: {p.stdout.strip()} {p.stderr[-2000:]}")
        assert p.returncode == 0, p.stderr
    n = count(db, "ticket", customer)
    print(f"the docs' DBOSDurability program, run twice: {n} ticket")
    assert n == 1
