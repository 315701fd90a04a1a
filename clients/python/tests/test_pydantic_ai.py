"""Pydantic AI (idemflow.pydantic_ai): a real Agent SIGKILLed mid tool
call and resumed from the history it saved ends with one ticket; the
naive control (a fresh key per call) makes two; so does a turn killed
before anything was saved and sent again under pa1's keys (the call's
ID), and not under pa2's (the intended call). A run sent again with the
history cut before the model's answer (a regenerate) replays. Also: a call ID reused by a later turn
is a second call, a pending answer fails the run instead of reaching the
model, and a history without a durable identity gets no key."""

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
from pydantic_ai import RunContext, Tool
from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart

import idemflow
from idemflow.errors import DeadlineError, NoDurableIdentityError
from idemflow.pydantic_ai import durable_mcp_toolset, message_key, run_durably

from . import children
from .agents.pydantic_agent import ScriptedModel, agent, mcp_toolset, ticket_tool
from .conftest import count, count_like, docs_block, need
from .wire import Proxy


def answers(result: Any) -> list[dict[str, Any]]:
    """The tool answers a run handed the model, as JSON."""
    return [
        p.content if isinstance(p.content, dict) else json.loads(str(p.content))  # an MCP tool's is its structured content
        for m in result.new_messages()
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]


def in_memory() -> tuple[Any, Any]:
    saved: list[bytes] = []

    async def load() -> bytes | None:
        return saved[-1] if saved else None

    async def save(state: bytes) -> None:
        saved.append(state)

    return load, save


CASES = [
    # name, extra arguments, tickets after the kill and the rerun, the rerun's answer replayed
    ("saved history", (), 1, True),
    ("control: fresh keys", ("--tools", "naive"), 2, False),
    ("nothing saved before the call, the turn sent again", ("--unsafe",), 1, True),
    ("control: nothing saved, pa1 keys", ("--unsafe", "--key-scheme", "pa1"), 2, False),
    # Through idemflow's MCP server (Pydantic AI's MCPToolset), the model
    # writing an idempotency_key of its own each time it writes the call.
    ("MCP: saved history", ("--via", "mcp"), 1, True),
    ("MCP: history lost, the turn sent again", ("--via", "mcp", "--lost"), 1, True),
    ("MCP control: the model's key, history lost", ("--via", "mcp", "--lost", "--tools", "naive"), 2, False),
]


