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
import os
import textwrap
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.exceptions import UserError
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp, create_static_tool_filter
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.tool_context import ToolContext

import idemflow
from idemflow.errors import DeadlineError, NoDurableIdentityError
from idemflow.openai_agents import durable_key, durable_mcp_server, idemflow_function_tool, run_durably

from . import children
from .agents.openai_agent import ScriptedModel, Ticket
from .conftest import count, count_like, docs_block, need
from .wire import Proxy, mcp_http

CASES = [
    # name, extra arguments, tickets after the kill and the rerun, the rerun's answer replayed
    ("saved RunState", (), 1, True),
    ("control: fresh keys", ("--tools", "naive"), 2, False),
    ("unsafe: nothing saved before the call", ("--unsafe",), 2, False),
    ("saved RunState lost, the turn sent again", ("--lost",), 1, True),
    ("control: RunState lost, oa1 keys", ("--lost", "--key-scheme", "oa1"), 2, False),
    # Through idemflow's MCP server (MCPServerStdio), the model writing an
    # idempotency_key of its own each time it writes the call.
    ("MCP wrapped: saved RunState", ("--via", "mcp"), 1, True),
    ("MCP wrapped: RunState lost, the turn sent again", ("--via", "mcp", "--lost"), 1, True),
    ("MCP control: the model's key, RunState lost", ("--via", "mcp", "--lost", "--tools", "naive"), 2, False),
]


