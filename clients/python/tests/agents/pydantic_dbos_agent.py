"""A Pydantic AI agent made durable by DBOSDurability (or, with
IDEMFLOW_AGENT_WRAPPER=agent, by the older DBOSAgent), for the kill test
(test_pydantic_ai_durable.py): the agent's run is a DBOS workflow whose
model requests are DBOS steps, and whose one tool (idemflow_tool,
creating a ticket) runs as a step of its own, with a deterministic
model.

    python -m tests.agents.pydantic_dbos_agent --workflow-id W [--tools idemflow|naive]

with IDEMFLOW_URL, IDEMFLOW_TOKEN, IDEMFLOW_AGENT_CUSTOMER and
DBOS_SYSTEM_DATABASE_URL set. It launches DBOS, which recovers a
workflow a killed process left pending, and waits for workflow W,
starting it if it never started. --tools naive makes the control: a
fresh key on every call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import warnings

from dbos import DBOS, DBOSConfig, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSAgent, DBOSDurability

import idemflow
from tests.agents.pydantic_agent import ScriptedModel, naive_tool, ticket_tool

TOOLS = os.environ.get("IDEMFLOW_AGENT_TOOLS", "idemflow")
# "durability": DBOSDurability, the capability; "agent": the older
# DBOSAgent wrapper (deprecated in pydantic-ai 2.68, still offered).
WRAPPER = os.environ.get("IDEMFLOW_AGENT_WRAPPER", "durability")
# Used knowingly: the warning would only fill the output the test reads.
warnings.filterwarnings("ignore", message=".*`DBOSAgent` is deprecated")

# The client's attempts time out fast, so that a dropped answer is
# retried at once (the kill comes first).
client = idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5)
_tool = naive_tool(client, requires_approval=False) if TOOLS == "naive" else ticket_tool(client)
_model = ScriptedModel(os.environ["IDEMFLOW_AGENT_CUSTOMER"])
support: Agent[None, str] | DBOSAgent[None, str]
if WRAPPER == "agent":
    support = DBOSAgent(Agent(_model, name="support", instructions="Open a ticket for the customer.", tools=[_tool]))
else:
    support = Agent(_model, name="support", instructions="Open a ticket for the customer.", tools=[_tool], capabilities=[DBOSDurability()])


@DBOS.workflow()
async def open_ticket(prompt: str) -> str:
    result = await support.run(prompt)
    return str(result.output)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workflow-id", required=True)
    a = ap.parse_args()
    config: DBOSConfig = {"name": "idemflow-pydantic-ai-test", "system_database_url": os.environ["DBOS_SYSTEM_DATABASE_URL"], "log_level": "WARNING"}
    DBOS(config=config)
    DBOS.launch()  # recovers what a killed process left pending
    existing = await DBOS.get_workflow_status_async(a.workflow_id)
    if existing is None:
        print(f"starting {a.workflow_id}", flush=True)
        with SetWorkflowID(a.workflow_id):
            handle = await DBOS.start_workflow_async(open_ticket, "My printer is on fire.")
    else:
        print(f"recovering {a.workflow_id} ({existing.status})", flush=True)
        handle = await DBOS.retrieve_workflow_async(a.workflow_id)
    out = await handle.get_result()
    steps = await DBOS.list_workflow_steps_async(a.workflow_id)
    for s in steps:
        if str(s["function_name"]).startswith("idemflow."):
            print(f"tool create_ticket {s['output']}", flush=True)
    print(f"DONE {out}", flush=True)
    await client.aclose()
    DBOS.destroy()


if __name__ == "__main__":
    asyncio.run(main())
