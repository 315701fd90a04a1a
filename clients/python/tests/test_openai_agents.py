"""The OpenAI Agents SDK on its own (idemflow.openai_agents): a real Agent
and Runner SIGKILLed mid tool call and resumed from the RunState it saved
end with one ticket; the naive control (a fresh key per call) and the
unsafe setting (nothing saved before the call) make two. Also: a call ID
reused by a later turn is a second call, a pending answer fails the run
instead of reaching the model, and a run without a durable identity gets
no key."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.exceptions import UserError
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.tool_context import ToolContext

import idemflow
from idemflow.errors import DeadlineError, NoDurableIdentityError
from idemflow.openai_agents import durable_key, idemflow_function_tool, run_durably

from . import children
from .agents.openai_agent import ScriptedModel, Ticket
from .conftest import count, docs_text
from .wire import Proxy

CASES = [
    # name, extra arguments, tickets after the kill and the rerun, the rerun's answer replayed
    ("saved RunState", (), 1, True),
    ("control: fresh keys", ("--tools", "naive"), 2, False),
    ("unsafe: nothing saved before the call", ("--unsafe",), 2, False),
]


@pytest.mark.parametrize("name,extra,tickets,replayed", CASES, ids=[c[0] for c in CASES])
def test_a_killed_openai_agent_resumes_from_its_run_state_without_a_duplicate(
    name: str, extra: tuple[str, ...], tickets: int, replayed: bool, url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    thread = f"py-oa-{name.split(':')[0].replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    # The first POST reaches the gateway and its answer is dropped (or it
    # never arrives), and the agent is SIGKILLed while it waits; the app
    # then runs it again, the way it resumes.
    args = ["--state", str(tmp_path / "run-state.json"), *extra]
    children.kill_case("tests.agents.openai_agent", name, thread, args, url, db, tickets=tickets, replayed=replayed, resumed=None if extra else "resuming")


def ticket_tool(client: idemflow.AsyncClient, **kw: Any) -> Any:
    return idemflow_function_tool(client, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket, **kw)


def in_memory() -> tuple[Any, Any]:
    saved: list[str] = []

    async def load() -> str | None:
        return saved[-1] if saved else None

    async def save(state: str) -> None:
        saved.append(state)

    return load, save


def test_a_call_id_reused_in_a_later_turn_is_a_second_call(url: str, token: str, db: psycopg.Connection) -> None:
    """A provider that numbers calls per response brings call_0 back in
    the next turn of the same conversation: two turns, two tickets,
    neither answered as the other's replay."""
    who = f"py-oa-reused-{uuid.uuid4().hex[:8]}"

    async def turns() -> list[bool]:
        replayed = []
        async with idemflow.AsyncClient(url, token) as c:
            agent = Agent(name="support", tools=[ticket_tool(c)], model=ScriptedModel(who, call_id="call_0"))
            for _ in range(2):
                load, save = in_memory()
                result = await run_durably(agent, "Open a ticket.", run_config=RunConfig(group_id=who, tracing_disabled=True), load=load, save=save)
                outputs = [json.loads(str(i.output)) for i in result.new_items if i.type == "tool_call_output_item"]
                replayed += [o["replayed"] for o in outputs]
        return replayed

    replayed = asyncio.run(turns())
    n = count(db, "ticket", who)
    print(f"two turns under call_0: replayed {replayed}, {n} tickets")
    assert (replayed, n) == ([False, False], 2)


