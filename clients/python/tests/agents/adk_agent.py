"""A Google ADK agent for the kill tests (test_adk.py): a real LlmAgent,
App and Runner on ADK's SQLite session service, a deterministic scripted
model, and one tool that creates a ticket through idemflow. Run again
with the same --thread and --state, it resumes the invocation it was
killed in.

    python -m tests.agents.adk_agent --thread T --state FILE [--tools idemflow|naive] [--unsafe] [--key-scheme ad3|ad2|ad1] [--via mcp]

with IDEMFLOW_URL and IDEMFLOW_TOKEN set (and IDEMFLOW_BIN for --via mcp).

--via mcp reaches the tool through idemflow's MCP server (ADK's
McpToolset over stdio, idemflow mcp): the model writes an idempotency_key
of its own, new each time it writes the call; --tools idemflow wraps the
toolset (durable_mcp_toolset), --tools naive leaves the key to the model.

The durable way (default) is a resumable App and run_durably. --unsafe
is an App that is not resumable, whose rerun sends the user's message
again (a new invocation, where the model writes the call again under a
new ID: the same intended call under ad2, a new key under ad1, which
--key-scheme ad1 keeps). --tools naive makes the control: a fresh key on
every call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.base_toolset import BaseToolset
from google.adk.tools.mcp_tool import McpToolset, StdioConnectionParams
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from mcp import StdioServerParameters
from pydantic import BaseModel

import idemflow
from idemflow.adk import IdemflowTool, durable_mcp_toolset, run_durably


class Ticket(BaseModel):
    customer_id: str
    title: str


class ScriptedModel(BaseLlm):
    """Asks for one ticket until a tool's response is the last thing in
    its request, then answers. Each call it writes has a new ID, as a
    real model's (ADK assigns one where a model gives none); with call_id
    set, every call reuses that ID, as a provider that numbers calls per
    response does. calls: how many identical calls a response asks for;
    reword: the title is new on every response."""

    model: str = "scripted"
    customer: str = ""
    call_id: str | None = None
    calls: int = 1
    reword: bool = False
    #: The call carries an idempotency_key the model wrote (an MCP tool of
    #: idemflow's takes one), new each time it writes the call.
    model_key: bool = False
    runs: int = 0

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1] if llm_request.contents else None
        if last is not None and any(p.function_response for p in last.parts or []):
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="The ticket is open.")]))
            return
        self.runs += 1
        title = f"Printer on fire ({self.runs})" if self.reword else "Printer on fire"
        calls = [
            types.FunctionCall(
                id=self.call_id or f"call_{uuid.uuid4().hex}",
                name="create_ticket",
                args={**({"idempotency_key": str(uuid.uuid4())} if self.model_key else {}), "customer_id": self.customer, "title": title},
            )
            for _ in range(self.calls)
        ]
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=c) for c in calls]))


class NaiveTool(BaseTool):
    """The bug of the incident: a key made at call time, new on every call."""

    def __init__(self, client: idemflow.AsyncClient) -> None:
        super().__init__(name="create_ticket", description="Create a support ticket.")
        self._client = client

    def _get_declaration(self) -> types.FunctionDeclaration:
        return types.FunctionDeclaration(name=self.name, description=self.description, parameters_json_schema=Ticket.model_json_schema())

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        r = await self._client.do(idemflow.Intent(str(uuid.uuid4()), "/v1/tickets", args))
        return {"http_status": r.status, "replayed": r.replayed, "result": r.body}


def app(
    thread: str, tool: BaseTool | BaseToolset, resumable: bool = True, call_id: str | None = None, calls: int = 1, reword: bool = False, model_key: bool = False
) -> App:
    model = ScriptedModel(customer=thread, call_id=call_id, calls=calls, reword=reword, model_key=model_key)
    agent = LlmAgent(name="support", model=model, instruction="Open a ticket for the customer.", tools=[tool])
    return App(name="support_app", root_agent=agent, resumability_config=ResumabilityConfig(is_resumable=resumable))


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thread", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--tools", default="idemflow", choices=["idemflow", "naive"])
    ap.add_argument("--unsafe", action="store_true")
    ap.add_argument("--key-scheme", default="ad3", choices=["ad3", "ad2", "ad1"])
    ap.add_argument("--via", default="function", choices=["function", "mcp"])
    a = ap.parse_args()
    message = types.Content(role="user", parts=[types.Part(text="My printer is on fire.")])
    # The client's attempts time out fast, so that a dropped answer is
    # retried at once (the kill comes first).
    async with idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5) as c:
        tool: BaseTool | BaseToolset
        if a.via == "mcp":
            env = {"IDEMFLOW_URL": os.environ["IDEMFLOW_URL"], "IDEMFLOW_TOKEN": os.environ["IDEMFLOW_TOKEN"]}
            params = StdioConnectionParams(server_params=StdioServerParameters(command=os.environ["IDEMFLOW_BIN"], args=["mcp"], env=env), timeout=30)
            tool = McpToolset(connection_params=params, tool_filter=["create_ticket"])
            if a.tools == "idemflow":
                tool = durable_mcp_toolset(tool, deadline=60)
        elif a.tools == "naive":
            tool = NaiveTool(c)
        else:
            tool = IdemflowTool(
                c, name="create_ticket", description="Create a support ticket.", path="/v1/tickets", args_schema=Ticket, key_scheme=a.key_scheme
            )
        sessions = SqliteSessionService(a.state)
        events: AsyncIterator[Event]
        runner = Runner(app=app(a.thread, tool, resumable=not a.unsafe, model_key=a.via == "mcp"), session_service=sessions)
        if a.unsafe:
            # Not resumable: all the app can do is send the message again.
            if await sessions.get_session(app_name="support_app", user_id="u", session_id=a.thread) is None:
                await sessions.create_session(app_name="support_app", user_id="u", session_id=a.thread)
            print(f"starting {a.thread} (not resumable)", flush=True)
            events = runner.run_async(user_id="u", session_id=a.thread, new_message=message)
        else:
            session = await sessions.get_session(app_name="support_app", user_id="u", session_id=a.thread)
            print(f"{'resuming' if session and session.events else 'starting'} {a.thread}", flush=True)
            events = run_durably(runner, user_id="u", session_id=a.thread, new_message=message)
        final = ""
        async for event in events:
            for r in event.get_function_responses():
                # An MCP tool's response is its CallToolResult: the answer is
                # its structured content.
                answer = (r.response or {}).get("structuredContent", r.response)
                print(f"tool create_ticket {json.dumps(answer)}", flush=True)
            if event.content and event.content.parts and event.content.parts[0].text:
                final = event.content.parts[0].text
        if isinstance(tool, McpToolset):
            await tool.close()
        print(f"DONE {final}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
