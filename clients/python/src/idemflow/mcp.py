"""A framework's call to one of idemflow's MCP tools, made durable: the key
the framework's native integration derives for the call goes in the call's
_meta, so the idempotency_key the model wrote decides nothing, and a call
whose answer has not come waits on the task idemflow names for it instead
of handing the model NO ANSWER YET.

The official Python SDK (the mcp package, 2.3.0) has no task client: it
cannot ask for a task up front. So the call bounds its wait in _meta
(io.idemflow/wait-ms); past it, idemflow answers NO ANSWER YET with the
task that will hold the answer (io.modelcontextprotocol/related-task),
which this reads with 2025-11-25's tasks/result until the caller's
deadline. Past that, DeadlineError: the framework's wrapper stops its run,
which the framework's own resume runs again under the same key.

Each framework's wrapper (idemflow.openai_agents.durable_mcp_server, …)
derives the key and calls call_until_answered; this module knows no
framework.

Needs the mcp package (the dev extra has it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as types
from mcp import ClientSession, MCPError

from ._tooltext import pending_text
from .errors import DeadlineError

__all__ = ["META_KEY", "META_WAIT", "RELATED_TASK", "call_until_answered", "pending_task", "result_text"]

#: The _meta member that carries the call's durable key: idemflow's MCP
#: server uses it in place of the model-written idempotency_key.
META_KEY = "io.idemflow/idempotency-key"
#: The _meta member that bounds how long idemflow holds the call before it
#: answers NO ANSWER YET with the call's task (milliseconds).
META_WAIT = "io.idemflow/wait-ms"
#: Where a result names its task (MCP 2025-11-25).
RELATED_TASK = "io.modelcontextprotocol/related-task"


class _TaskRequest(types.Request[dict[str, Any], str]):
    """A 2025-11-25 tasks/* request, which the SDK does not define."""


def pending_task(result: types.CallToolResult) -> str | None:
    """The task a pending answer (NO ANSWER YET) names, if it names one."""
    if not result.is_error:
        return None
    related = (result.meta or {}).get(RELATED_TASK)
    task = related.get("taskId") if isinstance(related, dict) else None
    return task if isinstance(task, str) and task else None


def result_text(result: types.CallToolResult) -> str:
    """The text a model reads of a tool's result: its text content."""
    return "".join(getattr(c, "text", "") for c in result.content)


def _no_answer(result: types.CallToolResult) -> bool:
    """NO ANSWER YET without a task: the gateway was out of reach for the
    whole wait, and nothing is known to be recorded."""
    return bool(result.is_error) and any(getattr(c, "text", "").startswith("NO ANSWER YET") for c in result.content)


async def call_until_answered(
    call: Callable[[dict[str, Any]], Awaitable[types.CallToolResult]],
    session: ClientSession,
    *,
    key: str,
    tool: str,
    resume: str,
    deadline: float = 300.0,
    wait: float = 2.0,
) -> types.CallToolResult:
    """The final result of one tool call: call(meta) sends it (the
    framework's own path, with meta, which holds key, merged into the
    call's _meta) and is called again, under the same key, only where no
    task names the call. A pending answer is waited on with tasks/result
    over session until deadline (seconds): the task's result is exactly
    the call's (replayed as the call would have said). Past deadline,
    DeadlineError, whose words say to resume, never to call anew.

    wait (seconds) is how long idemflow holds each call before it answers
    with the task: keep it below the framework's read timeout of a call."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    pause = 0.2
    while True:
        left = end - loop.time()
        if left <= 0:
            raise DeadlineError(pending_text(tool, key, resume))
        result = await call({META_KEY: key, META_WAIT: max(1, int(min(wait, left) * 1000))})
        task = pending_task(result)
        if task is not None:
            return await _task_result(session, task, end, key=key, tool=tool, resume=resume)
        if not _no_answer(result):
            return result
        await asyncio.sleep(min(pause, max(0.0, end - loop.time())))
        pause = min(pause * 2, 5.0)


async def _task_result(session: ClientSession, task: str, end: float, *, key: str, tool: str, resume: str) -> types.CallToolResult:
    """tasks/result of task, which idemflow holds until the task ends;
    DeadlineError when end comes first."""
    left = end - asyncio.get_running_loop().time()
    if left <= 0:
        raise DeadlineError(pending_text(tool, key, resume))
    try:
        return await session.send_request(
            _TaskRequest(method="tasks/result", params={"taskId": task}),
            types.CallToolResult,
            request_read_timeout_seconds=left,
        )
    except MCPError as e:
        if asyncio.get_running_loop().time() >= end:
            raise DeadlineError(pending_text(tool, key, resume)) from e
        raise
