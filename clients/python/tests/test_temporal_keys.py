"""Two intended calls are two intents, whatever run of one workflow ID
makes them, and a call a reset makes again is the first call: a real
Temporal server, a real gateway, and activity_key() under KeyInterceptor.
TestActivityKeysTellIntendedCallsApart (agentclient) is the Go twin."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

from idemflow.keys import BUILTIN_INTENT
from idemflow.temporal import KeyInterceptor

from .agents.keyed_workflow import SCRIPTS, Keyed, Plan, Planned, Run, Signalled, create_ticket, create_ticket_titled, lookup, model, open_ticket
from .conftest import count, count_like, need
from .resets import reset_to_first_task, reset_to_task


async def _until(check, within: float = 30) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(within * 10)):
        if check():
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"not within {within} s")


@pytest.mark.parametrize(
    "case,intents",
    [
        ("a workflow ID run twice", 2),
        ("continue-as-new, twice", 3),
        ("one regular and six local activities", 7),
        ("a reset to before the call", 1),
        ("a workflow retry", 1),
    ],
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
            elif case == "a workflow retry":
                await client.execute_workflow(
                    Keyed.run,
                    Run(customer, fail_first_attempt=True),
                    id=wid,
                    task_queue=queue,
                    retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=2),
                )
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


PRINTER, TONER, LOOKUP = ("create_ticket", "Printer on fire"), ("create_ticket", "Toner empty"), ("lookup", "Printer on fire")


def titled(db: psycopg.Connection, customer: str, title: str) -> int:
    row = db.execute("SELECT count(*) FROM ticket WHERE customer_id = %s AND title = %s", (customer, title)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize(
    "case,plans,reset_task,want",
    [
        ("a reset runs the model again, which adds a lookup before the same call", [[PRINTER], [LOOKUP, PRINTER]], 1, {"Printer on fire": 1}),
        ("a reset runs the model again, which asks for another ticket at the same place", [[PRINTER], [TONER]], 1, {"Printer on fire": 1, "Toner empty": 1}),
        ("a reset runs the model again, which plans the same two equal calls", [[PRINTER, PRINTER]], 1, {"Printer on fire": 2}),
        ("a reset after the model answered", [[LOOKUP, PRINTER], [TONER]], 2, {"Printer on fire": 1, "Toner empty": 0}),
    ],
)
def test_a_reset_that_runs_the_model_again_keeps_each_calls_key(
    case: str, plans: list[list[tuple[str, str]]], reset_task: int, want: dict[str, int], db: psycopg.Connection
) -> None:
    """The twin of Go's TestAKeyNamesTheIntendedCallNotItsPlace: a reset
    runs the model again, which answers otherwise; a call it asks for again
    replays wherever it comes, a call it never asked for is new (never a
    422, never a replay)."""
    need("IDEMFLOW_URL")
    customer = f"py-plan-{uuid.uuid4().hex[:8]}"
    queue = f"plan-{customer}"
    SCRIPTS[customer] = plans
    first = sum(1 for tool, _ in plans[0] if tool == "create_ticket")

    async def main() -> None:
        client = await Client.connect(need("TEMPORAL_ADDRESS"), namespace=need("TEMPORAL_NAMESPACE"))
        async with Worker(client, task_queue=queue, workflows=[Planned], activities=[model, lookup, create_ticket_titled], interceptors=[KeyInterceptor()]):
            h = await client.start_workflow(Planned.run, Plan(customer, wait_for_done=True), id=f"{customer}-wf", task_queue=queue)
            await _until(lambda: count(db, "ticket", customer) == first)
            again = await reset_to_task(client, h, reset_task, "the test resets: the model is asked again")
            await again.signal(Planned.finish)
            await again.result()

    asyncio.run(main())
    got = {title: titled(db, customer, title) for title in want}
    print(f"{case}: {got}")
    assert got == want


OPEN = ("open_ticket", "Printer on fire")
REWORDED = ("open_ticket", "Printer is smoking, please help")


@pytest.mark.parametrize(
    "case,declared,plans,tickets,replayed",
    [
        ("the title reworded (and the customer spaced): one ticket, a replay naming the title", True, [[OPEN], [(*REWORDED, " {c} ")]], 1, [["title"]]),
        ("the title reworded without the declaration (tp3): a second ticket", False, [[OPEN], [REWORDED]], 2, [None]),
        ("another customer: another intent", True, [[OPEN], [(*OPEN, "{c}-b")]], 2, [None]),
        (
            "two calls for one customer, both reworded: two tickets, both replayed",
            True,
            [[OPEN, ("open_ticket", "Network down")], [REWORDED, ("open_ticket", "No network")]],
            2,
            [["title"], ["title"]],
        ),
    ],
)
def test_a_reset_whose_model_rewords_the_call_finds_it_by_its_intent(
    case: str, declared: bool, plans: list[list[tuple[str, ...]]], tickets: int, replayed: list[list[str] | None], db: psycopg.Connection
) -> None:
    """The twin of Go's reworded cases in TestAKeyNamesTheIntendedCallNotItsPlace:
    a worker that declares open_ticket's intent field (the customer, as the
    ticket operation does) keys the call by it (tp4), so a reset whose model
    rewrites the title finds the first call and is told it is a replay of
    what was made, naming the title; without the declaration the reworded
    call is a second ticket."""
    need("IDEMFLOW_URL")
    customer = f"py-intent-{uuid.uuid4().hex[:8]}"
    queue = f"intent-{customer}"
    SCRIPTS[customer] = [[tuple(part.format(c=customer) for part in call) for call in plan] for plan in plans]
    intent = {"open_ticket": BUILTIN_INTENT["create_ticket"]} if declared else None

    async def main() -> list[dict[str, Any]]:
        client = await Client.connect(need("TEMPORAL_ADDRESS"), namespace=need("TEMPORAL_NAMESPACE"))
        async with Worker(client, task_queue=queue, workflows=[Planned], activities=[model, open_ticket], interceptors=[KeyInterceptor(intent=intent)]):
            h = await client.start_workflow(Planned.run, Plan(customer, wait_for_done=True), id=f"{customer}-wf", task_queue=queue)
            await _until(lambda: count_like(db, customer) == len(plans[0]))
            again = await reset_to_task(client, h, 1, "regenerate: the model is asked again")
            await again.signal(Planned.finish)
            return await again.result()

    answers = asyncio.run(main())
    n = count_like(db, customer) + count(db, "ticket", f" {customer} ")
    print(f"{case}: {n} tickets; the reset's answers {answers}")
    assert n == tickets
    for answer, want in zip(answers, replayed, strict=True):
        if want is None:
            assert answer["replayed"] is False, answer
        else:
            assert answer["replayed"] is True and answer["differed"] == want and answer["title"] != REWORDED[1], answer


def test_a_reset_of_a_continue_as_new_chain_replays_the_turns_after_it(db: psycopg.Connection) -> None:
    need("IDEMFLOW_URL")
    customer = f"py-chain-{uuid.uuid4().hex[:8]}"
    queue = f"chain-{customer}"
    SCRIPTS[customer] = [[PRINTER]]  # every turn asks for the same ticket

    async def main() -> None:
        client = await Client.connect(need("TEMPORAL_ADDRESS"), namespace=need("TEMPORAL_NAMESPACE"))
        async with Worker(client, task_queue=queue, workflows=[Planned], activities=[model, lookup, create_ticket_titled], interceptors=[KeyInterceptor()]):
            h = await client.start_workflow(Planned.run, Plan(customer, turns=1), id=f"{customer}-wf", task_queue=queue)
            await h.result()
            assert count(db, "ticket", customer) == 2, "the chain's two turns"
            first = client.get_workflow_handle(h.id, run_id=h.first_execution_run_id or h.result_run_id)
            again = await reset_to_task(client, first, 1, "the test resets the chain's first run")
            await client.get_workflow_handle(h.id, run_id=again.run_id).result()

    asyncio.run(main())
    n = count(db, "ticket", customer)
    print(f"a reset of a continue-as-new chain: {n} tickets for 2 intended calls")
    assert n == 2


@pytest.mark.parametrize("tools_intercepted", [True, False], ids=["the workflow's worker lacks the interceptor", "no worker has it"])
def test_a_call_nobody_numbered_fails_the_run_naming_the_fix(tools_intercepted: bool, db: psycopg.Connection) -> None:
    """No silent fallback: a call no interceptor numbered gets no key that
    another run's call could share; the run fails at once (the error is
    not retryable) and names KeyInterceptor."""
    need("IDEMFLOW_URL")
    customer = f"py-bare-{uuid.uuid4().hex[:8]}"
    queue, tools = f"bare-{customer}", f"tools-{customer}"
    SCRIPTS[customer] = [[PRINTER]]

    async def main() -> None:
        client = await Client.connect(need("TEMPORAL_ADDRESS"), namespace=need("TEMPORAL_NAMESPACE"))
        bare = Worker(client, task_queue=queue, workflows=[Planned], activities=[model, lookup])
        keyed = Worker(client, task_queue=tools, activities=[create_ticket_titled], interceptors=[KeyInterceptor()] if tools_intercepted else [])
        async with bare, keyed:
            for _ in range(2):  # the workflow ID run twice: two intended calls
                with pytest.raises(WorkflowFailureError) as failed:
                    await asyncio.wait_for(
                        client.execute_workflow(Planned.run, Plan(customer, tool_queue=tools), id=f"{customer}-wf", task_queue=queue), timeout=30
                    )
                cause = failed.value.cause
                assert isinstance(cause, ActivityError) and isinstance(cause.cause, ApplicationError), failed.value
                assert cause.cause.non_retryable and "KeyInterceptor" in str(cause.cause), cause.cause
                print(f"the run failed: {cause.cause}")

    asyncio.run(main())
    assert count(db, "ticket", customer) == 0


def test_a_call_scheduled_before_upgraded_at_keeps_its_tp1_key(db: psycopg.Connection) -> None:
    """The explicit path for a call in flight across the upgrade: nothing
    numbered it (the workflow's worker has no interceptor), and it was
    scheduled before upgraded_at, so it keeps the tp1 key its earlier
    attempts sent (Go: TestActivityKeysTellIntendedCallsApart)."""
    from datetime import datetime, timezone

    from idemflow.temporal import legacy_key

    need("IDEMFLOW_URL")
    customer = f"py-upgrade-{uuid.uuid4().hex[:8]}"
    queue, tools = f"old-{customer}", f"tools-{customer}"
    SCRIPTS[customer] = [[PRINTER]]

    async def main() -> tuple[str, str]:
        client = await Client.connect(need("TEMPORAL_ADDRESS"), namespace=need("TEMPORAL_NAMESPACE"))
        later = datetime.now(timezone.utc) + timedelta(hours=1)
        old = Worker(client, task_queue=queue, workflows=[Planned], activities=[model, lookup])
        upgraded = Worker(client, task_queue=tools, activities=[create_ticket_titled], interceptors=[KeyInterceptor(upgraded_at=later)])
        async with old, upgraded:
            wid = f"{customer}-wf"
            h = await client.start_workflow(Planned.run, Plan(customer, tool_queue=tools), id=wid, task_queue=queue)
            await h.result()
            activity_id = ""
            async for e in h.fetch_history_events():
                if (
                    e.HasField("activity_task_scheduled_event_attributes")
                    and e.activity_task_scheduled_event_attributes.activity_type.name == "create_ticket_titled"
                ):
                    activity_id = e.activity_task_scheduled_event_attributes.activity_id
            return wid, activity_id

    wid, activity_id = asyncio.run(main())
    row = db.execute("SELECT idem_key FROM ticket WHERE customer_id = %s", (customer,)).fetchone()
    assert row is not None and row[0] == legacy_key(wid, activity_id, "create_ticket"), (row, activity_id)


def test_a_call_a_signal_handler_makes_before_the_run_starts_gets_its_key(db: psycopg.Connection) -> None:
    """With signal-with-start the handler runs in the first activation,
    before the run's own code: its call is named from the run's start
    like any other (it failed the workflow task when the lineage was read
    only as the run's code started)."""
    need("IDEMFLOW_URL")
    customer = f"py-signal-{uuid.uuid4().hex[:8]}"
    queue = f"signal-{customer}"

    async def main() -> list[str]:
        client = await Client.connect(need("TEMPORAL_ADDRESS"), namespace=need("TEMPORAL_NAMESPACE"))
        async with Worker(client, task_queue=queue, workflows=[Signalled], activities=[create_ticket], interceptors=[KeyInterceptor()]):
            h = await client.start_workflow(Signalled.run, id=f"{customer}-wf", task_queue=queue, start_signal="open", start_signal_args=[Run(customer)])
            return await asyncio.wait_for(h.result(), timeout=30)

    keys = asyncio.run(main())
    assert len(keys) == 1 and keys[0].startswith("tp3_"), keys
    assert count(db, "ticket", customer) == 1
