"""A LangGraph agent (a real StateGraph, a PostgreSQL checkpointer, a
deterministic fake chat model) SIGKILLed at four points and restarted on
the same thread ends with exactly one ticket and one order; so does one
that passes a review step (update_state) before the resume. The naive
control, a fresh key per call, makes a second ticket under the first kill.
Also: the tool's errors, as the model reads them."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId
from langchain_core.tools import tool as lc_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode, tools_condition
from langgraph.types import Command
from pydantic import BaseModel

import idemflow
from idemflow.langgraph import ARGS_KEY_SCHEME, LEGACY_KEY_SCHEME, durable_key, idemflow_tool, mcp_tools

from . import children
from .conftest import count, count_like, docs_block, need
from .test_mcp import over_http, over_stdio
from .wire import Proxy, mcp_http


def agent_env(url: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "IDEMFLOW_URL": url, "PYTHONUNBUFFERED": "1", **extra}


def start(thread: str, tools: str, env: dict[str, str], *extra: str) -> tuple[subprocess.Popen[str], queue.Queue[str | None]]:
    return children.start("tests.agents.langgraph_agent", "--thread", thread, "--tools", tools, *extra, env=env)


def kill_when(child: tuple[subprocess.Popen[str], queue.Queue[str | None]], ready: Callable[[str], bool], event: threading.Event | None = None) -> list[str]:
    """SIGKILLs the agent once a line of its says so (or event is set)."""
    p, lines = child
    seen: list[str] = []
    while True:
        if event is not None and event.wait(0.05):
            break
        try:
            line = lines.get(timeout=0.05 if event is not None else 90)
        except queue.Empty:
            if event is None:
                p.kill()
                pytest.fail(f"the agent never reached the kill point: {seen}")
            continue
        if line is None:
            pytest.fail(f"the agent ended before it was killed: {seen}")
        seen.append(line)
        if ready(line):
            break
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    assert not any("DONE" in s for s in seen), f"the agent finished before it was killed: {seen}"
    return seen


def finish(thread: str, tools: str, env: dict[str, str], *extra: str) -> str:
    p, lines = start(thread, tools, env, *extra)
    p.wait(timeout=120)
    out = ""
    while (line := lines.get(timeout=30)) is not None:
        out += line + "\n"
    assert p.returncode == 0 and "DONE" in out, f"the agent did not finish ({p.returncode}):\n{out}"
    return out


def tool_answer(out: str, tool: str) -> dict[str, Any]:
    for line in out.splitlines():
        if line.startswith(f"tool {tool} "):
            return json.loads(line.split(" ", 2)[2])
    raise AssertionError(f"no answer of {tool} in:\n{out}")


CASES = [
    # name, fault (a proxy's, or the agent's own pause), tools, review, tickets, the resumed ticket call's answer replayed
    ("answer lost", "answer-lost", "idemflow", False, 1, True),
    ("before received", "before-received", "idemflow", False, 1, False),
    ("during the model step", "model", "idemflow", False, 1, None),
    ("between two tool calls", "between", "idemflow", False, 1, True),
    ("review step, answer lost", "answer-lost", "idemflow", True, 1, True),
    ("control, answer lost", "answer-lost", "naive", False, 2, None),
]


@pytest.mark.parametrize("name,fault,tools,review,tickets,replayed", CASES, ids=[c[0] for c in CASES])
def test_a_killed_langgraph_agent_resumes_without_a_duplicate(
    name: str, fault: str, tools: str, review: bool, tickets: int, replayed: bool | None, url: str, db: psycopg.Connection
) -> None:
    thread = f"py-{name.replace(' ', '-').replace(',', '')}-{uuid.uuid4().hex[:6]}"
    extra = ("--review",) if review else ()
    proxy = Proxy(url, fault, hold=True) if fault in ("answer-lost", "before-received") else None  # type: ignore[arg-type]
    try:
        base = proxy.url if proxy else url
        if proxy:
            kill_when(start(thread, tools, agent_env(base)), lambda _: False, proxy.hit)
        else:
            kill_when(start(thread, tools, agent_env(base, IDEMFLOW_AGENT_PAUSE=fault)), lambda line: line == f"PAUSED {fault}")
        out = finish(thread, tools, agent_env(base), *extra)
    finally:
        if proxy:
            proxy.close()
    assert f"resuming {thread} at" in out, out
    if review:
        assert f"reviewed {thread}" in out, out
    n_tickets, n_orders = count(db, "ticket", thread), count(db, "purchase_order", thread)
    print(f"{name}: {n_tickets} tickets, {n_orders} orders after the kill and the resume")
    assert (n_tickets, n_orders) == (tickets, 1), out
    if replayed is not None:
        assert tool_answer(out, "create_ticket")["replayed"] is replayed, out


@pytest.mark.parametrize("scheme,tickets", [("lg5", 1), ("lg3", 2)], ids=["the intended call", "control: lg3 keys the call's IDs"])
def test_a_turn_killed_before_its_state_was_saved_and_sent_again_makes_one_ticket(scheme: str, tickets: int, url: str, db: psycopg.Connection) -> None:
    """With durability "exit" LangGraph saves nothing until the run ends:
    killed after idemflow made the ticket and before the answer came, the
    turn is lost, and the app sends the user's message again (with its ID,
    as a chat UI does). The model writes the same call under new IDs: the
    same intended call, one ticket, the answer a replay. lg3 keyed the
    call's IDs: a second ticket."""
    thread = f"py-lg-unsaved-{scheme}-{uuid.uuid4().hex[:6]}"
    extra = ("--durability", "exit", "--message-id", f"msg-{thread}", "--key-scheme", scheme)
    proxy = Proxy(url, "answer-lost", hold=True)
    try:
        kill_when(start(thread, "idemflow", agent_env(proxy.url), *extra), lambda _: False, proxy.hit)
    finally:
        proxy.close()
    out = finish(thread, "idemflow", agent_env(url), *extra)
    assert f"starting {thread}" in out, f"the kill left a checkpoint to resume:\n{out}"
    n = count(db, "ticket", thread)
    print(f"{scheme}: {n} tickets after the kill and the message sent again; the ticket's answer replayed {tool_answer(out, 'create_ticket')['replayed']}")
    assert n == tickets, out
    assert tool_answer(out, "create_ticket")["replayed"] is (tickets == 1), out


