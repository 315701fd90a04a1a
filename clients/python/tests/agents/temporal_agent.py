"""A Temporal-native agent for the kill test (test_temporal.py): the OpenAI
Agents SDK's agent loop runs as a Temporal workflow (its Temporal
integration), with a deterministic fake model, and its one tool is a
Temporal activity that creates a ticket through idemflow under
activity_key(), the activity's durable identity.

    python -m tests.agents.temporal_agent --task-queue Q [--keys idemflow|naive]

runs a worker, with IDEMFLOW_URL, IDEMFLOW_TOKEN, TEMPORAL_ADDRESS and
TEMPORAL_NAMESPACE set. IDEMFLOW_AGENT_PAUSE=after-effect stops the tool
activity's first attempt after idemflow executed it, before it returns
(the test SIGKILLs the worker there). --keys naive makes the control: a
fresh key on every attempt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.openai_agents import workflow as agents_workflow
    from temporalio.openai_agents.testing import ResponseBuilders, TestModelProvider

    import idemflow
    from idemflow.temporal import KeyInterceptor, activity_key

KEYS = os.environ.get("IDEMFLOW_AGENT_KEYS", "idemflow")


@activity.defn
async def create_ticket(customer_id: str, title: str) -> str:
    """Create a support ticket."""
    # The key of this activity, the same on every attempt; the control's
    # is new on every attempt, the bug of the incident.
    key = activity_key() if KEYS == "idemflow" else str(uuid.uuid4())
    # The wait for a final answer: an attempt that ends it raises
    # DeadlineError, and Temporal runs the call again under the same key.
    wait = float(os.environ.get("IDEMFLOW_AGENT_TOOL_WAIT", "300"))
    attempt_timeout = float(os.environ.get("IDEMFLOW_AGENT_ATTEMPT_TIMEOUT", "10"))
    async with idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=attempt_timeout) as c:
        r = await c.do(idemflow.Intent(key, "/v1/tickets", {"customer_id": customer_id, "title": title}), deadline=wait)
    if os.environ.get("IDEMFLOW_AGENT_PAUSE") == "after-effect" and activity.info().attempt == 1:
        print(f"PAUSED after-effect {key}", flush=True)
        await asyncio.sleep(600)
    return json.dumps({"http_status": r.status, "replayed": r.replayed, "ticket_id": r.body["ticket_id"]})


class ScriptedModel(Model):
    """A deterministic fake model, as the integration's TestModel, that
    reads its input: it asks for the ticket until a tool's output is in
    the conversation, then answers. Being stateless, it says the same on
    any worker."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        items = input if isinstance(input, list) else []
        if any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items):
            return ResponseBuilders.output_message("The ticket is open.")
        customer = os.environ["IDEMFLOW_AGENT_CUSTOMER"]
        return ResponseBuilders.tool_call(json.dumps({"customer_id": customer, "title": "Printer on fire"}), "create_ticket", call_id="call_1")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@workflow.defn
class TicketAgent:
    @workflow.run
    async def run(self, request: str, tool_attempts: int = 5) -> str:
        agent = Agent(
            name="support",
            instructions="Open a ticket for the customer.",
            tools=[
                agents_workflow.activity_as_tool(
                    create_ticket,
                    # A killed worker's attempt times out, and Temporal runs
                    # the activity again, on another worker.
                    start_to_close_timeout=timedelta(seconds=4),
                    retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=tool_attempts),
                )
            ],
        )
        result = await Runner.run(agent, request)
        return str(result.final_output)


def plugin() -> OpenAIAgentsPlugin:
    return OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=10)),
        model_provider=TestModelProvider(ScriptedModel()),
    )


async def connect() -> Client:
    return await Client.connect(os.environ["TEMPORAL_ADDRESS"], namespace=os.environ["TEMPORAL_NAMESPACE"], plugins=[plugin()])


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task-queue", required=True)
    a = ap.parse_args()
    client = await connect()
    worker = Worker(client, task_queue=a.task_queue, workflows=[TicketAgent], activities=[create_ticket], interceptors=[KeyInterceptor()])
    print(f"worker up on {a.task_queue} ({KEYS} keys)", flush=True)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
