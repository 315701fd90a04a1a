"""The workflow of test_temporal_keys.py: a number of create_ticket calls,
regular and local, all with the same arguments (so that a shared key would
answer a later call as a replay), then whatever ends the run."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    import idemflow
    from idemflow.temporal import activity_by_intent, activity_key


@dataclass
class Run:
    customer: str
    regular: int = 1
    local: int = 0
    continues: int = 0  # continue as new this many times
    wait_for_done: bool = False  # wait for the signal "done" after the calls
    fail_first_attempt: bool = False  # fail the first attempt after its calls (a workflow retry runs them again)


@activity.defn(name="create_ticket")
async def create_ticket(r: Run) -> str:
    key = activity_key()
    async with idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], initial_backoff=0.02, max_backoff=0.2) as c:
        await c.do(idemflow.Intent(key, "/v1/tickets", {"customer_id": r.customer, "title": "Daily report"}))
    return key


class WaitsForDone:
    """A workflow that can wait for the signal "finish" (a reset's point
    is before what it waits behind)."""

    def __init__(self) -> None:
        self.done = False

    @workflow.signal
    def finish(self) -> None:
        self.done = True


@workflow.defn(name="keyed")
class Keyed(WaitsForDone):
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
        if r.fail_first_attempt and workflow.info().attempt == 1:
            raise ApplicationError("the first attempt fails after its calls")
        return keys


# A planned agent (test_temporal_keys.py's reset cases, the twin of Go's
# TestAKeyNamesTheIntendedCallNotItsPlace): a model activity answers with
# the tool calls to make, from a script the test sets per customer, so
# that a reset that runs the model again gets another plan, as a real
# model gives.


@dataclass
class Plan:
    customer: str
    turns: int = 0  # continue as new this many times; each turn asks the model again
    turn: int = 0
    wait_for_done: bool = False
    fail_first_attempt: bool = False
    tool_queue: str | None = None  # the tools' task queue, if not the workflow's


#: customer -> the plans the model answers, in order (the last one after
#: that); each plan is a list of (tool, title), or (tool, title, customer)
#: where the model writes another customer (or the same one spaced).
SCRIPTS: dict[str, list[list[tuple[str, ...]]]] = {}
_ASKED: dict[tuple[str, int], int] = {}


@activity.defn(name="model")
async def model(customer: str, turn: int) -> list[list[str]]:
    n = _ASKED.get((customer, turn), 0)
    _ASKED[(customer, turn)] = n + 1
    plans = SCRIPTS[customer]
    return [list(c) for c in plans[min(n, len(plans) - 1)]]


@activity.defn(name="lookup")
async def lookup(customer: str, title: str) -> None:
    return None


@activity.defn(name="create_ticket_titled")
async def create_ticket_titled(customer: str, title: str) -> str:
    key = activity_key("create_ticket")
    async with idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], initial_backoff=0.02, max_backoff=0.2) as c:
        r = await c.do(idemflow.Intent(key, "/v1/tickets", {"customer_id": customer, "title": title}))
    return r.raw


@dataclass
class TicketArgs:
    """open_ticket's one argument, a JSON object: an activity whose intent
    fields a worker may declare (KeyInterceptor(intent=...))."""

    customer_id: str
    title: str


@activity.defn(name="open_ticket")
async def open_ticket(a: TicketArgs) -> dict[str, Any]:
    key = activity_key()
    async with idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], initial_backoff=0.02, max_backoff=0.2) as c:
        body = {"customer_id": a.customer_id, "title": a.title}
        r = await c.do(idemflow.Intent(key, "/v1/tickets", body, by_intent=activity_by_intent()))
    return {"replayed": r.replayed, "differed": list(r.differed), "title": r.body["title"]}


@workflow.defn(name="planned")
class Planned(WaitsForDone):
    @workflow.run
    async def run(self, p: Plan) -> list[dict[str, Any]]:
        """Returns open_ticket's answers."""
        retry = RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=3)
        timeout = timedelta(seconds=30)
        plan = await workflow.execute_activity(model, args=[p.customer, p.turn], start_to_close_timeout=timeout, retry_policy=retry)
        answers = []
        for tool, title, *who in plan:
            if tool == "open_ticket":
                a = TicketArgs(who[0] if who else p.customer, title)
                answers.append(await workflow.execute_activity(open_ticket, a, task_queue=p.tool_queue, start_to_close_timeout=timeout, retry_policy=retry))
                continue
            act = lookup if tool == "lookup" else create_ticket_titled
            await workflow.execute_activity(act, args=[p.customer, title], task_queue=p.tool_queue, start_to_close_timeout=timeout, retry_policy=retry)
        if p.wait_for_done:
            await workflow.wait_condition(lambda: self.done)
        if p.turn < p.turns:
            workflow.continue_as_new(replace(p, turn=p.turn + 1))
        if p.fail_first_attempt and workflow.info().attempt == 1:
            raise ApplicationError("the first attempt fails after its calls")
        return answers


@workflow.defn(name="signalled")
class Signalled:
    """A call made by a signal handler: with signal-with-start, the handler
    runs in the run's first activation, before the run's own code."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    @workflow.signal
    async def open(self, r: Run) -> None:
        retry = RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=3)
        self.keys.append(await workflow.execute_activity(create_ticket, r, start_to_close_timeout=timedelta(seconds=30), retry_policy=retry))

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: len(self.keys) == 1)
        return self.keys