MCP_CASES = [
    # name, extra flags, tools, tickets, the ticket call's answer replayed
    ("resumed from its checkpoint", ("--via", "mcp"), "idemflow", 1, True),
    ("nothing saved, the turn sent again", ("--via", "mcp", "--durability", "exit"), "idemflow", 1, True),
    ("control: the model's key, nothing saved, the turn sent again", ("--via", "mcp", "--durability", "exit"), "naive", 2, False),
]


@pytest.mark.parametrize("name,extra,tools,tickets,replayed", MCP_CASES, ids=[c[0] for c in MCP_CASES])
def test_a_langgraph_agent_through_mcp_killed_mid_call_makes_one_ticket(
    name: str, extra: tuple[str, ...], tools: str, tickets: int, replayed: bool, url: str, db: psycopg.Connection
) -> None:
    """The agent reaches create_ticket through idemflow's MCP server, its
    model writing an idempotency_key of its own each time, and is SIGKILLed
    after idemflow made the ticket and before the answer came. mcp_tools
    sends the intended call's key (lg4) in _meta: resumed from its
    checkpoint, or with nothing saved and the turn's message sent again
    (the model writing the call under new IDs and a new key), one ticket
    and a replay. The control, the model's key deciding (as
    langchain-mcp-adapters' tools), makes two."""
    need("IDEMFLOW_BIN")
    thread = f"py-lg-mcp-{name.split(':')[0].split(',')[0].replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    flags = (*extra, "--message-id", f"msg-{thread}")
    proxy = Proxy(url, "answer-lost", hold=True)
    try:
        kill_when(start(thread, tools, agent_env(proxy.url), *flags), lambda _: False, proxy.hit)
    finally:
        proxy.close()
    out = finish(thread, tools, agent_env(url), *flags)
    n = count(db, "ticket", thread)
    print(f"MCP, {name}: {n} tickets after the kill and the rerun; the ticket's answer replayed {tool_answer(out, 'create_ticket')['replayed']}")
    assert n == tickets, out
    assert tool_answer(out, "create_ticket")["replayed"] is replayed, out
    if "exit" not in extra:
        assert f"resuming {thread} at" in out, out