@pytest.mark.parametrize("name,extra,tickets,replayed", CASES, ids=[c[0] for c in CASES])
def test_a_killed_openai_agent_resumes_from_its_run_state_without_a_duplicate(
    name: str, extra: tuple[str, ...], tickets: int, replayed: bool, url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    thread = f"py-oa-{name.split(':')[0].replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    resumed = "resuming" if extra in ((), ("--via", "mcp")) else None
    # The first POST reaches the gateway and its answer is dropped (or it
    # never arrives), and the agent is SIGKILLed while it waits; the app
    # then runs it again, the way it resumes.
    args = ["--state", str(tmp_path / "run-state.json"), *extra]
    children.kill_case("tests.agents.openai_agent", name, thread, args, url, db, tickets=tickets, replayed=replayed, resumed=resumed)


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
    neither answered as the other's replay. The second turn's input is the
    conversation so far and the new message, as the SDK's multi-turn
    examples send it, in the same words."""
    who = f"py-oa-reused-{uuid.uuid4().hex[:8]}"

    async def turns() -> list[bool]:
        replayed = []
        async with idemflow.AsyncClient(url, token) as c:
            agent = Agent(name="support", tools=[ticket_tool(c)], model=ScriptedModel(who, call_id="call_0"))
            history: list[Any] = []
            for _ in range(2):
                load, save = in_memory()
                ask = [*history, {"role": "user", "content": "Open a ticket."}]
                result = await run_durably(agent, ask, run_config=RunConfig(group_id=who, tracing_disabled=True), load=load, save=save)
                history = result.to_input_list()
                outputs = [json.loads(str(i.output)) for i in result.new_items if i.type == "tool_call_output_item"]
                replayed += [o["replayed"] for o in outputs]
        return replayed

    replayed = asyncio.run(turns())
    n = count(db, "ticket", who)
    print(f"two turns under call_0: replayed {replayed}, {n} tickets")
    assert (replayed, n) == ([False, False], 2)


ONE_STORE = [
    # name, how each turn is sent (its input, its run_durably arguments), tickets, each turn's answers replayed
    ("a later turn: the history and the same words", "history", 2, [[False], [False]]),
    ("a later turn: its message alone, a new turn_id", "turn_id", 2, [[False], [False]]),
    ("the same turn sent again (a regenerate)", "again", 1, [[False], [True]]),
    ("the same turn_id sent again", "turn_id again", 1, [[False], [True]]),
]


@pytest.mark.parametrize("name,how,tickets,replayed", ONE_STORE, ids=[c[0] for c in ONE_STORE])
def test_every_turn_on_one_saved_state_is_its_own_run(
    name: str, how: str, tickets: int, replayed: list[list[bool]], url: str, token: str, db: psycopg.Connection
) -> None:
    """The docs' program keeps one RunState file per conversation and
    never clears it. A later turn run on that file is a run of its own:
    its model is asked, its call is made, and the ticket is a second one,
    never turn 1's resumed state answering for it. The same turn sent
    again on the file is a replay."""
    who = f"py-oa-store-{uuid.uuid4().hex[:8]}"
    first = {"role": "user", "content": "My printer is on fire."}

    async def turns() -> list[list[bool]]:
        load, save = in_memory()  # one store for the conversation, as the docs' file
        out = []
        async with idemflow.AsyncClient(url, token) as c:
            agent = Agent(name="support", tools=[ticket_tool(c)], model=ScriptedModel(who))
            config = RunConfig(group_id=who, tracing_disabled=True)
            result = await run_durably(agent, [first], run_config=config, load=load, save=save, **({"turn_id": "msg-1"} if "turn_id" in how else {}))
            out.append([json.loads(str(i.output))["replayed"] for i in result.new_items if i.type == "tool_call_output_item"])
            if how == "history":
                ask, extra = [*result.to_input_list(), first], {}
            elif how == "turn_id":
                ask, extra = [first], {"turn_id": "msg-2"}
            elif how == "turn_id again":
                ask, extra = [first], {"turn_id": "msg-1"}
            else:
                ask, extra = [first], {}
            result = await run_durably(agent, ask, run_config=config, load=load, save=save, **extra)
            out.append([json.loads(str(i.output))["replayed"] for i in result.new_items if i.type == "tool_call_output_item"])
        return out

    out = asyncio.run(turns())
    n = count(db, "ticket", who)
    print(f"{name}: {n} tickets; each turn's answers replayed {out}")
    assert (n, out) == (tickets, replayed)


class TwoCallsModel(ScriptedModel):
    """A ScriptedModel that asks for two identical tickets in one response."""

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        r = await super().get_response(*args, **kwargs)
        calls = [o for o in r.output if getattr(o, "type", "") == "function_call"]
        if calls:
            r.output = [*calls, calls[0].model_copy(update={"id": f"fc_{uuid.uuid4().hex}", "call_id": f"call_{uuid.uuid4().hex}"})]
        return r


class RewordingModel(ScriptedModel):
    """A ScriptedModel that writes the title anew on every call."""

    runs = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        r = await super().get_response(*args, **kwargs)
        for o in r.output:
            if getattr(o, "type", "") == "function_call":
                RewordingModel.runs += 1
                o.arguments = json.dumps({**json.loads(o.arguments), "title": f"Printer on fire ({RewordingModel.runs})"})
        return r


class OtherCustomerModel(ScriptedModel):
    """A ScriptedModel whose call, written again, names another customer."""

    runs = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        r = await super().get_response(*args, **kwargs)
        for o in r.output:
            if getattr(o, "type", "") == "function_call":
                OtherCustomerModel.runs += 1
                a = json.loads(o.arguments)
                o.arguments = json.dumps({**a, "customer_id": f"{a['customer_id']}-{OtherCustomerModel.runs}"})
        return r


RESENDS = [
    # name, model, key scheme, tickets after the turn sent again, its answers replayed
    ("the same call under new IDs", ScriptedModel, "oa3", {}, 1, [True]),
    ("two identical calls, both written again", TwoCallsModel, "oa3", {}, 2, [True, True]),
    ("a model that rewords the call: the same intent, a replay", RewordingModel, "oa3", {}, 1, [True]),
    ("another customer in the call is another intent", OtherCustomerModel, "oa3", {}, 2, [False]),
    ("the app's turn_id", ScriptedModel, "oa3", {"turn_id": "msg-1"}, 1, [True]),
    ("control: oa2 keys the whole arguments", RewordingModel, "oa2", {}, 2, [False]),
    ("control: oa1 keys the call's IDs", ScriptedModel, "oa1", {}, 2, [False]),
]


@pytest.mark.parametrize("name,model,scheme,extra,tickets,replayed", RESENDS, ids=[r[0] for r in RESENDS])
def test_a_turn_sent_again_makes_the_same_call_once(
    name: str, model: type[ScriptedModel], scheme: str, extra: dict[str, Any], tickets: int, replayed: list[bool], url: str, token: str, db: psycopg.Connection
) -> None:
    """A regenerate, or a turn whose saved RunState is gone (killed before
    it was saved, a store lost): the app sends the conversation again, cut
    before the model's answer. A new run, and the model writes the same
    call under new IDs, and at a real model's temperature in other words:
    the same intended call (the ticket's customer, its intent field), one
    ticket, the answer a replay that names what differed. Two identical
    calls stay two; another customer is another intent; the controls key
    the whole arguments (oa2) and the call's IDs (oa1)."""
    who = f"py-oa-resend-{uuid.uuid4().hex[:8]}"
    ask = [{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": "Open a ticket."}]

    async def scenario() -> tuple[int, list[dict[str, Any]], list[str]]:
        async with idemflow.AsyncClient(url, token) as c:
            agent = Agent(name="support", tools=[ticket_tool(c, key_scheme=scheme)], model=model(who))
            config = RunConfig(group_id=who, tracing_disabled=True)
            ids: list[str] = []
            outs: list[list[dict[str, Any]]] = []
            for _ in range(2):
                load, save = in_memory()
                result = await run_durably(agent, ask, run_config=config, load=load, save=save, **extra)
                ids += [i.raw_item.call_id for i in result.new_items if i.type == "tool_call_item"]
                outs.append([json.loads(str(i.output)) for i in result.new_items if i.type == "tool_call_output_item"])
                if len(outs) == 1:
                    n_first = count_like(db, who)
            return n_first, outs[1], ids

    n_first, again, ids = asyncio.run(scenario())
    n = count_like(db, who)
    print(
        f"{name}: {n_first} tickets after the first run, {n} after the turn sent again; its answers replayed {[a['replayed'] for a in again]},"
        f" differed {[a.get('differed') for a in again]}; call IDs {ids}"
    )
    assert len(set(ids)) == len(ids), "the model wrote every call under new IDs"
    assert (n, [a["replayed"] for a in again]) == (tickets, replayed)
    if model is RewordingModel and all(replayed):
        # Told truthfully: a replay of what was made, naming what differed.
        assert [a.get("differed") for a in again] == [["title"]] and "already done" in again[0]["note"], again


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
    """No group_id: NoDurableIdentityError, and nothing is sent. A Chat
    Completions item (no ID) under run_durably is keyed as the intended
    call it is, which needs no item ID: one ticket. Without approval
    (nothing planned) it is keyed by its IDs, and refused unless
    call_ids_unique=True, the caller's word that the provider never reuses
    a call ID: the call ID then names the call."""
    who = f"py-oa-noid-{uuid.uuid4().hex[:8]}"

    async def client_run(config: RunConfig, model: ScriptedModel, **kw: Any) -> Any:
        async with idemflow.AsyncClient(url, token) as c:
            load, save = in_memory()
            return await run_durably(
                Agent(name="support", tools=[ticket_tool(c, **kw)], model=model), "Open a ticket.", run_config=config, load=load, save=save
            )

    def statuses(result: Any) -> list[int]:
        return [json.loads(str(i.output))["http_status"] for i in result.new_items if i.type == "tool_call_output_item"]

    chat_completions = RunConfig(group_id=who, tracing_disabled=True)
    for config, model, kw in [
        (RunConfig(tracing_disabled=True), ScriptedModel(who), {}),
        (chat_completions, ScriptedModel(who, item_id=FAKE_RESPONSES_ID), {"needs_approval": False}),
    ]:
        with pytest.raises(UserError) as failed:
            asyncio.run(client_run(config, model, **kw))
        assert isinstance(failed.value.__cause__, NoDurableIdentityError), repr(failed.value)
    assert count(db, "ticket", who) == 0
    assert statuses(asyncio.run(client_run(chat_completions, ScriptedModel(who, item_id=FAKE_RESPONSES_ID)))) == [201]
    assert count(db, "ticket", who) == 1
    done = asyncio.run(client_run(chat_completions, ScriptedModel(who, item_id=FAKE_RESPONSES_ID), needs_approval=False, call_ids_unique=True))
    assert statuses(done) == [201]
    assert count(db, "ticket", who) == 2


def test_the_readme_snippet_runs(url: str, token: str, db: psycopg.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's snippet, as written, with the fake model in place of
    gpt-4.1 (the only change): it opens a ticket, and run again it resumes
    from the RunState it saved and makes no second."""
    snippet = docs_block("# The OpenAI Agents SDK on its own (Python)\n")
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


def mcp_server(url: str, token: str, approval: bool = True, timeout: float = 30) -> MCPServerStdio:
    """idemflow mcp over stdio, at url, as the SDK runs it: create_ticket
    only, each call approved first (run_durably saves its IDs) unless
    approval is off (the SDK's default)."""
    env = {"IDEMFLOW_URL": url, "IDEMFLOW_TOKEN": token, "PATH": os.environ.get("PATH", "")}
    return MCPServerStdio(
        params={"command": need("IDEMFLOW_BIN"), "args": ["mcp"], "env": env},
        name="idemflow",
        cache_tools_list=True,
        require_approval="always" if approval else "never",
        client_session_timeout_seconds=timeout,
        tool_filter=create_static_tool_filter(allowed_tool_names=["create_ticket"]),
    )


def test_a_call_over_mcp_has_the_native_tools_key(url: str, token: str, db: psycopg.Connection) -> None:
    """The same intended call made by the native tool and then, the turn
    sent again, through idemflow's MCP server with durable_mcp_server: the
    model writes it under new IDs and another idempotency_key of its own,
    and it gets the key the native tool had, so the first answer, a
    replay, and one ticket."""
    who = f"py-oa-mcp-native-{uuid.uuid4().hex[:8]}"
    config = RunConfig(group_id=who, tracing_disabled=True)

    async def scenario() -> tuple[list[Any], list[Any]]:
        async with idemflow.AsyncClient(url, token) as c:
            load, save = in_memory()
            native = Agent(name="support", tools=[ticket_tool(c)], model=ScriptedModel(who))
            first = await run_durably(native, "Open a ticket.", run_config=config, load=load, save=save)
        server = durable_mcp_server(mcp_server(url, token))
        async with server:
            load, save = in_memory()
            over_mcp = Agent(name="support", mcp_servers=[server], model=ScriptedModel(who, model_key=True))
            again = await run_durably(over_mcp, "Open a ticket.", run_config=config, load=load, save=save)
        return outputs_of(first), outputs_of(again)

    first, again = asyncio.run(scenario())
    print(f"native then MCP: {first[0]['result']['idempotency_key']} then {again[0]['result']['idempotency_key']}, replayed {again[0]['replayed']}")
    assert [o["replayed"] for o in first] == [False] and [o["replayed"] for o in again] == [True], (first, again)
    assert again[0]["result"] == first[0]["result"]
    assert count(db, "ticket", who) == 1


def causes(e: BaseException | None) -> list[BaseException]:
    """e and what it was raised from, in order."""
    chain: list[BaseException] = []
    while e is not None:
        chain.append(e)
        e = e.__cause__
    return chain


def outputs_of(result: Any) -> list[Any]:
    """The tool answers a run's items hold, as JSON (an MCP tool's is its
    text content)."""
    out = []
    for i in result.new_items:
        if i.type == "tool_call_output_item":
            out.append(json.loads(i.output["text"] if isinstance(i.output, dict) else str(i.output)))
    return out


def test_a_pending_answer_over_mcp_fails_the_run_and_never_reaches_the_model(url: str, token: str, db: psycopg.Connection) -> None:
    """A partition between idemflow mcp and the gateway longer than the
    wrapper's deadline: the run fails with DeadlineError, nothing is
    handed to the model, and the run resumed from its saved RunState gets
    the first call's answer, one ticket. The control, the SDK's MCP server
    as it comes: its read timeout reaches the model as an error that asks
    it to try again, and it does, under a key of its own: two tickets."""
    proxy = Proxy(url, "answer-lost", path="/never")

    async def scenario() -> tuple[str, str, list[str]]:
        who = f"py-oa-mcp-pending-{uuid.uuid4().hex[:8]}"
        config = RunConfig(group_id=who, tracing_disabled=True)
        load, save = in_memory()
        server = durable_mcp_server(mcp_server(proxy.url, token), deadline=3, wait=1)
        async with server:
            model = ScriptedModel(who, model_key=True)
            agent = Agent(name="support", mcp_servers=[server], model=model)
            proxy.partitioned = True
            with pytest.raises(Exception) as failed:
                await run_durably(agent, "Open a ticket.", run_config=config, load=load, save=save)
            assert any(isinstance(x, DeadlineError) for x in causes(failed.value)), repr(failed.value)
            assert model.outputs == [], f"the model was handed {model.outputs}"
            proxy.partitioned = False
            resumed = await run_durably(agent, "Open a ticket.", run_config=config, load=load, save=save)
            assert [o["replayed"] for o in outputs_of(resumed)] == [True], outputs_of(resumed)

        naive = f"py-oa-mcp-pending-control-{uuid.uuid4().hex[:8]}"
        control = mcp_server(proxy.url, token, approval=False, timeout=3)
        async with control:
            control_model = ScriptedModel(naive, model_key=True)
            proxy.partitioned = True
            await Runner.run(
                Agent(name="support", mcp_servers=[control], model=control_model), "Open a ticket.", run_config=RunConfig(group_id=naive, tracing_disabled=True)
            )
            proxy.partitioned = False
        return who, naive, control_model.outputs

    try:
        who, naive, control_outputs = asyncio.run(scenario())
    finally:
        proxy.close()
    ours, theirs = count(db, "ticket", who), count(db, "ticket", naive)
    print(f"pending over MCP: the run failed, its resume replayed, {ours} ticket; the control's model read {control_outputs}, {theirs} tickets")
    assert ours == 1
    assert len(control_outputs) == 2 and all(o.startswith("An error occurred") for o in control_outputs), control_outputs
    assert theirs == 2, "the control's retry under the model's new key made a second ticket"


class PartitioningModel(ScriptedModel):
    """A ScriptedModel that, once it asks for its call, partitions the
    proxy and waits out the MCP server's memory of the token: every later
    request of the run meets a gateway that gives no answer."""

    def __init__(self, customer: str, proxy: Proxy) -> None:
        super().__init__(customer, model_key=True)
        self.proxy = proxy

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        out = await super().get_response(*args, **kwargs)
        if not self.outputs and not self.proxy.partitioned:
            self.proxy.partitioned = True
            await asyncio.sleep(1.5)  # past --verify-ttl
        return out


def test_a_partition_behind_mcp_over_http_stops_the_run_and_reaches_no_model(url: str, token: str, db: psycopg.Connection) -> None:
    """#77: idemflow mcp --http whose gateway is partitioned once the model
    asked for its call, and which, with no grace, answers every request it
    cannot verify with a 503 (--verify-ttl 1s --verify-grace 0): the
    wrapped server waits through the MCP errors (the next tool listing,
    the call) and stops the run with DeadlineError past its deadline; the
    model reads no error. Resumed from its saved RunState on a new
    connection once the partition ended: one ticket. The SDK's own server
    raises the MCP error as it comes."""
    proxy = Proxy(url, "answer-lost", path="/never")

    def http_server(mcp_url: str) -> MCPServerStreamableHttp:
        return MCPServerStreamableHttp(
            params={"url": mcp_url, "headers": {"Authorization": f"Bearer {token}"}, "timeout": 10},
            name="idemflow",
            cache_tools_list=False,
            require_approval="always",
            client_session_timeout_seconds=10,
            tool_filter=create_static_tool_filter(allowed_tool_names=["create_ticket"]),
        )

    async def scenario(mcp_url: str) -> tuple[str, list[BaseException], list[str]]:
        who = f"py-oa-mcp-http-partition-{uuid.uuid4().hex[:8]}"
        config = RunConfig(group_id=who, tracing_disabled=True)
        load, save = in_memory()
        model = PartitioningModel(who, proxy)
        server = durable_mcp_server(http_server(mcp_url), deadline=4, wait=1)
        async with server:
            agent = Agent(name="support", mcp_servers=[server], model=model)
            with pytest.raises(Exception) as failed:
                await run_durably(agent, "Open a ticket.", run_config=config, load=load, save=save)
        chain = causes(failed.value)
        read = list(model.outputs)
        proxy.partitioned = False
        again = durable_mcp_server(http_server(mcp_url), deadline=30, wait=1)
        async with again:
            resumed = await run_durably(Agent(name="support", mcp_servers=[again], model=model), "Open a ticket.", run_config=config, load=load, save=save)
            assert [o["http_status"] for o in outputs_of(resumed)] == [201], outputs_of(resumed)
        return who, chain, read

    try:
        with mcp_http(proxy.url, "--verify-ttl", "1s", "--verify-grace", "0", "--task-wait", "1s") as mcp_url:
            who, chain, read = asyncio.run(scenario(mcp_url))
    finally:
        proxy.close()
    n = count(db, "ticket", who)
    print(f"a partition behind MCP over HTTP: the run stopped with {[type(x).__name__ for x in chain]}, the model read {read}; resumed, {n} ticket")
    assert any(isinstance(x, DeadlineError) for x in chain), chain
    assert read == [], f"the model was handed {read}"
    assert n == 1


def test_the_docs_mcp_wrapper_runs(url: str, token: str, db: psycopg.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agents/mcp.md's OpenAI Agents SDK wrapper, as written: the names
    it uses are the function's parameters, and idemflow is on PATH. The
    turn sent again (its RunState lost) writes the call under new IDs and
    a new model-written key: the same ticket, a replay."""
    block = docs_block("**The OpenAI Agents SDK, Python** (`idemflow.openai_agents.durable_mcp_server`).")
    scope: dict[str, Any] = {}
    exec("async def snippet(model, message, conversation_id, load, save, url, token):\n" + textwrap.indent(block + "return result\n", "    "), scope)
    monkeypatch.setenv("PATH", f"{os.path.dirname(need('IDEMFLOW_BIN'))}{os.pathsep}{os.environ['PATH']}")
    who = f"py-oa-mcp-docs-{uuid.uuid4().hex[:8]}"

    async def turn() -> list[Any]:
        load, save = in_memory()
        return outputs_of(await scope["snippet"](ScriptedModel(who, model_key=True), "Open a ticket.", who, load, save, url, token))

    first, again = asyncio.run(turn()), asyncio.run(turn())
    assert [o["replayed"] for o in first + again] == [False, True], (first, again)
    assert count(db, "ticket", who) == 1
