"""A Claude Agent SDK agent for the kill tests (test_claude_agent.py): the
SDK's query() through run_durably, with idemflow's create_ticket in an
in-process MCP server, the SDK's own CLI against the scripted model behind
tests/model_api.py (ANTHROPIC_BASE_URL; no network). Run again with the
same --thread and --state, it sends the same turn again on its session,
resumed, as an app does after a crash.

    python -m tests.agents.claude_agent --thread T --state FILE [--tools idemflow|naive] [--unsafe]

with IDEMFLOW_URL, IDEMFLOW_TOKEN and ANTHROPIC_BASE_URL set. --tools
naive is the control: a fresh key on every call. --unsafe: an app that
does not keep the turn's ID, and gives each run a new one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, ToolResultBlock, UserMessage, create_sdk_mcp_server, get_session_info, tool
from pydantic import BaseModel

import idemflow
from idemflow.claude_agent import idemflow_tool, run_durably

PROMPT = "Open a ticket: my printer is on fire."


class Ticket(BaseModel):
    customer_id: str
    title: str


def options(client: idemflow.AsyncClient, folder: Path, naive: bool = False, wait: float = 300.0) -> ClaudeAgentOptions:
    """The run's options: create_ticket alone, Claude's files in folder."""
    if naive:

        @tool("create_ticket", "Create a support ticket.", Ticket.model_json_schema())
        async def create_ticket(args: dict[str, Any]) -> dict[str, Any]:
            r = await client.do(idemflow.Intent(str(uuid.uuid4()), "/v1/tickets", args))
            return {"content": [{"type": "text", "text": json.dumps({"http_status": r.status, "replayed": r.replayed, "result": r.body})}]}

        ticket = create_ticket
    else:
        ticket = idemflow_tool(client, name="create_ticket", description="Create a support ticket.", path="/v1/tickets", input_model=Ticket, wait=wait)
    # Claude's sessions live beside the state, not in the user's ~/.claude.
    os.environ["CLAUDE_CONFIG_DIR"] = str(folder / "claude")
    return ClaudeAgentOptions(
        mcp_servers={"idemflow": create_sdk_mcp_server("idemflow", tools=[ticket])},
        allowed_tools=["mcp__idemflow__create_ticket"],
        tools=[],
        cwd=str(folder),
        max_turns=6,
        env={
            "CLAUDE_CONFIG_DIR": str(folder / "claude"),
            "ANTHROPIC_BASE_URL": os.environ["ANTHROPIC_BASE_URL"],
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
        },
    )


def result_text(part: ToolResultBlock) -> str:
    if isinstance(part.content, str):
        return part.content
    return "".join(str(c.get("text", "")) for c in part.content or [])


async def turn(
    opts: ClaudeAgentOptions,
    session_id: str,
    turn_id: str,
    state: Path,
    prompt: str = PROMPT,
    fork_of: str | None = None,
    rerun: bool = False,
    intents: dict[str, Any] | None = None,
) -> list[str]:
    """Runs one turn; the tool answers the agent read, as it printed them."""
    seen: list[str] = []
    async for m in run_durably(prompt, opts, session_id=session_id, turn_id=turn_id, state=state, fork_of=fork_of, rerun=rerun, intents=intents):
        if isinstance(m, UserMessage) and isinstance(m.content, list):
            for part in m.content:
                if isinstance(part, ToolResultBlock) and "http_status" in (text := result_text(part)):
                    seen.append(text)
                    print(f"tool create_ticket {text}", flush=True)
    return seen


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thread", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--tools", default="idemflow", choices=["idemflow", "naive"])
    ap.add_argument("--unsafe", action="store_true")
    # Run again after a crash as a fork into a new session (a chat's "retry
    # in a new branch"): rerun names the turn it re-runs, new does not (a
    # new conversation, its own state file).
    ap.add_argument("--fork", choices=["rerun", "new"])
    # The control of a reworded call: create_ticket named by its whole
    # arguments (as cl1 named every call), not its intent fields.
    ap.add_argument("--by-arguments", action="store_true")
    a = ap.parse_args()
    intents: dict[str, Any] | None = {"create_ticket": []} if a.by_arguments else None
    state = Path(a.state)
    # The session's ID: a UUID the app chose once for the conversation.
    session_id = str(uuid.uuid5(uuid.NAMESPACE_URL, a.thread))
    async with idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5) as c:
        opts = options(c, state.parent, naive=a.tools == "naive")
        turn_id = str(uuid.uuid4()) if a.unsafe else "msg-1"
        if a.fork and get_session_info(session_id, directory=str(state.parent)) is not None:
            fork = str(uuid.uuid5(uuid.NAMESPACE_URL, a.thread + "-fork"))
            print(f"forking {a.thread} into a new session ({a.fork})", flush=True)
            rerun = a.fork == "rerun"
            await turn(opts, fork, turn_id, state if rerun else state.with_suffix(".fork.json"), fork_of=session_id, rerun=rerun)
        else:
            print(f"running {a.thread}", flush=True)
            await turn(opts, session_id, turn_id, state, intents=intents)
    print("DONE", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
