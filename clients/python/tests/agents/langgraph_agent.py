"""A LangGraph agent for the kill tests (test_langgraph_kills.py): a graph
whose deterministic fake chat model calls a tool to create a ticket, then
one to create an order, over a PostgreSQL checkpointer. Run again with the
same --thread, it resumes from its checkpoint.

    python -m tests.agents.langgraph_agent --thread T [--tools idemflow|naive] [--review]
        [--durability sync|exit] [--message-id ID] [--key-scheme lg5|lg4|lg3] [--via mcp]

with IDEMFLOW_URL, IDEMFLOW_TOKEN and DATABASE_URL set (and IDEMFLOW_BIN
for --via mcp).

--tools naive makes the control: tools that make a fresh key on every call.
--review: a resumed run first passes a human review step, LangGraph's
usual one: update_state writes the pending model message back, unchanged
(a new checkpoint, and a new task ID for the tool node).
--durability exit: LangGraph saves the run's checkpoints only when it
ends, so a kill mid call leaves nothing saved, and the app sends the
turn's message again, with its ID (--message-id), as a chat UI does.
IDEMFLOW_AGENT_PAUSE stops the run where a test kills it: "model" inside
the model step that asks for the order, "between" in the tool node after
the ticket's call returned, before its result was checkpointed.
--via mcp reaches create_ticket through idemflow's MCP server (idemflow
mcp over stdio, the mcp package's ClientSession), the graph run with
asyncio: the model writes an idempotency_key of its own, new each time it
writes the call; --tools idemflow makes the tool mcp_tools', --tools naive
leaves the key to the model, as langchain-mcp-adapters' tools do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any

import httpx
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from pydantic import BaseModel

import idemflow
from idemflow.langgraph import idemflow_tool, mcp_tools
from idemflow.mcp import result_text


class Ticket(BaseModel):
    customer_id: str
    title: str


class Item(BaseModel):
    sku: str
    quantity: int


class Order(BaseModel):
    customer_id: str
    items: list[Item]


def pause(point: str) -> None:
    if os.environ.get("IDEMFLOW_AGENT_PAUSE") == point:
        print(f"PAUSED {point}", flush=True)
        time.sleep(600)


def naive_tool(name: str, path: str, schema: type[BaseModel], url: str, token: str) -> BaseTool:
    def call(**args: Any) -> str:
        # The bug of the incident: a key made at call time, new on every call.
        r = httpx.post(
            url + path,
            json=schema(**args).model_dump(),
            headers={"Authorization": f"Bearer {token}", "Idempotency-Key": str(uuid.uuid4()), "Prefer": "wait=5"},
            timeout=30,
        )
        return json.dumps({"http_status": r.status_code, "replayed": r.headers.get("Idempotent-Replayed") == "true", "result": r.json()})

    return StructuredTool.from_function(func=call, name=name, description=name, args_schema=schema)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thread", required=True)
    ap.add_argument("--tools", default="idemflow", choices=["idemflow", "naive"])
    ap.add_argument("--review", action="store_true")
    ap.add_argument("--durability", default="sync", choices=["sync", "exit"])
    ap.add_argument("--message-id", default=None)
    ap.add_argument("--key-scheme", default="lg5", choices=["lg5", "lg4", "lg3"])
    ap.add_argument("--via", default="http", choices=["http", "mcp"])
    a = ap.parse_args()
    if a.via == "mcp":
        asyncio.run(over_mcp(a))
        return
    url, token, thread = os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], a.thread

    # The client's attempts time out fast, so that a dropped answer is
    # retried at once (the kill comes first).
    client = idemflow.Client(url, token, attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5)
    if a.tools == "naive":
        tools = [
            naive_tool("create_ticket", "/v1/tickets", Ticket, url, token),
            naive_tool("create_order", "/v1/orders", Order, url, token),
        ]
    else:
        tools = [
            idemflow_tool(
                client, name="create_ticket", description="Create a support ticket.", path="/v1/tickets", args_schema=Ticket, key_scheme=a.key_scheme
            ),
            idemflow_tool(client, name="create_order", description="Create a purchase order.", path="/v1/orders", args_schema=Order, key_scheme=a.key_scheme),
        ]

    agent = scripted_model(thread, model_key=False)
    tool_node = ToolNode(tools)

    def run_tools(state: MessagesState, config: RunnableConfig) -> Any:
        out = tool_node.invoke(state, config)
        if any(isinstance(m, ToolMessage) and m.name == "create_ticket" for m in out["messages"]):
            pause("between")
        return out

    with PostgresSaver.from_conn_string(os.environ["DATABASE_URL"]) as checkpointer:
        checkpointer.setup()
        graph = (
            StateGraph(MessagesState)
            .add_node("agent", agent)
            .add_node("tools", run_tools)
            .add_edge(START, "agent")
            .add_conditional_edges("agent", tools_condition, ["tools", END])
            .add_edge("tools", "agent")
            .compile(checkpointer=checkpointer)
        )
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        state = graph.get_state(config)
        resuming = bool(state.next)
        print(f"resuming {thread} at {','.join(state.next)}" if resuming else f"starting {thread}", flush=True)
        if resuming and a.review:
            pending = state.values["messages"][-1]
            graph.update_state(config, {"messages": [pending]})
            after = graph.get_state(config)
            before_id = state.config["configurable"]["checkpoint_id"]
            print(f"reviewed {thread}: checkpoint {before_id} -> {after.config['configurable']['checkpoint_id']}, next {','.join(after.next)}", flush=True)
        # durability "sync": the model's message, with its tool call's ID,
        # is checkpointed before the tool runs. With "async" a crash can
        # lose that step, and the model, asked again, writes a new ID: a
        # new key.
        ask = HumanMessage("Open a ticket, then order a mouse.", id=a.message_id)
        out = graph.invoke(None if resuming else {"messages": [ask]}, config, durability=a.durability)
        for m in out["messages"]:
            if isinstance(m, ToolMessage):
                print(f"tool {m.name} {m.content}", flush=True)
    client.close()
    print("DONE", flush=True)


def scripted_model(thread: str, *, model_key: bool) -> Any:
    """The script: the model's next message follows from the tool results
    it has seen, so a resumed run asks for the next step, never the last
    again. Each tool call's ID is new when the model writes it: only the
    checkpoint keeps it. model_key: the ticket's call carries an
    idempotency_key the model wrote (an MCP tool's), new each time."""

    def agent(state: MessagesState) -> dict[str, Any]:
        done = sum(1 for m in state["messages"] if isinstance(m, ToolMessage))
        ticket: dict[str, Any] = {"customer_id": thread, "title": "Printer on fire"}
        if model_key:
            ticket = {"idempotency_key": str(uuid.uuid4()), **ticket}
        steps = [
            {"name": "create_ticket", "args": ticket},
            {"name": "create_order", "args": {"customer_id": thread, "items": [{"sku": "SKU-MOUSE", "quantity": 1}]}},
        ]
        if done == 1:
            pause("model")
        if done < len(steps):
            msg = AIMessage("", tool_calls=[{**steps[done], "id": f"call_{uuid.uuid4().hex}", "type": "tool_call"}])
        else:
            msg = AIMessage("Both are done.")
        model = GenericFakeChatModel(messages=iter([msg]))
        return {"messages": [model.invoke(state["messages"])]}

    return agent


def naive_mcp_tool(session: ClientSession) -> BaseTool:
    """create_ticket through idemflow's MCP server as langchain-mcp-adapters'
    tools call it: no _meta, the model's key decides."""

    async def call(**args: Any) -> str:
        return result_text(await session.call_tool("create_ticket", args))

    schema = {"type": "object", "properties": {"idempotency_key": {"type": "string"}, "customer_id": {"type": "string"}, "title": {"type": "string"}}}
    return StructuredTool.from_function(coroutine=call, name="create_ticket", description="Create a support ticket.", args_schema=schema)


async def over_mcp(a: argparse.Namespace) -> None:
    """The same agent, create_ticket through idemflow mcp, run with asyncio
    (the MCP tools are async)."""
    url, token, thread = os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], a.thread
    client = idemflow.AsyncClient(url, token, attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5)
    env = {**get_default_environment(), "IDEMFLOW_URL": url, "IDEMFLOW_TOKEN": token}
    params = StdioServerParameters(command=os.environ["IDEMFLOW_BIN"], args=["mcp"], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        ticket = naive_mcp_tool(session) if a.tools == "naive" else (await mcp_tools(session, names=["create_ticket"]))[0]
        order = idemflow_tool(client, name="create_order", description="Create a purchase order.", path="/v1/orders", args_schema=Order)
        async with AsyncPostgresSaver.from_conn_string(os.environ["DATABASE_URL"]) as checkpointer:
            await checkpointer.setup()
            graph = (
                StateGraph(MessagesState)
                .add_node("agent", scripted_model(thread, model_key=True))
                .add_node("tools", ToolNode([ticket, order]))
                .add_edge(START, "agent")
                .add_conditional_edges("agent", tools_condition, ["tools", END])
                .add_edge("tools", "agent")
                .compile(checkpointer=checkpointer)
            )
            config: RunnableConfig = {"configurable": {"thread_id": thread}}
            state = await graph.aget_state(config)
            resuming = bool(state.next)
            print(f"resuming {thread} at {','.join(state.next)}" if resuming else f"starting {thread}", flush=True)
            ask = HumanMessage("Open a ticket, then order a mouse.", id=a.message_id)
            out = await graph.ainvoke(None if resuming else {"messages": [ask]}, config, durability=a.durability)
            for m in out["messages"]:
                if isinstance(m, ToolMessage):
                    print(f"tool {m.name} {m.content}", flush=True)
    await client.aclose()
    print("DONE", flush=True)


if __name__ == "__main__":
    sys.exit(main())
