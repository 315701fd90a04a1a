"""Two intended calls are two intents, whatever run of one workflow ID
makes them, and a call a reset makes again is the first call: a real
Temporal server, a real gateway, and activity_key() under KeyInterceptor.
TestActivityKeysTellIntendedCallsApart (agentclient) is the Go twin."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.worker import Worker

from idemflow.temporal import KeyInterceptor

from .agents.keyed_workflow import Keyed, Run, create_ticket
from .conftest import count, need
from .resets import reset_to_first_task


async def _until(check, within: float = 30) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(within * 10)):
        if check():
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"not within {within} s")


@pytest.mark.parametrize(
    "case,intents",
    [("a workflow ID run twice", 2), ("continue-as-new, twice", 3), ("one regular and six local activities", 7), ("a reset to before the call", 1)],
)
def test_activity_keys_tell_intended_calls_apart(case: str, intents: int, db: psycopg.Connection) -> None:
    need("IDEMFLOW_URL")
    customer = f"py-keys-{uuid.uuid4().hex[:8]}"
    queue = f"keys-{customer}"

    async def main() -> None:
        client = await Client.connect(need("TEMPORAL_ADDRESS"), namespace=need("TEMPORAL_NAMESPACE"))
        async with Worker(client, task_queue=queue, workflows=[Keyed], activities=[create_ticket], interceptors=[KeyInterceptor()]):
            wid = f"{customer}-wf"
            if case == "a workflow ID run twice":
                for _ in range(2):
                    await client.execute_workflow(Keyed.run, Run(customer), id=wid, task_queue=queue, id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE)
            elif case == "continue-as-new, twice":
                await client.execute_workflow(Keyed.run, Run(customer, continues=2), id=wid, task_queue=queue)
            elif case == "one regular and six local activities":
                await client.execute_workflow(Keyed.run, Run(customer, regular=1, local=6), id=wid, task_queue=queue)
            else:
                h = await client.start_workflow(Keyed.run, Run(customer, wait_for_done=True), id=wid, task_queue=queue)
                await _until(lambda: count(db, "ticket", customer) == 1)
                again = await reset_to_first_task(client, h, "the test resets to before the call")
                await again.signal(Keyed.finish)
                assert len(await again.result()) == 1

    asyncio.run(main())
    n = count(db, "ticket", customer)
    print(f"{case}: {n} tickets for {intents} intended calls")
    assert n == intents
