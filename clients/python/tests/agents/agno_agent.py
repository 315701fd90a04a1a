"""An Agno agent for the kill tests (test_agno.py): a real Agent with a
JsonDb, Agno's Claude model on the scripted model behind
tests/model_api.py (ANTHROPIC_BASE_URL), and one tool that creates a
ticket through idemflow. Run again with the same --thread and --db, it
goes on as an app does: it continues a run that was stored paused for a
confirmation, or else sends the user's message again on the session (a
turn that never ended).

    python -m tests.agents.agno_agent --thread T --db DIR [--tools idemflow|naive|call-id] [--confirm]

with IDEMFLOW_URL, IDEMFLOW_TOKEN and ANTHROPIC_BASE_URL set. --tools
naive is the control (a fresh key on every call); --tools call-id keys
each call by the model's call ID, which the model writes anew when it
writes the call again. --confirm makes the tool ask for a confirmation:
the run pauses, is stored, and is continued confirmed; a process killed
mid call is continued again from what was stored.
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from typing import Any

from agno.agent import Agent
from agno.db.json import JsonDb
from agno.models.anthropic import Claude
from agno.run.base import RunStatus
from agno.tools.function import Function, FunctionCall
from pydantic import BaseModel

import idemflow
from idemflow.agno import idemflow_tool

PROMPT = "Open a ticket: the printer is on fire."


class Ticket(BaseModel):
    customer_id: str
    title: str


def naive_tool(client: idemflow.Client, key_of: str, confirm: bool) -> Function:
    """The control: a key made at call time, or the call's ID."""

    def create_ticket(fc: FunctionCall, customer_id: str, title: str) -> str:
        key = str(uuid.uuid4()) if key_of == "naive" else "agno-call-" + (fc.call_id or "")
        r = client.do(idemflow.Intent(key, "/v1/tickets", {"customer_id": customer_id, "title": title}))
        return json.dumps({"http_status": r.status, "replayed": r.replayed, "result": r.body})

    schema = Ticket.model_json_schema()
    return Function(
        name="create_ticket",
        description="Create a support ticket.",
        parameters=schema,
        entrypoint=create_ticket,
        skip_entrypoint_processing=True,
        requires_confirmation=confirm or None,
    )


def agent(thread: str, db: str, tools: list[Any]) -> Agent:
    return Agent(id="support", model=Claude(id="claude-sonnet-4-5"), tools=tools, db=JsonDb(db_path=db), session_id=thread, add_history_to_context=True)


def answers(run: Any) -> list[str]:
    """The tool answers of a run."""
    return [str(m.content) for m in run.messages or [] if m.role == "tool" and not m.from_history and "http_status" in str(m.content)]


def finish(ag: Agent, run: Any) -> Any:
    """run, continued with each of its calls confirmed until it ends."""
    while run.status == RunStatus.paused:
        for r in run.active_requirements:
            r.confirm()
        print(f"continuing {run.run_id}", flush=True)
        run = ag.continue_run(run_id=run.run_id, requirements=run.requirements, session_id=ag.session_id)
    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thread", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--tools", default="idemflow", choices=["idemflow", "naive", "call-id"])
    ap.add_argument("--confirm", action="store_true")
    a = ap.parse_args()
    # The client's attempts time out fast, so that a dropped answer is
    # retried at once (the kill comes first).
    with idemflow.Client(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5) as c:
        if a.tools == "idemflow":
            tool = idemflow_tool(
                c, name="create_ticket", description="Create a support ticket.", path="/v1/tickets", input_model=Ticket, requires_confirmation=a.confirm or None
            )
        else:
            tool = naive_tool(c, a.tools, a.confirm)
        ag = agent(a.thread, a.db, [tool])
        session = ag.get_session(session_id=a.thread)
        paused = next((r for r in (session.runs if session else None) or [] if r.status == RunStatus.paused), None)
        if paused is not None:
            print(f"resumed {paused.run_id}", flush=True)
            run = finish(ag, paused)
        else:
            print(f"running {a.thread}", flush=True)
            run = finish(ag, ag.run(PROMPT))
        for answer in answers(run):
            print(f"tool create_ticket {answer}", flush=True)
        print(f"DONE {str(run.content).strip()}", flush=True)


if __name__ == "__main__":
    main()