class Ticket(BaseModel):
    customer_id: str
    title: str


def one_call(tool: Any, args: dict[str, Any], config: dict[str, Any]) -> str:
    graph = StateGraph(MessagesState).add_node("tools", ToolNode([tool])).add_edge(START, "tools").compile()
    msg = AIMessage("", tool_calls=[{"name": tool.name, "args": args, "id": "call_1", "type": "tool_call"}])
    out = graph.invoke({"messages": [msg]}, config)
    return str(out["messages"][-1].content)


def test_arguments_the_operation_refuses_are_a_readable_tool_error_not_a_retry_loop(url: str, token: str) -> None:
    attempts: list[int] = []
    with idemflow.Client(url, token, on_attempt=lambda n, _: attempts.append(n)) as c:
        tool = idemflow_tool(c, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket)
        answer = json.loads(one_call(tool, {"customer_id": "c-py", "title": ""}, {"configurable": {"thread_id": str(uuid.uuid4())}}))
    assert attempts == [1]
    assert answer["http_status"] == 400 and answer["error"] == "InvalidRequestError", answer
    assert "title" in answer["problem"]["detail"], answer


def test_a_run_without_a_thread_raises_naming_it(client: idemflow.Client) -> None:
    tool = idemflow_tool(client, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket)
    with pytest.raises(idemflow.NoDurableIdentityError, match="thread_id"):
        one_call(tool, {"customer_id": "c-py", "title": "t"}, {})


def test_a_call_without_an_id_raises_naming_it(client: idemflow.Client) -> None:
    tool = idemflow_tool(client, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket)
    with pytest.raises(Exception) as e:
        tool.invoke({"customer_id": "c-py", "title": "t"}, {"configurable": {"thread_id": "t-1"}})
    print(f"a call without an ID: {type(e.value).__name__}: {e.value}")
    assert "ToolCall" in str(e.value) or "tool-call ID" in str(e.value)


def test_the_model_sees_the_operations_schema_not_the_injected_id(client: idemflow.Client) -> None:
    tool = idemflow_tool(client, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket)
    assert set(tool.tool_call_schema.model_json_schema()["properties"]) == {"customer_id", "title"}


class TicketWithPriority(BaseModel):
    customer_id: str
    title: str
    priority: str | None = None


def test_an_optional_argument_the_model_leaves_out_is_left_out_not_sent_as_null(client: idemflow.Client) -> None:
    tool = idemflow_tool(client, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=TicketWithPriority)
    answer = json.loads(one_call(tool, {"customer_id": "c-py-optional", "title": "No priority given"}, {"configurable": {"thread_id": str(uuid.uuid4())}}))
    assert answer["http_status"] == 201, answer