@pytest.mark.parametrize("name,extra,tickets,replayed", CASES, ids=[c[0] for c in CASES])
def test_a_killed_pydantic_agent_resumes_from_its_history_without_a_duplicate(
    name: str, extra: tuple[str, ...], tickets: int, replayed: bool, url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    thread = f"py-pa-{name.split(':')[0].split(',')[0].replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    # The first POST reaches the gateway and its answer is dropped (or it
    # never arrives), and the agent is SIGKILLed while it waits; the app
    # then runs it again, the way it resumes.
    args = ["--state", str(tmp_path / "history.json"), *extra]
    resumed = "resuming" if extra in ((), ("--via", "mcp")) else None
    children.kill_case("tests.agents.pydantic_agent", name, thread, args, url, db, tickets=tickets, replayed=replayed, resumed=resumed)


class RewordingModel(ScriptedModel):
    """A ScriptedModel that writes the title anew on every run: a model
    that rewords the call."""

    def __init__(self, customer: str) -> None:
        self.runs = 0
        super().__init__(customer)

    def respond(self, messages: list[Any], info: Any) -> ModelResponse:
        r = super().respond(messages, info)
        for p in r.parts:
            if isinstance(p, ToolCallPart):
                self.runs += 1
                p.args = {**p.args_as_dict(), "title": f"Printer on fire ({self.runs})"}
        return r


class TwoCallsModel(ScriptedModel):
    """A ScriptedModel that asks for two identical tickets in one response."""

    def respond(self, messages: list[Any], info: Any) -> ModelResponse:
        r = super().respond(messages, info)
        calls = [p for p in r.parts if isinstance(p, ToolCallPart)]
        if calls:
            r.parts = [*calls, ToolCallPart(calls[0].tool_name, calls[0].args_as_dict(), tool_call_id=f"call_{uuid.uuid4().hex}")]
        return r


class OtherCustomerModel(RewordingModel):
    """A ScriptedModel whose call, written again, names another customer."""

    def respond(self, messages: list[Any], info: Any) -> ModelResponse:
        r = super().respond(messages, info)
        for p in r.parts:
            if isinstance(p, ToolCallPart):
                a = p.args_as_dict()
                p.args = {**a, "title": "Printer on fire", "customer_id": f"{a['customer_id']}-{self.runs}"}
        return r


REGENERATES = [
    # name, model, key scheme, tickets after the regenerate, its answers replayed
    ("the same call under a new ID", ScriptedModel, "pa3", 1, [True]),
    ("two identical calls, both written again", TwoCallsModel, "pa3", 2, [True, True]),
    ("a model that rewords the call: the same intent, a replay", RewordingModel, "pa3", 1, [True]),
    ("another customer in the call is another intent", OtherCustomerModel, "pa3", 2, [False]),
    ("control: pa2 keys the whole arguments", RewordingModel, "pa2", 2, [False]),
    ("control: pa1 keys the call's ID and run", ScriptedModel, "pa1", 2, [False]),
]


@pytest.mark.parametrize("name,model,scheme,tickets,replayed", REGENERATES, ids=[r[0] for r in REGENERATES])
def test_a_run_sent_again_with_the_history_cut_before_the_models_answer_makes_the_call_once(
    name: str, model: type[ScriptedModel], scheme: str, tickets: int, replayed: list[bool], url: str, token: str, db: psycopg.Connection
) -> None:
    """A regenerate: the app sends the conversation again cut before the
    model's answer (its history up to the user's request). A new run, and
    the model writes the same call under a new ID, at a real model's
    temperature in other words: the same intended call (the ticket's
    customer), one ticket, the answer a replay that names what differed.
    Two identical calls in one response stay two; another customer is
    another intent; the controls key the whole arguments (pa2) and the
    call's ID and run (pa1)."""
    who = f"py-pa-regen-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[int, list[bool], list[str]]:
        async with idemflow.AsyncClient(url, token) as c:
            m = model(who)
            support = agent(m, ticket_tool(c, key_scheme=scheme))
            load, save = in_memory()
            first = await run_durably(support, "Open a ticket.", load=load, save=save)
            n_first = count_like(db, who)
            m.outputs.clear()  # the model reads the cut history afresh
            load, save = in_memory()
            again = await run_durably(support, None, message_history=first.all_messages()[:1], load=load, save=save)
            ids = [
                p.tool_call_id
                for m in first.all_messages() + again.all_messages()[1:]
                if isinstance(m, ModelResponse)
                for p in m.parts
                if isinstance(p, ToolCallPart)
            ]
            return n_first, answers(again), ids

    n_first, again, ids = asyncio.run(scenario())
    n = count_like(db, who)
    print(
        f"{name}: {n_first} tickets after the first run, {n} after the regenerate; its answers replayed {[a['replayed'] for a in again]},"
        f" differed {[a.get('differed') for a in again]}; call IDs {ids}"
    )
    assert ids and len(set(ids)) == len(ids), "the model wrote every call under a new ID"
    assert (n, [a["replayed"] for a in again]) == (tickets, replayed)
    if model is RewordingModel and all(replayed):
        # Told truthfully: a replay of what was made, naming what differed.
        assert [a.get("differed") for a in again] == [["title"]] and "already done" in again[0]["note"], again


def test_a_call_id_reused_in_a_later_turn_is_a_second_call(url: str, token: str, db: psycopg.Connection) -> None:
    """A provider that numbers calls per response brings call_0 back in
    the next turn of the same conversation: two turns, two tickets,
    neither answered as the other's replay."""
    who = f"py-pa-reused-{uuid.uuid4().hex[:8]}"

    async def turns() -> tuple[list[bool], list[str]]:
        replayed: list[bool] = []
        async with idemflow.AsyncClient(url, token) as c:
            support = agent(ScriptedModel(who, call_id="call_0"), ticket_tool(c))
            history: list[Any] = []
            for _ in range(2):
                load, save = in_memory()
                result = await run_durably(support, "Open a ticket.", message_history=history, load=load, save=save)
                replayed += [a["replayed"] for a in answers(result)]
                history = result.all_messages()
        calls = [p.tool_call_id for m in history if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)]
        return replayed, calls

    replayed, calls = asyncio.run(turns())
    n = count(db, "ticket", who)
    print(f"two turns, calls {calls}: replayed {replayed}, {n} tickets")
    assert calls == ["call_0", "call_0"]
    assert (replayed, n) == ([False, False], 2)


