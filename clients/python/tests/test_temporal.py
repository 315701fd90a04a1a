"""A Temporal-native agent (the OpenAI Agents SDK's loop as a Temporal
workflow, a fake model) whose worker is SIGKILLed inside the tool activity
after idemflow executed it: Temporal runs the activity again on a second
worker, under the same activity_key(), and there is one ticket. The
control, a key per attempt, makes two. Also: an answer still pending when
the tool's attempts are spent fails the run, never the model's turn."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from temporalio.client import Client

from . import children
from .conftest import count, docs_block, need


def worker(task_queue: str, keys: str, customer: str, pause: bool) -> tuple[subprocess.Popen[str], queue.Queue[str | None]]:
    env = {**os.environ, "IDEMFLOW_AGENT_KEYS": keys, "IDEMFLOW_AGENT_CUSTOMER": customer, "PYTHONUNBUFFERED": "1"}
    if pause:
        env["IDEMFLOW_AGENT_PAUSE"] = "after-effect"
    return children.start("tests.agents.temporal_agent", "--task-queue", task_queue, env=env)


@pytest.mark.parametrize("keys,tickets", [("idemflow", 1), ("naive", 2)], ids=["activity_key", "control, a key per attempt"])
def test_a_killed_temporal_agent_worker_makes_one_ticket(keys: str, tickets: int, db: psycopg.Connection) -> None:
    need("IDEMFLOW_URL")
    from .agents.temporal_agent import TicketAgent, connect

    customer = f"py-temporal-{keys}-{uuid.uuid4().hex[:6]}"
    task_queue = f"agent-{customer}"
    first, first_lines = worker(task_queue, keys, customer, pause=True)
    second = None
    try:
        children.wait_for(first_lines, "worker up")

        async def main() -> str:
            client: Client = await connect()
            handle = await client.start_workflow(TicketAgent.run, "Open a ticket.", id=f"agent-{customer}", task_queue=task_queue)
            # The first attempt took effect; its worker dies before it
            # returns.
            paused = await asyncio.to_thread(children.wait_for, first_lines, "PAUSED after-effect")
            first.send_signal(signal.SIGKILL)
            first.wait(30)
            nonlocal second
            second, second_lines = worker(task_queue, keys, customer, pause=False)
            await asyncio.to_thread(children.wait_for, second_lines, "worker up")
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


def test_a_pending_answer_fails_the_temporal_agent_run_and_a_reset_replays_it(url: str, db: psycopg.Connection) -> None:
    """idemflow answers nothing for longer than the tool activity's
    attempts wait (a partition: every request arrives, no answer comes
    back). The run ends without the model ever reading an error, so it
    never asks again under a new call; a reset of the run, once the
    partition heals, makes the call again at its place, under its key,
    and gets the first call's answer. One ticket."""
    need("IDEMFLOW_URL")
    from temporalio.client import WorkflowFailureError

    from .agents.temporal_agent import TicketAgent, connect
    from .resets import reset_to_first_task
    from .wire import Proxy

    customer = f"py-temporal-pending-{uuid.uuid4().hex[:6]}"
    task_queue = f"agent-{customer}"
    proxy = Proxy(url, "answer-lost", path="/never")
    proxy.partitioned = True
    env = {
        **os.environ,
        "IDEMFLOW_URL": proxy.url,
        "IDEMFLOW_AGENT_CUSTOMER": customer,
        "IDEMFLOW_AGENT_TOOL_WAIT": "1",
        "IDEMFLOW_AGENT_ATTEMPT_TIMEOUT": "0.3",
        "PYTHONUNBUFFERED": "1",
    }
    w, lines = children.start("tests.agents.temporal_agent", "--task-queue", task_queue, env=env)
    try:
        children.wait_for(lines, "worker up")

        async def main() -> tuple[str, list[str], list[str]]:
            client: Client = await connect()
            wid = f"agent-{customer}"
            handle = await client.start_workflow(TicketAgent.run, args=["Open a ticket.", 2], id=wid, task_queue=task_queue)
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(handle.result(), timeout=90)
            events = (await handle.fetch_history()).events
            scheduled = [
                e.activity_task_scheduled_event_attributes.activity_type.name for e in events if e.HasField("activity_task_scheduled_event_attributes")
            ]
            tools = [name for name in scheduled if name == "create_ticket"]
            models = [name for name in scheduled if name != "create_ticket"]
            cause = failed.value.cause
            print(f"pending: the run failed ({type(cause).__name__}: {cause}); tool calls scheduled {len(tools)}, model calls {len(models)}")
            assert len(tools) == 1, "the model asked for the ticket again"
            assert len(models) == 1, "the model read the pending call's end"
            proxy.partitioned = False
            again = await reset_to_first_task(client, handle, "the partition healed: the test resets the run to before the call")
            out = await asyncio.wait_for(again.result(), timeout=90)
            answers = [
                p.data.decode()
                for e in (await again.fetch_history()).events
                if e.HasField("activity_task_completed_event_attributes")
                for p in e.activity_task_completed_event_attributes.result.payloads
                if b"ticket_id" in p.data
            ]
            return out, answers, [k for k in proxy.keys if k]

        out, answers, keys = asyncio.run(main())
    finally:
        proxy.close()
        w.kill()
        w.wait(30)
    n = count(db, "ticket", customer)
    print(f"after the reset: the agent said {json.dumps(out)}; the tool's answer {answers}; keys sent {sorted(set(keys))}; {n} tickets")
    assert len(answers) == 1 and '\\"replayed\\": true' in answers[0], answers
    assert len(set(keys)) == 1, "every attempt, and the reset's call, sent one key"
    assert n == 1


def test_the_readme_snippet_runs(db: psycopg.Connection, tmp_path: Path) -> None:
    """The README's Temporal-native snippet, as written, run as a worker
    process, with the test's scripted model provider given to its plugin
    (the only change): a workflow started on its task queue opens one
    ticket under the activity's key."""
    need("IDEMFLOW_URL")
    from .agents.temporal_agent import connect

    snippet = docs_block("# Temporal-native agents\n")
    plugin = "OpenAIAgentsPlugin(model_params="
    assert plugin in snippet
    code = snippet.replace(plugin, "OpenAIAgentsPlugin(model_provider=TestModelProvider(ScriptedModel()), model_params=")
    code = code.replace(
        "with workflow.unsafe.imports_passed_through():\n",
        "with workflow.unsafe.imports_passed_through():\n"
        "    from temporalio.openai_agents.testing import TestModelProvider\n"
        "    from tests.agents.temporal_agent import ScriptedModel\n",
        1,
    )
    customer = f"py-temporal-readme-{uuid.uuid4().hex[:6]}"

    async def main() -> str:
        client: Client = await connect()
        handle = await client.start_workflow("SupportAgent", "Open a ticket.", id=f"readme-{customer}", task_queue="support")
        return str(await asyncio.wait_for(handle.result(), timeout=90))

    out, logs = children.with_worker_snippet(code, "readme_temporal", tmp_path, customer, main)
    print(f"the README's Temporal-native worker: the agent said {out!r}; {count(db, 'ticket', customer)} ticket")
    assert count(db, "ticket", customer) == 1, logs