def test_a_pending_answer_pauses_the_run_and_never_reaches_the_model_as_an_error(url: str, token: str, db: psycopg.Connection) -> None:
    """A partition longer than the tool's deadline, with
    ToolNode(handle_tool_errors=True): idemflow's tool pauses the run, the
    resume gets the first call's answer, one ticket. The control lets the
    deadline's end be an error: the model calls again under a new
    tool-call ID, a new key, and a second ticket."""
    proxy = Proxy(url, "answer-lost", path="/never")
    try:
        with idemflow.Client(proxy.url, token, attempt_timeout=0.3, initial_backoff=0.02, max_backoff=0.1) as c:

            @lc_tool("create_ticket")
            def control(
                customer_id: str, title: str, tool_call_id: Annotated[str, InjectedToolCallId], state: Annotated[Any, InjectedState], config: RunnableConfig
            ) -> str:
                """Create a ticket."""
                key = durable_key(config, tool_call_id, "create_ticket", state)
                return json.dumps(c.do(idemflow.Intent(key, "/v1/tickets", {"customer_id": customer_id, "title": title}), deadline=1.2).body)

            fixed = idemflow_tool(c, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket, deadline=1.2)

            def run(tool: Any, customer: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
                def model(state: MessagesState) -> dict[str, Any]:
                    # After a tool error, the model asks again (a new call
                    # ID, as a model writes one); after an answer, done.
                    tools = [m for m in state["messages"] if isinstance(m, ToolMessage)]
                    if tools and (tools[-1].status != "error" or len(tools) >= 2):
                        return {"messages": [AIMessage("done")]}
                    call = {
                        "name": "create_ticket",
                        "args": {"customer_id": customer, "title": "Printer on fire"},
                        "id": f"call_{uuid.uuid4()}",
                        "type": "tool_call",
                    }
                    return {"messages": [AIMessage("", tool_calls=[call])]}

                graph = (
                    StateGraph(MessagesState)
                    .add_node("agent", model)
                    .add_node("tools", ToolNode([tool], handle_tool_errors=True))
                    .add_edge(START, "agent")
                    .add_conditional_edges("agent", tools_condition)
                    .add_edge("tools", "agent")
                    .compile(checkpointer=InMemorySaver())
                )
                config: dict[str, Any] = {"configurable": {"thread_id": customer}}
                return graph, config, graph.invoke({"messages": []}, config)

            who = f"py-pending-{uuid.uuid4().hex[:8]}"
            proxy.partitioned = True
            graph, config, out = run(fixed, who)
            assert out.get("__interrupt__") and out["__interrupt__"][0].value["idemflow"] == "pending", out
            assert not any(isinstance(m, ToolMessage) for m in out["messages"]), "no tool message reached the model"
            proxy.partitioned = False
            resumed = graph.invoke(Command(resume=True), config)
            answers = [m for m in resumed["messages"] if isinstance(m, ToolMessage)]
            assert len(answers) == 1 and answers[0].status == "success" and json.loads(str(answers[0].content))["replayed"] is True, answers
            assert count(db, "ticket", who) == 1

            naive = f"py-pending-control-{uuid.uuid4().hex[:8]}"
            proxy.partitioned = True
            _, _, out = run(control, naive)
            errors = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
            n_errors, n_tickets = len(errors), count(db, "ticket", naive)
            print(f"pending answer: the run paused, 1 ticket; the control: {n_errors} errors to the model, {n_tickets} tickets")
            assert n_errors == 2
            assert n_tickets == 2, "the control's retry under a new key made a second ticket"
    finally:
        proxy.close()


def test_a_tool_call_id_reused_in_a_later_turn_is_a_second_call(client: idemflow.Client, db: psycopg.Connection) -> None:
    """Some models and servers number tool calls per message (call_0,
    call_1), so a later turn of the same thread brings the same ID back.
    Two turns, each asking for the same ticket under call_0, are two
    intended calls: two tickets, neither answered as the other's replay."""
    tool = idemflow_tool(client, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket)
    who = f"py-reused-call-id-{uuid.uuid4().hex[:8]}"

    def model(state: MessagesState) -> dict[str, Any]:
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage("done")]}
        call = {"name": "create_ticket", "args": {"customer_id": who, "title": "Printer on fire"}, "id": "call_0", "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    graph = agent_graph(model, tool)
    config: dict[str, Any] = {"configurable": {"thread_id": who}}
    answers = []
    for turn in ("first", "second"):
        out = graph.invoke({"messages": [HumanMessage(f"{turn} turn: open a ticket")]}, config)
        answers.append(json.loads(str([m for m in out["messages"] if isinstance(m, ToolMessage)][-1].content)))
    print(f"two turns under call_0: replayed {[a['replayed'] for a in answers]}, {count(db, 'ticket', who)} tickets")
    assert [a["replayed"] for a in answers] == [False, False], answers
    assert count(db, "ticket", who) == 2


class Titled(BaseModel):
    title: str
    #: Where the model names one: the test's customer and this suffix.
    customer_id: str | None = None


def chat_graph(tool: Any, calls: Callable[[str], list[dict[str, Any]]]) -> Any:
    """A chat graph whose scripted model, asked by a human message, writes
    calls(title) (a fork's second run, reworded) under tool-call and
    message IDs new on every run, as a model writes them; after the tools'
    answers, it is done. title is the one the first run wrote."""
    runs = {"n": 0}

    def model(state: MessagesState) -> dict[str, Any]:
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage("done", id=f"ai-{uuid.uuid4().hex}")]}
        runs["n"] += 1
        tool_calls = [{**c, "id": f"call_{uuid.uuid4().hex}", "type": "tool_call"} for c in calls(str(runs["n"]))]
        return {"messages": [AIMessage("", tool_calls=tool_calls, id=f"ai-{uuid.uuid4().hex}")]}

    return agent_graph(model, tool)


