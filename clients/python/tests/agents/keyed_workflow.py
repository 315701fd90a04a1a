"""The workflow of test_temporal_keys.py: a number of create_ticket calls,
regular and local, all with the same arguments (so that a shared key would
answer a later call as a replay), then whatever ends the run."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    import idemflow
    from idemflow.temporal import activity_key


@dataclass
class Run:
    customer: str
    regular: int = 1
    local: int = 0
    continues: int = 0  # continue as new this many times
    wait_for_done: bool = False  # wait for the signal "done" after the calls


@activity.defn(name="create_ticket")
async def create_ticket(r: Run) -> str:
    key = activity_key()
    async with idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], initial_backoff=0.02, max_backoff=0.2) as c:
        await c.do(idemflow.Intent(key, "/v1/tickets", {"customer_id": r.customer, "title": "Daily report"}))
    return key


@workflow.defn(name="keyed")
class Keyed:
    def __init__(self) -> None:
        self.done = False

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.run
    async def run(self, r: Run) -> list[str]:
        keys = []
        retry = RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=3)
        for i in range(r.regular + r.local):
            if i < r.regular:
                keys.append(await workflow.execute_activity(create_ticket, r, start_to_close_timeout=timedelta(seconds=30), retry_policy=retry))
            else:
                keys.append(await workflow.execute_local_activity(create_ticket, r, start_to_close_timeout=timedelta(seconds=30), retry_policy=retry))
        if r.wait_for_done:
            await workflow.wait_condition(lambda: self.done)
        if r.continues:
            workflow.continue_as_new(replace(r, continues=r.continues - 1))
        return keys
