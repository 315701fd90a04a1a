"""A Pydantic AI agent made durable by TemporalDurability (or, with
IDEMFLOW_AGENT_WRAPPER=agent, by the older TemporalAgent), for the kill
test (test_pydantic_ai_durable.py): the agent's loop runs in a Temporal
workflow, its model request and its one tool (idemflow_tool, creating a
ticket) in activities, with a deterministic model.

    python -m tests.agents.pydantic_temporal_agent --task-queue Q [--tools idemflow|naive]

runs a worker, with IDEMFLOW_URL, IDEMFLOW_TOKEN, TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE and IDEMFLOW_AGENT_CUSTOMER set. Inside the activity
the tool's key is the activity's (activity_key, with KeyInterceptor on
the worker). --tools naive makes the control: a fresh key on every
attempt.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import warnings
from datetime import timedelta

from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin, PydanticAIWorkflow, TemporalAgent, TemporalDurability

    import idemflow
    from idemflow.temporal import KeyInterceptor
    from tests.agents.pydantic_agent import ScriptedModel, naive_tool, ticket_tool

TOOLS = os.environ.get("IDEMFLOW_AGENT_TOOLS", "idemflow")
# "durability": TemporalDurability, the capability; "agent": the older
# TemporalAgent wrapper (deprecated in pydantic-ai 2.68, still offered).
WRAPPER = os.environ.get("IDEMFLOW_AGENT_WRAPPER", "durability")
# Used knowingly: the warning would only fill the output the test reads.
warnings.filterwarnings("ignore", message=".*`TemporalAgent` is deprecated")


def make_agent() -> Agent[None, str] | TemporalAgent[None, str]:
    # The client's attempts time out fast, so that a dropped answer is
    # retried at once (the kill comes first). A client per process: the
    # tool runs in this worker's activities.
    client = idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5)
    tool = naive_tool(client, requires_approval=False) if TOOLS == "naive" else ticket_tool(client)
    # A killed worker's attempt times out, and Temporal runs the activity
    # again, on another worker.
    activities = workflow.ActivityConfig(
        start_to_close_timeout=timedelta(seconds=5), retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=5)
    )
    model = ScriptedModel(os.environ.get("IDEMFLOW_AGENT_CUSTOMER", ""))
    if WRAPPER == "agent":
        plain = Agent(model, name="support", instructions="Open a ticket for the customer.", tools=[tool])
        return TemporalAgent(plain, activity_config=activities)
    return Agent(
        model,
        name="support",
        instructions="Open a ticket for the customer.",
        tools=[tool],
        capabilities=[TemporalDurability(activity_config=activities)],
    )


support = make_agent()


@workflow.defn
class SupportWorkflow(PydanticAIWorkflow):
    # PydanticAIPlugin registers the agent's activities from here.
    __pydantic_ai_agents__ = (support,)

    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await support.run(prompt)
        return result.output


async def connect() -> Client:
    return await Client.connect(os.environ["TEMPORAL_ADDRESS"], namespace=os.environ["TEMPORAL_NAMESPACE"], plugins=[PydanticAIPlugin()])


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task-queue", required=True)
    a = ap.parse_args()
    client = await connect()
    worker = Worker(client, task_queue=a.task_queue, workflows=[SupportWorkflow], interceptors=[KeyInterceptor()])
    print(f"worker up on {a.task_queue} ({TOOLS} keys)", flush=True)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