ONE_STORE = [
    # name, the second turn's prompt and history, tickets, each turn's answers replayed
    ("a later turn: the history and the same words", "history", 2, [[False], [False]]),
    ("the same turn sent again (a regenerate)", "again", 1, [[False], [True]]),
]


@pytest.mark.parametrize("name,how,tickets,replayed", ONE_STORE, ids=[c[0] for c in ONE_STORE])
def test_every_turn_on_one_saved_run_is_its_own_run(
    name: str, how: str, tickets: int, replayed: list[list[bool]], url: str, token: str, db: psycopg.Connection
) -> None:
    """The docs' program keeps one file per conversation and never clears
    it. A later turn run on that file is a run of its own: its model is
    asked, its call made, a second ticket, never turn 1's saved run
    answering for it. The same turn sent again on the file is a replay."""
    who = f"py-pa-store-{uuid.uuid4().hex[:8]}"

    async def turns() -> list[list[bool]]:
        load, save = in_memory()  # one store for the conversation, as the docs' file
        out = []
        async with idemflow.AsyncClient(url, token) as c:
            support = agent(ScriptedModel(who), ticket_tool(c))
            result = await run_durably(support, "My printer is on fire.", load=load, save=save)
            out.append([a["replayed"] for a in answers(result)])
            history = result.all_messages() if how == "history" else []
            result = await run_durably(support, "My printer is on fire.", message_history=history, load=load, save=save)
            out.append([a["replayed"] for a in answers(result)])
        return out

    out = asyncio.run(turns())
    n = count(db, "ticket", who)
    print(f"{name}: {n} tickets; each turn's answers replayed {out}")
    assert (n, out) == (tickets, replayed)


