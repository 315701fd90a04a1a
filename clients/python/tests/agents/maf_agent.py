"""A Microsoft Agent Framework agent for the kill tests
(test_agent_framework.py): a real Agent on the framework's OpenAI Chat
Completions client, pointed at the scripted model behind
tests/model_api.py (OPENAI_BASE_URL), with keyed_calls as middleware and
one tool that creates a ticket through idemflow; its session saved in a
file after each run. Run again with the same --thread and --state, it goes
on as an app does: it approves again the calls a stored run stopped for,
or else sends the user's message again on the restored session (a turn
that never ended).

    python -m tests.agents.maf_agent --thread T --state FILE [--tools idemflow|naive] [--approve]

with IDEMFLOW_URL, IDEMFLOW_TOKEN and OPENAI_BASE_URL set. --tools naive
is the control (a fresh key on every call). --approve makes the tool ask for approval: the run stops, the session and
the calls to approve are saved, and the calls are approved; a process
killed mid call approves them again from what was saved.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from agent_framework import Agent, AgentSession, Content, FunctionTool, Message
from agent_framework.openai import OpenAIChatCompletionClient
from pydantic import BaseModel

import idemflow
from idemflow.agent_framework import idemflow_tool, keyed_calls

PROMPT = "Open a ticket: the printer is on fire."


class Ticket(BaseModel):
    customer_id: str
    title: str


def naive_tool(client: idemflow.AsyncClient, approval: str | None) -> FunctionTool:
    """The control: a key made at call time."""

    async def create_ticket(customer_id: str, title: str) -> str:
        r = await client.do(idemflow.Intent(str(uuid.uuid4()), "/v1/tickets", {"customer_id": customer_id, "title": title}))
        return json.dumps({"http_status": r.status, "replayed": r.replayed, "result": r.body})

    return FunctionTool(name="create_ticket", description="Create a support ticket.", func=create_ticket, input_model=Ticket, approval_mode=approval)  # type: ignore[arg-type]


def agent(tools: list[Any], *, middleware: list[Any]) -> Agent:
    client = OpenAIChatCompletionClient(model="gpt-4o", api_key=os.environ.get("OPENAI_API_KEY", "sk-test"), base_url=os.environ["OPENAI_BASE_URL"])
    return Agent(client=client, tools=tools, middleware=middleware)


def answers(response: Any) -> list[str]:
    """The tool answers of a run's response."""
    return [str(c.result) for m in response.messages for c in m.contents if c.type == "function_result" and "http_status" in str(c.result)]


def save(state: Path, session: AgentSession, pending: list[Content]) -> None:
    state.write_text(json.dumps({"session": session.to_dict(), "pending": [c.to_dict() for c in pending]}))


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thread", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--tools", default="idemflow", choices=["idemflow", "naive"])
    ap.add_argument("--approve", action="store_true")
    a = ap.parse_args()
    state = Path(a.state)
    approval = "always_require" if a.approve else None
    # The client's attempts time out fast, so that a dropped answer is
    # retried at once (the kill comes first).
    async with idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5) as c:
        if a.tools == "idemflow":
            tool = idemflow_tool(
                c, name="create_ticket", description="Create a support ticket.", path="/v1/tickets", input_model=Ticket, approval_mode=approval
            )
        else:
            tool = naive_tool(c, approval)
        ag = agent([tool], middleware=[keyed_calls])
        saved = json.loads(state.read_text()) if state.exists() else None
        session = AgentSession.from_dict(saved["session"]) if saved else AgentSession(session_id=a.thread)
        pending = [Content.from_dict(p) for p in saved["pending"]] if saved else []
        if pending:
            print(f"resumed {a.thread}", flush=True)
        else:
            print(f"running {a.thread}", flush=True)
            response = await ag.run(PROMPT, session=session)
            pending = list(response.user_input_requests)
            save(state, session, pending)
        while pending:
            print(f"approving {len(pending)}", flush=True)
            response = await ag.run(Message(role="user", contents=[p.to_function_approval_response(True) for p in pending]), session=session)
            pending = list(response.user_input_requests)
            save(state, session, pending)
        for answer in answers(response):
            print(f"tool create_ticket {answer}", flush=True)
        print(f"DONE {response.text.strip()}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
