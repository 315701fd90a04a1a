"""Resets a Temporal run to before its first call, as an operator does in
the Web UI: the tests that prove a reset re-runs no effect."""

from __future__ import annotations

import uuid

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowHandle


async def reset_to_first_task(client: Client, handle: WorkflowHandle, reason: str) -> WorkflowHandle:
    """Resets handle's run to the end of its first workflow task (the one
    that scheduled the first call) and returns the new run's handle."""
    return await reset_to_task(client, handle, 1, reason)


async def reset_to_task(client: Client, handle: WorkflowHandle, n: int, reason: str) -> WorkflowHandle:
    """Resets handle's run to the end of its n-th workflow task and returns
    the new run's handle."""
    first = 0
    async for e in handle.fetch_history_events():
        if e.HasField("workflow_task_completed_event_attributes"):
            n -= 1
            if n == 0:
                first = e.event_id
                break
    else:
        raise AssertionError(f"{handle.id}: no such workflow task to reset to")
    reset = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=handle.id, run_id=handle.result_run_id or ""),
            reason=reason,
            workflow_task_finish_event_id=first,
            request_id=str(uuid.uuid4()),
        )
    )
    return client.get_workflow_handle(handle.id, run_id=reset.run_id)
