"""A Temporal-native agent (the OpenAI Agents SDK's loop as a Temporal
workflow, a fake model) whose worker is SIGKILLed inside the tool activity
after idemflow executed it: Temporal runs the activity again on a second
worker, under the same activity_key(), and there is one ticket. The
control, a key per attempt, makes two."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import uuid

import psycopg
import pytest
from temporalio.client import Client

from . import children
from .conftest import count, need


def worker(task_queue: str, keys: str, customer: str, pause: bool) -> tuple[subprocess.Popen[str], queue.Queue[str | None]]:
    env = {**os.environ, "IDEMFLOW_AGENT_KEYS": keys, "IDEMFLOW_AGENT_CUSTOMER": customer, "PYTHONUNBUFFERED": "1"}
    if pause:
        env["IDEMFLOW_AGENT_PAUSE"] = "after-effect"
    return children.start("tests.agents.temporal_agent", "--task-queue", task_queue, env=env)


def wait_for(lines: queue.Queue[str | None], prefix: str) -> str:
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=90)
        except queue.Empty:
            pytest.fail(f"the worker never printed {prefix!r}: {seen}")
        if line is None:
            pytest.fail(f"the worker ended before {prefix!r}: {seen}")
        seen.append(line)
        if line.startswith(prefix):
            return line


@pytest.mark.parametrize("keys,tickets", [("idemflow", 1), ("naive", 2)], ids=["activity_key", "control, a key per attempt"])
def test_a_killed_temporal_agent_worker_makes_one_ticket(keys: str, tickets: int, db: psycopg.Connection) -> None:
    need("IDEMFLOW_URL")
    from .agents.temporal_agent import TicketAgent, connect

    customer = f"py-temporal-{keys}-{uuid.uuid4().hex[:6]}"
    task_queue = f"agent-{customer}"
    first, first_lines = worker(task_queue, keys, customer, pause=True)
    second = None
    try:
        wait_for(first_lines, "worker up")

        async def main() -> str:
            client: Client = await connect()
            handle = await client.start_workflow(TicketAgent.run, "Open a ticket.", id=f"agent-{customer}", task_queue=task_queue)
            # The first attempt took effect; its worker dies before it
            # returns.
            paused = await asyncio.to_thread(wait_for, first_lines, "PAUSED after-effect")
            first.send_signal(signal.SIGKILL)
            first.wait(30)
            nonlocal second
            second, second_lines = worker(task_queue, keys, customer, pause=False)
            await asyncio.to_thread(wait_for, second_lines, "worker up")
            out = await asyncio.wait_for(handle.result(), timeout=90)
            events = (await handle.fetch_history()).events
            attempts = [e.activity_task_started_event_attributes.attempt for e in events if e.HasField("activity_task_started_event_attributes")]
            tool = [
                p.data.decode()
                for e in events
                if e.HasField("activity_task_completed_event_attributes")
                for p in e.activity_task_completed_event_attributes.result.payloads
                if b"ticket_id" in p.data
            ]
            print(f"{keys}: {paused}; activity attempts (model, tool, model): {attempts}; the tool's answer: {tool}")
            assert attempts[1] == 2, "the tool activity ran again after the kill"
            if keys == "idemflow":
                assert '\\"replayed\\": true' in tool[0], tool
            return out

        out = asyncio.run(main())
    finally:
        for p in (first, second):
            if p and p.poll() is None:
                p.kill()
                p.wait(30)
    n = count(db, "ticket", customer)
    print(f"Temporal agent, {keys} keys: {n} tickets after the worker was killed mid activity; the agent said {json.dumps(out)}")
    assert n == tickets