def test_a_pending_answer_fails_the_run_and_never_reaches_the_model(url: str, token: str, db: psycopg.Connection) -> None:
    """A partition longer than the tool's wait: idemflow's tool fails the
    run with nothing handed to the model, and the run resumed from its
    saved history gets the first call's answer, one ticket. The control
    is a plain Pydantic AI tool under the same key rule that does what
    the framework invites, ModelRetry on an error: the model calls again
    under a new ID, a new key, and a second ticket."""
    from pydantic_ai import ModelRetry

    proxy = Proxy(url, "answer-lost", path="/never")

    async def scenario() -> tuple[int, int, list[str]]:
        async with idemflow.AsyncClient(proxy.url, token, attempt_timeout=0.3, initial_backoff=0.02, max_backoff=0.1) as c:
            who = f"py-pa-pending-{uuid.uuid4().hex[:8]}"
            model = ScriptedModel(who)
            support = agent(model, ticket_tool(c, deadline=1.2))
            load, save = in_memory()
            proxy.partitioned = True
            with pytest.raises(DeadlineError):
                await run_durably(support, "Open a ticket.", load=load, save=save)
            assert model.outputs == [], f"the model was handed {model.outputs}"
            proxy.partitioned = False
            resumed = await run_durably(support, "Open a ticket.", load=load, save=save)
            assert [a["replayed"] for a in answers(resumed)] == [True], answers(resumed)

            async def create_ticket(ctx: RunContext[Any], customer_id: str, title: str) -> str:
                try:
                    r = await c.do(
                        idemflow.Intent(
                            message_key(ctx.messages, ctx.tool_call_id, "create_ticket"), "/v1/tickets", {"customer_id": customer_id, "title": title}
                        ),
                        deadline=1.2,
                    )
                except DeadlineError as e:
                    raise ModelRetry(str(e)) from e
                return json.dumps(r.body)

            naive = f"py-pa-pending-control-{uuid.uuid4().hex[:8]}"
            control_model = ScriptedModel(naive)
            proxy.partitioned = True
            await agent(control_model, Tool(create_ticket, takes_ctx=True, max_retries=2)).run("Open a ticket.")
            return count(db, "ticket", who), count(db, "ticket", naive), control_model.outputs

    try:
        ours, control_tickets, control_outputs = asyncio.run(scenario())
    finally:
        proxy.close()
    print(f"pending answer: the run failed, its resume replayed, {ours} ticket; control: {len(control_outputs)} errors to the model, {control_tickets} tickets")
    assert ours == 1
    assert len(control_outputs) == 2 and all(o.startswith("error:") for o in control_outputs), control_outputs
    assert control_tickets == 2, "the control's retry under a new key made a second ticket"


def test_a_history_without_a_durable_identity_gets_no_key() -> None:
    """A call no response holds, or a response that records no conversation
    (or, under pa1, no run: history saved by a Pydantic AI too old to
    record them): NoDurableIdentityError, never a key two calls could
    share."""
    call = ToolCallPart("create_ticket", {}, tool_call_id="call_0")
    for scheme in ("pa2", "pa1"):
        with pytest.raises(NoDurableIdentityError):
            message_key([], "call_0", "create_ticket", key_scheme=scheme)
        with pytest.raises(NoDurableIdentityError):
            message_key([ModelResponse(parts=[call])], "call_0", "create_ticket", key_scheme=scheme)
        with pytest.raises(NoDurableIdentityError):
            message_key([ModelResponse(parts=[call], run_id="r", conversation_id="c")], None, "create_ticket", key_scheme=scheme)
        key = message_key([ModelResponse(parts=[call], run_id="r", conversation_id="c")], "call_0", "create_ticket", key_scheme=scheme)
        assert key.startswith(f"{scheme}_")
    with pytest.raises(NoDurableIdentityError):
        message_key([ModelResponse(parts=[call], conversation_id="c")], "call_0", "create_ticket", key_scheme="pa1")


