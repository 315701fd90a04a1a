"""An OpenAI Agents SDK agent on its own (no Temporal) for the kill tests
(test_openai_agents.py): a real Agent and Runner, a deterministic fake
model, and one tool that creates a ticket through idemflow. Run again with
the same --thread, it resumes from the RunState it saved.

    python -m tests.agents.openai_agent --thread T --state FILE [--tools idemflow|naive] [--unsafe] [--lost] [--key-scheme oa3|oa2|oa1] [--via mcp]

with IDEMFLOW_URL and IDEMFLOW_TOKEN set (and IDEMFLOW_BIN for --via mcp).

--via mcp reaches the tool through idemflow's MCP server (idemflow mcp
over stdio, the SDK's MCPServerStdio) instead of a function tool: the
model writes an idempotency_key argument, new each time it writes the
call. With --tools idemflow the server is wrapped (durable_mcp_server),
so the call's key is the native tool's; --tools naive leaves it as the
SDK makes it, the model's key deciding.

The durable way (default) is run_durably: the tool needs approval, and
the RunState is saved, with the call's IDs, before the call runs.
--unsafe is the setting the README warns about: no approval, nothing
saved, so a run killed mid call starts again and the model writes the
call again. --tools naive makes the control: a fresh key on every call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, RunConfig, Runner, RunResult
from agents.items import ModelResponse
from agents.mcp import MCPServerStdio
from agents.mcp import create_static_tool_filter as create_filter
from agents.models.interface import Model
from agents.tool_context import ToolContext
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic import BaseModel

import idemflow
from idemflow.openai_agents import durable_mcp_server, idemflow_function_tool, run_durably


class Ticket(BaseModel):
    customer_id: str
    title: str


class ScriptedModel(Model):
    """Asks for one ticket until a tool's output is in its input, then
    answers; after a tool error it asks again. Each call it writes has new
    IDs (a function-call item ID and a call ID), as a real model's: only a
    saved RunState keeps them. With call_id set, every call reuses that
    call ID, as a provider that numbers calls per response does; item_id
    set to the SDK's placeholder is a Chat Completions model's item."""

    def __init__(self, customer: str, call_id: str | None = None, item_id: str | None = None, model_key: bool = False) -> None:
        self.customer = customer
        #: Whether the call carries an idempotency_key the model wrote (an
        #: MCP tool of idemflow's takes one): new each time, as a model's.
        self.model_key = model_key
        self.call_id = call_id
        self.item_id = item_id
        #: Every tool output the model was handed, as it read them.
        self.outputs: list[str] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        items = input if isinstance(input, list) else []
        # The turn: what follows the last user message.
        users = [n for n, i in enumerate(items) if isinstance(i, dict) and i.get("role") == "user"]
        items = items[users[-1] + 1 :] if users else items
        outputs = [str(i.get("output")) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        self.outputs = outputs
        # After an answer, done; after an error, ask again (a new call, as a
        # model writes one), up to twice.
        if outputs and (not outputs[-1].startswith("An error occurred") or len(outputs) >= 2):
            text = ResponseOutputText(type="output_text", text="The ticket is open.", annotations=[])
            out: Any = ResponseOutputMessage(id=f"msg_{uuid.uuid4().hex}", type="message", role="assistant", status="completed", content=[text])
        else:
            out = ResponseFunctionToolCall(
                type="function_call",
                id=self.item_id or f"fc_{uuid.uuid4().hex}",
                call_id=self.call_id or f"call_{uuid.uuid4().hex}",
                name="create_ticket",
                arguments=json.dumps(
                    {**({"idempotency_key": str(uuid.uuid4())} if self.model_key else {}), "customer_id": self.customer, "title": "Printer on fire"}
                ),
            )
        return ModelResponse(output=[out], usage=Usage(), response_id=f"resp_{uuid.uuid4().hex}")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def naive_tool(client: idemflow.AsyncClient, needs_approval: bool) -> FunctionTool:
    async def invoke(ctx: ToolContext[Any], raw: str) -> str:
        # The bug of the incident: a key made at call time, new on every call.
        r = await client.do(idemflow.Intent(str(uuid.uuid4()), "/v1/tickets", json.loads(raw)))
        return json.dumps({"http_status": r.status, "replayed": r.replayed, "result": r.body})

    return FunctionTool(
        name="create_ticket",
        description="Create a support ticket.",
        params_json_schema=Ticket.model_json_schema(),
        on_invoke_tool=invoke,
        strict_json_schema=False,
        needs_approval=needs_approval,
    )


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thread", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--tools", default="idemflow", choices=["idemflow", "naive"])
    ap.add_argument("--unsafe", action="store_true")
    ap.add_argument("--lost", action="store_true", help="the saved RunState is gone: the app sends the turn again")
    ap.add_argument("--key-scheme", default="oa3", choices=["oa3", "oa2", "oa1"])
    ap.add_argument("--via", default="function", choices=["function", "mcp"])
    a = ap.parse_args()
    if a.lost:
        Path(a.state).unlink(missing_ok=True)
    # The client's attempts time out fast, so that a dropped answer is
    # retried at once (the kill comes first).
    async with idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5) as c:
        if a.via == "mcp":
            await run_over_mcp(a)
            return
        if a.tools == "naive":
            tool = naive_tool(c, needs_approval=not a.unsafe)
        else:
            tool = idemflow_function_tool(
                c,
                name="create_ticket",
                description="Create a support ticket.",
                path="/v1/tickets",
                args_schema=Ticket,
                needs_approval=not a.unsafe,
                key_scheme=a.key_scheme,
            )
        agent = Agent(name="support", instructions="Open a ticket for the customer.", tools=[tool], model=ScriptedModel(a.thread))
        config = RunConfig(group_id=a.thread, tracing_disabled=True)

        if a.unsafe:
            print(f"starting {a.thread} (nothing saved)", flush=True)
            result = await Runner.run(agent, "My printer is on fire.", run_config=config)
        else:
            load, save = file_state(a.state, a.thread)
            result = await run_durably(agent, "My printer is on fire.", run_config=config, load=load, save=save)
        report(result)


def report(result: RunResult) -> None:
    for item in result.new_items:
        if item.type == "tool_call_output_item":
            # An MCP tool's output is its content: the text, JSON.
            out = item.output.get("text") if isinstance(item.output, dict) else item.output
            print(f"tool create_ticket {out}", flush=True)
    print(f"DONE {result.final_output}", flush=True)


def file_state(path: str, thread: str) -> tuple[Callable[[], Awaitable[str | None]], Callable[[str], Awaitable[None]]]:
    """load and save of a run's RunState in a file, written durably."""

    async def load() -> str | None:
        try:
            with open(path) as f:
                print(f"resuming {thread} from its saved RunState", flush=True)
                return f.read()
        except FileNotFoundError:
            print(f"starting {thread}", flush=True)
            return None

    async def save(state: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(state)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        print("saved", flush=True)

    return load, save


async def run_over_mcp(a: argparse.Namespace) -> None:
    """The same agent, its tool idemflow's create_ticket over MCP."""
    env = {"IDEMFLOW_URL": os.environ["IDEMFLOW_URL"], "IDEMFLOW_TOKEN": os.environ["IDEMFLOW_TOKEN"], "PATH": os.environ.get("PATH", "")}
    server = MCPServerStdio(
        params={"command": os.environ["IDEMFLOW_BIN"], "args": ["mcp"], "env": env},
        name="idemflow",
        cache_tools_list=True,
        # Approval before every call, so that run_durably saves the call's
        # IDs before it runs.
        require_approval="always",
        client_session_timeout_seconds=30,
        tool_filter=create_filter(allowed_tool_names=["create_ticket"]),
    )
    if a.tools == "idemflow":
        durable_mcp_server(server, deadline=60)
    async with server:
        model = ScriptedModel(a.thread, model_key=True)
        agent = Agent(name="support", instructions="Open a ticket for the customer.", mcp_servers=[server], model=model)
        load, save = file_state(a.state, a.thread)
        config = RunConfig(group_id=a.thread, tracing_disabled=True)
        report(await run_durably(agent, "My printer is on fire.", run_config=config, load=load, save=save))


if __name__ == "__main__":
    asyncio.run(main())