def test_a_pending_answer_fails_the_run_and_never_reaches_the_model(url: str, token: str, db: psycopg.Connection) -> None:
    """A partition longer than the tool's wait: idemflow's tool fails the
    run (the SDK re-raises a tool's exception) with nothing handed to the
    model, and the run resumed from its saved RunState gets the first
    call's answer, one ticket. The control is the SDK's own function_tool
    under the same key rule, whose default hands the error to the model:
    the model calls again under new IDs, a new key, and a second ticket."""
    proxy = Proxy(url, "answer-lost", path="/never")

    async def scenario() -> tuple[int, int, list[str]]:
        async with idemflow.AsyncClient(proxy.url, token, attempt_timeout=0.3, initial_backoff=0.02, max_backoff=0.1) as c:
            who = f"py-oa-pending-{uuid.uuid4().hex[:8]}"
            model = ScriptedModel(who)
            agent = Agent(name="support", tools=[ticket_tool(c, deadline=1.2)], model=model)
            config = RunConfig(group_id=who, tracing_disabled=True)
            load, save = in_memory()
            proxy.partitioned = True
            with pytest.raises(UserError) as failed:
                await run_durably(agent, "Open a ticket.", run_config=config, load=load, save=save)
            assert isinstance(failed.value.__cause__, DeadlineError), repr(failed.value)
            assert model.outputs == [], f"the model was handed {model.outputs}"
            proxy.partitioned = False
            resumed = await run_durably(agent, "Open a ticket.", run_config=config, load=load, save=save)
            outputs = [json.loads(str(i.output)) for i in resumed.new_items if i.type == "tool_call_output_item"]
            assert [o["replayed"] for o in outputs] == [True], outputs

            @function_tool(name_override="create_ticket")
            async def control(ctx: ToolContext[Any], customer_id: str, title: str) -> str:
                """Create a ticket."""
                r = await c.do(idemflow.Intent(durable_key(ctx, "create_ticket"), "/v1/tickets", {"customer_id": customer_id, "title": title}), deadline=1.2)
                return json.dumps(r.body)

            naive = f"py-oa-pending-control-{uuid.uuid4().hex[:8]}"
            control_model = ScriptedModel(naive)
            proxy.partitioned = True
            await Runner.run(
                Agent(name="support", tools=[control], model=control_model), "Open a ticket.", run_config=RunConfig(group_id=naive, tracing_disabled=True)
            )
            return count(db, "ticket", who), count(db, "ticket", naive), control_model.outputs

    try:
        ours, control_tickets, control_outputs = asyncio.run(scenario())
    finally:
        proxy.close()
    errors = len(control_outputs)
    print(f"pending answer: the run failed, its resume replayed, {ours} ticket; the control: {errors} errors to the model, {control_tickets} tickets")
    assert ours == 1
    assert len(control_outputs) == 2 and all(o.startswith("An error occurred") for o in control_outputs), control_outputs
    assert control_tickets == 2, "the control's retry under a new key made a second ticket"


def test_a_run_without_a_durable_identity_gets_no_key(url: str, token: str, db: psycopg.Connection) -> None:
    """No group_id, or a Chat Completions item (no ID) without
    call_ids_unique: NoDurableIdentityError, and nothing is sent.
    call_ids_unique=True is the caller's word that the provider never
    reuses a call ID: the call ID then names the call."""
    who = f"py-oa-noid-{uuid.uuid4().hex[:8]}"

    async def client_run(config: RunConfig, model: ScriptedModel, **kw: Any) -> Any:
        async with idemflow.AsyncClient(url, token) as c:
            load, save = in_memory()
            return await run_durably(
                Agent(name="support", tools=[ticket_tool(c, **kw)], model=model), "Open a ticket.", run_config=config, load=load, save=save
            )

    for config, model in [
        (RunConfig(tracing_disabled=True), ScriptedModel(who)),
        (RunConfig(group_id=who, tracing_disabled=True), ScriptedModel(who, item_id=FAKE_RESPONSES_ID)),
    ]:
        with pytest.raises(UserError) as failed:
            asyncio.run(client_run(config, model))
        assert isinstance(failed.value.__cause__, NoDurableIdentityError), repr(failed.value)
    assert count(db, "ticket", who) == 0
    done = asyncio.run(client_run(RunConfig(group_id=who, tracing_disabled=True), ScriptedModel(who, item_id=FAKE_RESPONSES_ID), call_ids_unique=True))
    assert [json.loads(str(i.output))["http_status"] for i in done.new_items if i.type == "tool_call_output_item"] == [201]
    assert count(db, "ticket", who) == 1


def test_the_readme_snippet_runs(url: str, token: str, db: psycopg.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's snippet, as written, with the fake model in place of
    gpt-4.1 (the only change): it opens a ticket, and run again it resumes
    from the RunState it saved and makes no second."""
    readme = docs_text()
    section = readme.split("# The OpenAI Agents SDK on its own (Python)\n", 1)[1]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert 'model="gpt-4.1"' in snippet
    who = "c-1"
    before = count(db, "ticket", who)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IDEMFLOW_URL", url)
    monkeypatch.setenv("IDEMFLOW_TOKEN", token)
    thread = f"ticket-readme-{uuid.uuid4().hex[:6]}"
    code = snippet.replace('model="gpt-4.1"', "model=MODEL").replace('"ticket-42"', repr(thread))
    exec(compile(code, "README.md", "exec"), {"MODEL": ScriptedModel(who), "__name__": "readme"})
    assert (tmp_path / "runs" / f"{thread}.json").exists()
    assert count(db, "ticket", who) == before + 1
    exec(compile(code, "README.md", "exec"), {"MODEL": ScriptedModel(who), "__name__": "readme"})
    assert count(db, "ticket", who) == before + 1, "run again from its saved RunState, the snippet made a second ticket"
