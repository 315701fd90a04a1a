"""A Strands agent for the kill tests (test_strands.py): a real Agent with
a FileSessionManager, Strands' Anthropic provider on the scripted model
behind tests/model_api.py (ANTHROPIC_BASE_URL), and one tool that creates
a ticket through idemflow. Run again with the same --thread and
--sessions, the agent is restored from its session and the user's message
is sent again, as an app resumes a turn that never ended.

    python -m tests.strands.strands_agent --thread T --sessions DIR [--tools idemflow|naive|tool-use-id] [--via mcp]

with IDEMFLOW_URL, IDEMFLOW_TOKEN and ANTHROPIC_BASE_URL set (and
IDEMFLOW_BIN for --via mcp). --tools naive is the control (a fresh key on
every call); --tools tool-use-id keys each call by its toolUseId, which
the model writes anew when it writes the call again. --via mcp reaches
create_ticket through idemflow's MCP server (idemflow mcp over stdio),
the model writing an idempotency_key of its own, new each time it writes
the call: --tools idemflow makes the tool idemflow.strands'
durable_mcp_tools, --tools naive Strands' own MCP tools, where the
model's key decides.
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from typing import Any

from mcp import StdioServerParameters, stdio_client
from pydantic import BaseModel
from strands import Agent, tool
from strands.models.anthropic import AnthropicModel
from strands.session.file_session_manager import FileSessionManager
from strands.tools.mcp import MCPClient
from strands.types.tools import ToolContext

import idemflow
from idemflow.strands import IdemflowTool, durable_mcp_tools

PROMPT = "Open a ticket: the printer is on fire."


class Ticket(BaseModel):
    customer_id: str
    title: str


def naive_tool(client: idemflow.Client, key_of: str) -> Any:
    """The control: a key made at call time, or the call's toolUseId."""

    @tool(context=True, name="create_ticket", description="Create a support ticket.")
    def create_ticket(customer_id: str, title: str, tool_context: ToolContext) -> str:
        key = str(uuid.uuid4()) if key_of == "naive" else "tooluse-" + tool_context.tool_use["toolUseId"]
        r = client.do(idemflow.Intent(key, "/v1/tickets", {"customer_id": customer_id, "title": title}))
        return json.dumps({"http_status": r.status, "replayed": r.replayed, "result": r.body})

    return create_ticket


def agent(thread: str, sessions: str, tools: list[Any]) -> Agent:
    model = AnthropicModel(model_id="claude-sonnet-4-5", max_tokens=1024)
    return Agent(model=model, tools=tools, session_manager=FileSessionManager(session_id=thread, storage_dir=sessions), callback_handler=None)


def answers(a: Agent) -> list[str]:
    """The tool answers the agent read in its current turn."""
    start = max(i for i, m in enumerate(a.messages) if m["role"] == "user" and any("text" in c for c in m["content"]))
    return [
        c["toolResult"]["content"][0]["text"]
        for m in a.messages[start:]
        for c in m["content"]
        if "toolResult" in c and "http_status" in c["toolResult"]["content"][0].get("text", "")
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thread", required=True)
    ap.add_argument("--sessions", required=True)
    ap.add_argument("--tools", default="idemflow", choices=["idemflow", "naive", "tool-use-id"])
    ap.add_argument("--via", default="http", choices=["http", "mcp"])
    ap.add_argument("--key-scheme", default="st2", choices=["st2", "st1"])
    a = ap.parse_args()
    if a.via == "mcp":
        env = {"IDEMFLOW_URL": os.environ["IDEMFLOW_URL"], "IDEMFLOW_TOKEN": os.environ["IDEMFLOW_TOKEN"], "PATH": os.environ.get("PATH", "")}
        # Strands 1.62 types the transport by mcp 1.x's streams; mcp 2.1's stdio_client is what it runs.
        transport: Any = lambda: stdio_client(StdioServerParameters(command=os.environ["IDEMFLOW_BIN"], args=["mcp"], env=env))  # noqa: E731
        with MCPClient(transport) as mcp:
            listed = mcp.list_tools_sync()
            tools: list[Any] = (
                durable_mcp_tools(mcp, names=["create_ticket"]) if a.tools == "idemflow" else [t for t in listed if t.tool_name == "create_ticket"]
            )
            run(a.thread, a.sessions, tools)
        return
    # The client's attempts time out fast, so that a dropped answer is
    # retried at once (the kill comes first).
    with idemflow.Client(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5) as c:
        if a.tools == "idemflow":
            tools = [
                IdemflowTool(c, name="create_ticket", description="Create a support ticket.", path="/v1/tickets", input_model=Ticket, key_scheme=a.key_scheme)
            ]
        else:
            tools = [naive_tool(c, a.tools)]
        run(a.thread, a.sessions, tools)


def run(thread: str, sessions: str, tools: list[Any]) -> None:
    ag = agent(thread, sessions, tools)
    print(f"running {thread}", flush=True)
    result = ag(PROMPT)
    for answer in answers(ag):
        print(f"tool create_ticket {answer}", flush=True)
    print(f"DONE {str(result).strip()}", flush=True)


if __name__ == "__main__":
    main()