def agent_graph(model: Callable[[MessagesState], dict[str, Any]], tool: Any) -> Any:
    """The usual agent loop on an in-memory checkpointer: the model, then
    the tool node while the model asks for calls."""
    return (
        StateGraph(MessagesState)
        .add_node("agent", model)
        .add_node("tools", ToolNode([tool]))
        .add_edge(START, "agent")
        .add_conditional_edges("agent", tools_condition)
        .add_edge("tools", "agent")
        .compile(checkpointer=InMemorySaver())
    )


def before_the_model_step(graph: Any, config: dict[str, Any]) -> dict[str, Any]:
    """The config of the last checkpoint before the model answered the
    last human message: what a chat UI's regenerate forks from."""
    for snap in graph.get_state_history(config):
        if snap.next == ("agent",) and isinstance(snap.values["messages"][-1], HumanMessage):
            return dict(snap.config)
    raise AssertionError("no checkpoint before the model step")


def reworded(n: str) -> list[dict[str, Any]]:
    return [{"name": "create_ticket", "args": {"title": "Printer on fire" if n == "1" else "The printer is smoking, please help"}}]


FORKS = [
    # name, the calls the model writes on its n-th run, the scheme, tickets after the fork, the fork's answers replayed
    ("the same call under new IDs", lambda n: [{"name": "create_ticket", "args": {"title": "Printer on fire"}}], None, 1, [True]),
    ("two identical calls, both written again", lambda n: [{"name": "create_ticket", "args": {"title": "Printer on fire"}}] * 2, None, 2, [True, True]),
    ("a model that rewords the call: the same intent, a replay", reworded, None, 1, [True]),
    (
        "two intents in one turn, both reworded",
        lambda n: [{"name": "create_ticket", "args": {"title": f"Printer ({n})"}}, {"name": "create_ticket", "args": {"title": f"Network ({n})"}}],
        None,
        2,
        [True, True],
    ),
    (
        "another customer in the call is another intent",
        lambda n: [{"name": "create_ticket", "args": {"title": "Printer on fire", "customer_id": "a" if n == "1" else "b"}}],
        None,
        2,
        [False],
    ),
    ("control: lg4 keys the whole arguments", reworded, ARGS_KEY_SCHEME, 2, [False]),
    ("control: lg3 keys the call's IDs", lambda n: [{"name": "create_ticket", "args": {"title": "Printer on fire"}}], LEGACY_KEY_SCHEME, 2, [False]),
]