def test_the_readme_snippet_runs(url: str, token: str, db: psycopg.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's snippet, as written, with the deterministic model in
    place of openai:gpt-4.1 (the only change): it opens a ticket, and run
    again it resumes from the history it saved and makes no second."""
    snippet = docs_block("# Pydantic AI (Python 3.11+)\n")
    assert 'Agent("openai:gpt-4.1",' in snippet
    who = "c-1"
    before = count(db, "ticket", who)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IDEMFLOW_URL", url)
    monkeypatch.setenv("IDEMFLOW_TOKEN", token)
    code = snippet.replace('Agent("openai:gpt-4.1",', "Agent(MODEL,")
    exec(compile(code, "README.md", "exec"), {"MODEL": ScriptedModel(who), "__name__": "readme"})
    assert (tmp_path / "runs" / "ticket-42.json").exists()
    assert count(db, "ticket", who) == before + 1
    exec(compile(code, "README.md", "exec"), {"MODEL": ScriptedModel(who), "__name__": "readme"})
    assert count(db, "ticket", who) == before + 1, "run again from its saved history, the snippet made a second ticket"


def test_a_pending_answer_over_mcp_fails_the_run_and_never_reaches_the_model(url: str, token: str, db: psycopg.Connection) -> None:
    """durable_mcp_toolset across a partition between idemflow mcp and the
    gateway longer than its deadline: the run fails with DeadlineError,
    nothing handed to the model, and the run resumed from its saved
    history gets the first call's answer, one ticket. Unwrapped (the
    control), the toolset hands the model NO ANSWER YET as a retry prompt
    (MCPToolset's ModelRetry); the model calls again under a key of its
    own, a second ticket, until Pydantic AI's retry limit fails the run."""
    from pydantic_ai.exceptions import UnexpectedModelBehavior

    proxy = Proxy(url, "answer-lost", path="/never")

    async def scenario() -> tuple[str, str, list[str]]:
        who = f"py-pa-mcp-pending-{uuid.uuid4().hex[:8]}"
        model = ScriptedModel(who, model_key=True)
        support = agent(model, toolset=durable_mcp_toolset(mcp_toolset(proxy.url, token), deadline=3, wait=1))
        load, save = in_memory()
        async with support:
            proxy.partitioned = True
            with pytest.raises(DeadlineError):
                await run_durably(support, "Open a ticket.", load=load, save=save, conversation_id=who)
            assert model.outputs == [], f"the model was handed {model.outputs}"
            proxy.partitioned = False
            resumed = await run_durably(support, "Open a ticket.", load=load, save=save, conversation_id=who)
            assert [a["replayed"] for a in answers(resumed)] == [True], answers(resumed)

        naive = f"py-pa-mcp-pending-control-{uuid.uuid4().hex[:8]}"
        control_model = ScriptedModel(naive, model_key=True)
        control = agent(control_model, toolset=mcp_toolset(proxy.url, token, "--call-wait", "2s"))
        async with control:
            proxy.partitioned = True
            with pytest.raises(UnexpectedModelBehavior):
                await control.run("Open a ticket.")
            proxy.partitioned = False
        return who, naive, control_model.outputs

    try:
        who, naive, control_outputs = asyncio.run(scenario())
    finally:
        proxy.close()
    ours, theirs = count(db, "ticket", who), count(db, "ticket", naive)
    print(f"pending over MCP: the run failed, its resume replayed, {ours} ticket; the control's model read {control_outputs}, {theirs} tickets")
    assert ours == 1
    assert control_outputs and "NO ANSWER YET" in control_outputs[0], control_outputs
    assert theirs == 2, "the control's model called again under a key of its own"


def test_the_docs_mcp_toolset_runs(url: str, token: str, db: psycopg.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agents/mcp.md's Pydantic AI snippet, as written (idemflow on
    PATH; model, load, save, url, token and conversation the function's
    parameters), after the same turn made through the native idemflow_tool:
    the call through MCP, with a model-written key of its own, has the
    native tool's key, so it is that call's replay, one ticket."""
    block = docs_block("**Pydantic AI** (`idemflow.pydantic_ai.durable_mcp_toolset`, the")
    scope: dict[str, Any] = {}
    exec("async def snippet(model, load, save, url, token, conversation):\n" + textwrap.indent(block + "return result\n", "    "), scope)
    monkeypatch.setenv("PATH", f"{os.path.dirname(need('IDEMFLOW_BIN'))}{os.pathsep}{os.environ['PATH']}")
    who = f"py-pa-docs-mcp-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with idemflow.AsyncClient(url, token) as c:
            load, save = in_memory()
            first = await run_durably(agent(ScriptedModel(who), ticket_tool(c)), "My printer is on fire.", load=load, save=save, conversation_id=who)
        again = await scope["snippet"](ScriptedModel(who, model_key=True), *in_memory(), url, token, who)
        return answers(first), answers(again)

    first, again = asyncio.run(scenario())
    assert [a["replayed"] for a in first + again] == [False, True], (first, again)
    assert again[0]["result"] == first[0]["result"]
    assert count(db, "ticket", who) == 1
