"""A Pydantic AI agent for the kill tests (test_pydantic_ai.py): a real
Agent, a deterministic model, and one tool that creates a ticket through
idemflow. Run again with the same --thread, it resumes from the history
it saved.

    python -m tests.agents.pydantic_agent --thread T --state FILE [--tools idemflow|naive] [--unsafe] [--key-scheme pa3|pa2|pa1] [--via mcp]

with IDEMFLOW_URL and IDEMFLOW_TOKEN set (and IDEMFLOW_BIN for --via mcp).

--via mcp reaches the tool through idemflow's MCP server (Pydantic AI's
MCPToolset over stdio, idemflow mcp): the model writes an idempotency_key
of its own, new each time it writes the call; --tools idemflow wraps the
toolset (durable_mcp_toolset), --tools naive leaves the key to the model
(each call approved first all the same).

The durable way (default) is run_durably: the tool stops the run for
approval, and the history is saved, with the call's ID, before the call
runs. --unsafe: no approval, nothing saved, so a run killed mid call
starts again and the model writes the call again, under a new ID: the
same intended call (pa3), or a new key under pa1 (--key-scheme pa1).
--tools naive makes the control: a fresh key on every
call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from fastmcp.client.transports import StdioTransport
from pydantic import BaseModel
from pydantic_ai import Agent, ApprovalRequired, DeferredToolRequests, RunContext, Tool
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ERROR_OUTCOMES, ModelMessage, ModelRequest, ModelResponse, RetryPromptPart, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets.abstract import AbstractToolset

import idemflow
from idemflow.pydantic_ai import durable_mcp_toolset, idemflow_tool, run_durably


class Ticket(BaseModel):
    customer_id: str
    title: str


class ScriptedModel(FunctionModel):
    """Asks for one ticket until a tool's answer is in its input, then
    answers; after a tool error it asks again (a new call, as a model
    writes one), up to twice. Each call it writes has a new ID, as a real model's: only a
    saved history keeps it. With call_id set, every call reuses that ID,
    as a provider that numbers calls per response does."""

    def __init__(self, customer: str, call_id: str | None = None, model_key: bool = False) -> None:
        self.customer = customer
        self.call_id = call_id
        #: The call carries an idempotency_key the model wrote (an MCP tool
        #: of idemflow's takes one), new each time it writes the call.
        self.model_key = model_key
        #: Every tool answer or error the model was handed, as it read them.
        self.outputs: list[str] = []
        super().__init__(self.respond)

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        parts = last.parts if isinstance(last, ModelRequest) else []
        answered = False
        for p in parts:
            # A tool's error reaches the model as a retry prompt, or (from
            # Pydantic AI 2) as a return whose outcome is an error.
            if isinstance(p, RetryPromptPart) or (isinstance(p, ToolReturnPart) and p.outcome in ERROR_OUTCOMES):
                self.outputs.append(f"error: {p.model_response() if isinstance(p, RetryPromptPart) else p.content}")
            elif isinstance(p, ToolReturnPart):
                self.outputs.append(str(p.content))
                answered = True
        if answered or len(self.outputs) >= 2:
            return ModelResponse(parts=[TextPart("The ticket is open.")])
        args = {**({"idempotency_key": str(uuid.uuid4())} if self.model_key else {}), "customer_id": self.customer, "title": "Printer on fire"}
        call = ToolCallPart("create_ticket", args, tool_call_id=self.call_id or f"call_{uuid.uuid4().hex}")
        return ModelResponse(parts=[call])


def naive_tool(client: idemflow.AsyncClient, requires_approval: bool) -> Tool[Any]:
    async def create_ticket(ctx: RunContext[Any], customer_id: str, title: str) -> str:
        if requires_approval and not ctx.tool_call_approved:
            raise ApprovalRequired()
        # The bug of the incident: a key made at call time, new on every call.
        r = await client.do(idemflow.Intent(str(uuid.uuid4()), "/v1/tickets", {"customer_id": customer_id, "title": title}))
        return json.dumps({"http_status": r.status, "replayed": r.replayed, "result": r.body})

    return Tool(create_ticket, takes_ctx=True)


def ticket_tool(client: idemflow.AsyncClient, **kw: Any) -> Tool[Any]:
    return idemflow_tool(client, name="create_ticket", description="Create a support ticket.", path="/v1/tickets", args_schema=Ticket, **kw)


def agent(model: ScriptedModel, tool: Tool[Any] | None = None, toolset: AbstractToolset[Any] | None = None) -> Agent[None, str | DeferredToolRequests]:
    """The support agent, with tool, or toolset (MCP's)."""
    return Agent(
        model,
        output_type=[str, DeferredToolRequests],
        tools=[tool] if tool else [],
        toolsets=[toolset] if toolset else [],
        instructions="Open a ticket for the customer.",
    )


def mcp_toolset(url: str, token: str, *flags: str) -> MCPToolset[Any]:
    """Pydantic AI's MCPToolset on idemflow mcp over stdio, at url, with
    flags (--call-wait, ...)."""
    env = {"IDEMFLOW_URL": url, "IDEMFLOW_TOKEN": token, "PATH": os.environ.get("PATH", "")}
    return MCPToolset(StdioTransport(command=os.environ["IDEMFLOW_BIN"], args=["mcp", *flags], env=env))


def file_store(path: str) -> tuple[Any, Any]:
    """load and save of a run's state in one file, saved durably (fsync,
    then an atomic rename) before save returns."""

    async def load() -> bytes | None:
        try:
            with open(path, "rb") as f:
                print("resuming from the saved history", flush=True)
                return f.read()
        except FileNotFoundError:
            print("starting", flush=True)
            return None

    async def save(state: bytes) -> None:
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(state)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        print("saved", flush=True)

    return load, save


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thread", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--tools", default="idemflow", choices=["idemflow", "naive"])
    ap.add_argument("--unsafe", action="store_true")
    ap.add_argument("--key-scheme", default="pa3", choices=["pa3", "pa2", "pa1"])
    ap.add_argument("--via", default="function", choices=["function", "mcp"])
    ap.add_argument("--lost", action="store_true", help="the saved history is gone: the app sends the turn again")
    a = ap.parse_args()
    if a.lost:
        Path(a.state).unlink(missing_ok=True)
    # The client's attempts time out fast, so that a dropped answer is
    # retried at once (the kill comes first).
    async with idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5) as c:
        if a.via == "mcp":
            toolset = mcp_toolset(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"])
            wrapped = durable_mcp_toolset(toolset) if a.tools == "idemflow" else toolset.approval_required()
            support = agent(ScriptedModel(a.thread, model_key=True), toolset=wrapped)
        else:
            tool = naive_tool(c, not a.unsafe) if a.tools == "naive" else ticket_tool(c, requires_approval=False if a.unsafe else None, key_scheme=a.key_scheme)
            support = agent(ScriptedModel(a.thread), tool)
        if a.unsafe:
            print("starting (nothing saved)", flush=True)
            result = await support.run("My printer is on fire.", conversation_id=a.thread)
        else:
            load, save = file_store(a.state)
            result = await run_durably(support, "My printer is on fire.", load=load, save=save, conversation_id=a.thread)
        for m in result.new_messages():
            for p in m.parts:
                if isinstance(p, ToolReturnPart):
                    # An MCP tool's answer is its structured content, a dict.
                    content = json.dumps(p.content) if isinstance(p.content, dict) else p.content
                    print(f"tool create_ticket {content}", flush=True)
        print(f"DONE {result.output}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