@pytest.mark.parametrize("name,calls,scheme,tickets,replayed", FORKS, ids=[f[0] for f in FORKS])
def test_a_fork_before_the_model_step_makes_the_same_call_once(
    name: str,
    calls: Callable[[str], list[dict[str, Any]]],
    scheme: str | None,
    tickets: int,
    replayed: list[bool],
    client: idemflow.Client,
    db: psycopg.Connection,
) -> None:
    """A chat UI's regenerate (a fork from the checkpoint before the model
    step, LangGraph's time travel) runs the model again, which writes the
    same call under new tool-call and message IDs, and, at a real model's
    temperature, in other words: the same intended call (the ticket's
    customer, its intent field), one ticket, the fork's answer a replay
    that names what differed. Two calls for one customer in one turn are
    two tickets, before and after the fork; another customer is another
    intent. The controls key the call's whole arguments (lg4) and its IDs
    (lg3)."""
    who = f"py-lg-fork-{uuid.uuid4().hex[:8]}"
    extra = {"key_scheme": scheme} if scheme else {}
    # The model's arguments are the title (and a customer's suffix); the
    # body makes the test's customer of them.
    tool = idemflow_tool(
        client,
        name="create_ticket",
        description="Create a ticket.",
        path="/v1/tickets",
        args_schema=Titled,
        body=lambda a: {**a, "customer_id": f"{who}-{a['customer_id']}" if "customer_id" in a else who},
        **extra,
    )
    graph = chat_graph(tool, calls)
    config: dict[str, Any] = {"configurable": {"thread_id": who}}
    first = graph.invoke({"messages": [HumanMessage("Open a ticket: the printer is on fire.")]}, config)
    n_first = count_like(db, who)
    fork = graph.invoke(None, before_the_model_step(graph, config))
    first_ids = [m.tool_calls[0]["id"] for m in first["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    fork_ids = [m.tool_calls[0]["id"] for m in fork["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    assert first_ids != fork_ids, "the fork's model wrote its calls under new IDs"
    answers = [json.loads(str(m.content)) for m in fork["messages"] if isinstance(m, ToolMessage)]
    answers = answers[len(answers) - len(replayed) :]
    n = count_like(db, who)
    print(
        f"{name}: {n_first} tickets after the first run, {n} after the fork; the fork's answers replayed {[a['replayed'] for a in answers]},"
        f" differed {[a.get('differed') for a in answers]}"
    )
    assert n_first == len(calls("1"))
    assert n == tickets
    assert [a["replayed"] for a in answers] == replayed
    if calls("1") != calls("2") and all(replayed):
        # Told truthfully: a replay of what was made, naming what differed.
        assert all(a["differed"] == ["title"] and "already done" in a["note"] for a in answers), answers
        made = [a["result"]["title"] for a in answers]
        assert made == [c["args"]["title"] for c in calls("1")], made


def test_the_same_call_in_a_later_turn_is_another_intent(client: idemflow.Client, db: psycopg.Connection) -> None:
    """The user asks twice, in two turns, and the model writes the same
    call both times: two human messages, two intended calls, two tickets."""
    who = f"py-lg-turns-{uuid.uuid4().hex[:8]}"
    tool = idemflow_tool(
        client, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Titled, body=lambda a: {**a, "customer_id": who}
    )
    graph = chat_graph(tool, lambda n: [{"name": "create_ticket", "args": {"title": "Printer on fire"}}])
    config: dict[str, Any] = {"configurable": {"thread_id": who}}
    for _ in range(2):
        graph.invoke({"messages": [HumanMessage("Open a ticket: the printer is on fire.")]}, config)
    assert count(db, "ticket", who) == 2


class _ReadmeModel:
    """A chat model for the README's snippet: asks for the ticket until a
    tool's answer is in the messages, then answers; bind_tools as a chat
    model's, a no-op here."""

    def __init__(self, customer: str, *, model_key: bool = False) -> None:
        self.customer = customer
        # model_key: the call carries an idempotency_key the model wrote (an MCP tool's).
        self.model_key = model_key

    def bind_tools(self, tools: Any) -> _ReadmeModel:
        return self

    def invoke(self, messages: list[Any]) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage("The ticket is open.", id=f"ai-{uuid.uuid4().hex}")
        args: dict[str, Any] = {"customer_id": self.customer, "title": "Printer on fire"}
        if self.model_key:
            args = {"idempotency_key": str(uuid.uuid4()), **args}
        call = {"name": "create_ticket", "args": args, "id": f"call_{uuid.uuid4().hex}", "type": "tool_call"}
        return AIMessage("", tool_calls=[call], id=f"ai-{uuid.uuid4().hex}")

    async def ainvoke(self, messages: list[Any]) -> AIMessage:
        return self.invoke(messages)


def test_the_readme_snippet_runs(url: str, token: str, db: psycopg.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's snippet, as written, with a scripted model in place of
    ChatOpenAI (its import dropped: the only change), on the test's
    PostgreSQL: it opens one ticket, and its answer reaches the model."""

    snippet = docs_block("# LangGraph (Python)\n")
    assert 'ChatOpenAI(model="gpt-4.1")' in snippet and "from langchain_openai import ChatOpenAI\n" in snippet
    who = f"py-lg-readme-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("IDEMFLOW_URL", url)
    monkeypatch.setenv("IDEMFLOW_TOKEN", token)
    code = snippet.replace("from langchain_openai import ChatOpenAI\n", "").replace('ChatOpenAI(model="gpt-4.1")', "MODEL").replace('"ticket-42"', repr(who))
    exec(compile(code, "README.md", "exec"), {"MODEL": _ReadmeModel(who), "__name__": "readme"})
    assert count(db, "ticket", who) == 1


def test_a_partition_behind_mcp_over_http_pauses_the_run_and_reaches_no_model(url: str, db: psycopg.Connection) -> None:
    """#77: idemflow mcp --http whose gateway is partitioned once the model
    asked for its call, and which, with no grace, answers every request it
    cannot verify with a 503 (--verify-ttl 1s --verify-grace 0). With
    ToolNode(handle_tool_errors=True), which hands any tool error to the
    model: mcp_tools waits through the MCP errors and pauses the run
    (interrupt) past its deadline, with no tool message; resumed on a new
    connection once the partition ended, the call's answer: one ticket."""
    proxy = Proxy(url, "answer-lost", path="/never")
    who = f"py-lg-mcp-http-partition-{uuid.uuid4().hex[:8]}"
    saver = InMemorySaver()
    config: RunnableConfig = {"configurable": {"thread_id": who}}

    async def graph_on(session: Any, deadline: float) -> Any:
        tools = await mcp_tools(session, names=["create_ticket"], deadline=deadline)

        async def model(state: MessagesState) -> dict[str, Any]:
            answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
            if answers:
                return {"messages": [AIMessage(f"done: {answers[-1].content}")]}
            if not proxy.partitioned:
                proxy.partitioned = True
                await asyncio.sleep(1.5)  # past --verify-ttl
            args = {"idempotency_key": str(uuid.uuid4()), "customer_id": who, "title": "Printer on fire"}
            return {"messages": [AIMessage("", tool_calls=[{"name": "create_ticket", "args": args, "id": f"call_{uuid.uuid4().hex}", "type": "tool_call"}])]}

        return (
            StateGraph(MessagesState)
            .add_node("agent", model)
            .add_node("tools", ToolNode(tools, handle_tool_errors=True))
            .add_edge(START, "agent")
            .add_conditional_edges("agent", tools_condition)
            .add_edge("tools", "agent")
            .compile(checkpointer=saver)
        )

    async def main(mcp_url: str) -> tuple[Any, Any]:
        async with over_http(mcp_url) as session:
            graph = await graph_on(session, 4)
            paused = await graph.ainvoke({"messages": [HumanMessage("Open a ticket.", id=f"msg-{who}")]}, config)
        proxy.partitioned = False
        async with over_http(mcp_url) as session:
            graph = await graph_on(session, 30)
            done = await graph.ainvoke(Command(resume=True), config)
        return paused, done

    try:
        with mcp_http(proxy.url, "--verify-ttl", "1s", "--verify-grace", "0", "--task-wait", "1s") as mcp_url:
            paused, done = asyncio.run(main(mcp_url))
    finally:
        proxy.close()
    interrupts = paused.get("__interrupt__")
    read = [m.content for m in paused["messages"] if isinstance(m, ToolMessage)]
    n = count(db, "ticket", who)
    print(f"a partition behind MCP over HTTP (LangGraph, handle_tool_errors=True): paused {bool(interrupts)}, the model read {read}; resumed, {n} ticket")
    assert interrupts and interrupts[0].value["idemflow"] == "pending", paused
    assert read == [], f"the model was handed {read}"
    assert json.loads(next(m.content for m in done["messages"] if isinstance(m, ToolMessage)))["http_status"] == 201, done
    assert n == 1


def test_a_pending_answer_over_mcp_pauses_the_run_and_never_reaches_the_model() -> None:
    """slow_refund's service takes 4 s; mcp_tools' deadline is 1.5 s. The
    run pauses (interrupt) with nothing handed to the model, and each
    resume waits on the call's task under the same key, until the answer:
    the first call's, a replay. Within a longer deadline the call gets its
    own answer."""

    async def run(session: Any, thread: str, deadline: float) -> tuple[Any, Any, Any]:
        tools = await mcp_tools(session, names=["slow_refund"], deadline=deadline)

        def model(state: MessagesState) -> dict[str, Any]:
            answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
            if answers:
                return {"messages": [AIMessage(f"done: {answers[-1].content}")]}
            args = {"idempotency_key": str(uuid.uuid4()), "payment_id": f"p-{thread}", "amount_cents": 100}
            return {"messages": [AIMessage("", tool_calls=[{"name": "slow_refund", "args": args, "id": f"call_{uuid.uuid4().hex}", "type": "tool_call"}])]}

        graph = (
            StateGraph(MessagesState)
            .add_node("agent", model)
            .add_node("tools", ToolNode(tools))
            .add_edge(START, "agent")
            .add_conditional_edges("agent", tools_condition)
            .add_edge("tools", "agent")
            .compile(checkpointer=InMemorySaver())
        )
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        out = await graph.ainvoke({"messages": [HumanMessage("Refund 1 euro.", id=f"msg-{thread}")]}, config)
        return graph, config, out

    def answer(out: Any) -> dict[str, Any]:
        return json.loads(next(m.content for m in out["messages"] if isinstance(m, ToolMessage)))

    async def main() -> None:
        async with over_stdio() as session:
            who = f"py-lg-mcp-slow-{uuid.uuid4().hex[:8]}"
            start = time.monotonic()
            _, _, first = await run(session, who, 30)
            took = time.monotonic() - start
            assert answer(first)["replayed"] is False, first
            assert took > 3, f"answered after {took:.1f} s, before the service did"

            start = time.monotonic()
            graph, config, out = await run(session, who + "-p", 1.5)
            bound = time.monotonic() - start
            paused = out.get("__interrupt__")
            assert paused and paused[0].value["idemflow"] == "pending", out
            assert not any(isinstance(m, ToolMessage) for m in out["messages"]), "a tool message reached the model"
            assert bound < 3.5, f"a 1.5 s deadline paused the run after {bound:.1f} s"
            resumes = 1
            out = await graph.ainvoke(Command(resume=True), config)
            while out.get("__interrupt__") and resumes < 10:
                resumes += 1
                out = await graph.ainvoke(Command(resume=True), config)
            assert answer(out)["replayed"] is True, out
            print(
                f"LangGraph mcp_tools: a 4 s call waited on its task ({took:.1f} s, replayed=False); a 1.5 s deadline paused the run after"
                f" {bound:.1f} s with no tool message; {resumes} resumes later, replayed=True"
            )

    asyncio.run(main())


def test_the_docs_mcp_tools_run(url: str, token: str, db: psycopg.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agents/mcp.md's LangGraph snippet, as written (session and llm
    the function's parameters, the thread the test's), after the same turn
    made through the native idemflow_tool: the call through MCP, with a
    model-written key of its own, has the native tool's key, so it is that
    call's replay, one ticket."""
    block = docs_block("**LangGraph** (`idemflow.langgraph.mcp_tools`).")
    who = f"py-lg-docs-mcp-{uuid.uuid4().hex[:8]}"
    assert '"ticket-42"' in block
    scope: dict[str, Any] = {}
    exec("async def snippet(session, llm):\n" + textwrap.indent(block.replace('"ticket-42"', repr(who)) + "return out\n", "    "), scope)
    monkeypatch.setenv("IDEMFLOW_URL", url)
    monkeypatch.setenv("IDEMFLOW_TOKEN", token)

    async def scenario() -> tuple[str, str]:
        async with idemflow.AsyncClient(url, token) as c:
            native = idemflow_tool(c, name="create_ticket", description="Create a support ticket.", path="/v1/tickets", args_schema=Ticket)
            model = _ReadmeModel(who)
            graph = (
                StateGraph(MessagesState)
                .add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
                .add_node("tools", ToolNode([native]))
                .add_edge(START, "agent")
                .add_conditional_edges("agent", tools_condition)
                .add_edge("tools", "agent")
                .compile(checkpointer=InMemorySaver())
            )
            message = {"role": "user", "content": f"My printer is on fire. I am customer {who}.", "id": "msg-1"}
            first = await graph.ainvoke({"messages": [message]}, {"configurable": {"thread_id": who}})
        async with over_stdio() as session:
            again = await scope["snippet"](session, _ReadmeModel(who, model_key=True))
        tool_text = [str(next(m.content for m in o["messages"] if isinstance(m, ToolMessage))) for o in (first, again)]
        return tool_text[0], tool_text[1]

    first, again = (json.loads(t) for t in asyncio.run(scenario()))
    assert [first["replayed"], again["replayed"]] == [False, True], (first, again)
    assert again["result"] == first["result"]
    assert count(db, "ticket", who) == 1
