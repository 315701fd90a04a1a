"""A framework's call to one of idemflow's MCP tools, made durable: the key
the framework's native integration derives for the call goes in the call's
_meta, so the idempotency_key the model wrote decides nothing, and a call
whose answer has not come waits on the task idemflow names for it instead
of handing the model NO ANSWER YET.

The official Python SDK's 1.x releases (mcp 1.30, which CrewAI and
langchain-mcp-adapters require) have a task client for 2025-11-25's
tasks (session.experimental): call_as_task asks for a task up front and
waits for its result. mcp 2.3.0 has none: there the call bounds its wait
in _meta (io.idemflow/wait-ms); past it, idemflow answers NO ANSWER YET
with the task that will hold the answer
(io.modelcontextprotocol/related-task), which call_until_answered reads
with tasks/result until the caller's deadline. Past that, DeadlineError:
the framework's wrapper stops its run, which the framework's own resume
runs again under the same key.

Each framework's wrapper derives the key and calls call_until_answered
through the framework's own call path (idemflow.openai_agents, adk,
pydantic_ai), or call_as_task on an mcp ClientSession it holds
(idemflow.langgraph, llamaindex, crewai); this module knows no framework.

Needs the mcp package (the dev extra has it).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

import mcp.types as types
from mcp import ClientSession

try:
    from mcp import MCPError
except ImportError:  # mcp 1.x
    from mcp.shared.exceptions import McpError as MCPError  # type: ignore[no-redef,attr-defined,unused-ignore]

import anyio

from ._tooltext import pending_text
from .errors import DeadlineError

__all__ = [
    "META_FINGERPRINT",
    "META_INTENT",
    "META_KEY",
    "META_WAIT",
    "RELATED_TASK",
    "again_until",
    "call_as_task",
    "call_until_answered",
    "intent_fields",
    "outcome_unknown_within",
    "pending_task",
    "result_text",
    "unknown_outcome",
    "until_answered",
]

#: The _meta member that carries the call's durable key: idemflow's MCP
#: server uses it in place of the model-written idempotency_key.
META_KEY = "io.idemflow/idempotency-key"

#: The call's _meta member that says its key was derived from the tool's
#: intent fields (META_INTENT): idemflow then compares the call on them
#: alone, so a reworded call is a replay of the first.
META_FINGERPRINT = "io.idemflow/fingerprint"

#: The tool's _meta member that publishes its intent fields.
META_INTENT = "io.idemflow/intent"
#: The _meta member that bounds how long idemflow holds the call before it
#: answers NO ANSWER YET with the call's task (milliseconds).
META_WAIT = "io.idemflow/wait-ms"
#: Where a result names its task (MCP 2025-11-25).
RELATED_TASK = "io.modelcontextprotocol/related-task"


class _TaskRequest(types.Request[dict[str, Any], str]):
    """A 2025-11-25 tasks/* request, which the SDK does not define."""


def is_error(result: types.CallToolResult) -> bool:
    """Whether the server flagged result as an error (isError), under
    either major release of the mcp package."""
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", False))


def pending_task(result: types.CallToolResult) -> str | None:
    """The task a pending answer (NO ANSWER YET) names, if it names one."""
    if not is_error(result):
        return None
    related = (result.meta or {}).get(RELATED_TASK)
    task = related.get("taskId") if isinstance(related, dict) else None
    return task if isinstance(task, str) and task else None


def intent_fields(tool: types.Tool) -> tuple[dict[str, str], ...]:
    """The intent fields a tool of idemflow's MCP server publishes in its
    _meta (META_INTENT); () for a tool that publishes none."""
    meta = getattr(tool, "meta", None) or {}
    fields = meta.get(META_INTENT) or ()
    return tuple({"name": str(f["name"]), "norm": str(f["norm"])} for f in fields if isinstance(f, dict) and "name" in f and "norm" in f)


def _meta(key: str, by_intent: bool) -> dict[str, Any]:
    return {META_KEY: key, META_FINGERPRINT: "intent"} if by_intent else {META_KEY: key}


def result_text(result: types.CallToolResult) -> str:
    """The text a model reads of a tool's result: its text content."""
    return "".join(getattr(c, "text", "") for c in result.content)


#: JSON-RPC codes of a request the server refused as sent (2026-07-28 adds
#: a header mismatch and a missing capability): nothing ran.
_REFUSED = frozenset({-32700, -32600, -32601, -32602, -32020, -32021})


def unknown_outcome(e: BaseException) -> bool:
    """Whether e, raised by an MCP request, leaves its outcome unknown: a
    transport failure, a closed connection, the server's error response (a
    5xx, an internal error). A keyed call may then have run, so it is
    waited on under its key (and its run stopped the framework's way past
    the deadline), never handed to the model as an error it could retry
    under a new key. A request the server refused as sent (a malformed
    one, an unknown method or tool) is not."""
    if isinstance(e, MCPError):
        return e.error.code not in _REFUSED
    return isinstance(e, (OSError, TimeoutError, anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream))


def outcome_unknown_within(e: BaseException) -> bool:
    """unknown_outcome of e or of anything it wraps (its cause and
    context, an exception group's members): a framework wraps the MCP
    SDK's errors in its own."""
    seen: set[int] = set()
    todo: list[BaseException] = [e]
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if unknown_outcome(x):
            return True
        todo += [c for c in (x.__cause__, x.__context__) if c is not None]
        members = getattr(x, "exceptions", None)  # an exception group's
        if isinstance(members, (list, tuple)):
            todo += [m for m in members if isinstance(m, BaseException)]
    return False


def _no_answer(result: types.CallToolResult) -> bool:
    """NO ANSWER YET without a task: the gateway was out of reach for the
    whole wait, and nothing is known to be recorded."""
    return is_error(result) and any(getattr(c, "text", "").startswith("NO ANSWER YET") for c in result.content)


async def call_until_answered(
    call: Callable[[dict[str, Any]], Awaitable[types.CallToolResult]],
    session: ClientSession,
    *,
    key: str,
    tool: str,
    resume: str,
    deadline: float = 300.0,
    wait: float = 2.0,
    by_intent: bool = False,
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

    async def settle(result: types.CallToolResult, end: float) -> types.CallToolResult | None:
        task = pending_task(result)
        if task is not None:
            return await _task_result(session, task, end, key=key, tool=tool, resume=resume)
        return None if _no_answer(result) else result

    return await until_answered(call, settle, key=key, tool=tool, resume=resume, deadline=deadline, wait=wait, by_intent=by_intent)


R = TypeVar("R")


async def until_answered(
    call: Callable[[dict[str, Any]], Awaitable[R]],
    settle: Callable[[R, float], Awaitable[R | None]],
    *,
    key: str,
    tool: str,
    resume: str,
    deadline: float,
    wait: float,
    by_intent: bool = False,
) -> R:
    """call(meta) under key, each call bounding idemflow's hold to wait
    (seconds), until settle(result, end) makes a final result of one (None:
    not answered yet, nothing to wait on, so the same call again, under
    the same key, after a pause that grows to 5 s). end is the loop's time
    at deadline (seconds). Past it, DeadlineError, whose words say to
    resume, never to call anew. Any client's call: the mcp SDK's, or a
    framework's own that gives no task to wait on. by_intent: key was
    derived from the tool's intent fields (META_FINGERPRINT)."""
    end = asyncio.get_running_loop().time() + deadline

    async def attempt(left: float) -> R | None:
        return await settle(await call({**_meta(key, by_intent), META_WAIT: max(1, int(min(wait, left) * 1000))}), end)

    return await again_until(end, attempt, pending=pending_text(tool, key, resume))


async def again_until(end: float, attempt: Callable[[float], Awaitable[R | None]], *, pending: str) -> R:
    """attempt(seconds left)'s first result that is not None, asked again
    after a pause that grows to 5 s, also after an error that leaves the
    outcome unknown (a call may have run: the same call again, under its
    key); DeadlineError(pending) once end (the loop's time) comes. Every
    wrapper's wait on idemflow's MCP server."""
    loop = asyncio.get_running_loop()
    pause = 0.2
    while True:
        left = end - loop.time()
        if left <= 0:
            raise DeadlineError(pending)
        try:
            final = await attempt(left)
        except Exception as e:
            if not outcome_unknown_within(e):
                raise
            final = None
        if final is not None:
            return final
        await asyncio.sleep(min(pause, max(0.0, end - loop.time())))
        pause = min(pause * 2, 5.0)


async def _task_result(session: ClientSession, task: str, end: float, *, key: str, tool: str, resume: str) -> types.CallToolResult:
    """tasks/result of task, which idemflow holds until the task ends,
    asked again after an error that leaves it unknown; DeadlineError when
    end comes first."""

    async def attempt(left: float) -> types.CallToolResult:
        return await session.send_request(
            _TaskRequest(method="tasks/result", params={"taskId": task}),
            types.CallToolResult,
            request_read_timeout_seconds=_timeout(left),
        )

    return await again_until(end, attempt, pending=pending_text(tool, key, resume))


def _timeout(seconds: float) -> Any:
    """A request's read timeout as the installed mcp takes it: seconds
    (2.x), a timedelta (1.x); None for no bound."""
    if math.isinf(seconds):
        return None
    return timedelta(seconds=seconds) if _MCP1 else seconds


#: The mcp package is a 1.x release (its exceptions' old name).
_MCP1 = MCPError.__name__ == "McpError"


async def call_as_task(
    session: ClientSession,
    name: str,
    arguments: dict[str, Any],
    *,
    key: str,
    resume: str,
    deadline: float = 300.0,
    by_intent: bool = False,
) -> types.CallToolResult:
    """The final result of one call of tool name under key, through the
    SDK's own task client where it has one (mcp 1.x's
    session.experimental, MCP 2025-11-25 tasks): the call asks for a task,
    with key in its _meta, and waits for the task's result up to deadline
    (seconds; math.inf: no bound). The result is exactly the call's
    (replayed as the call would have said). A call idemflow never recorded
    gets no task: one whose gateway was out of reach is sent again under
    the same key; one refused (its arguments, a reused key) is the
    refusal's words, as the tool's error. Past deadline, DeadlineError,
    whose words say to resume, never to call anew. Where the SDK has no
    task client (mcp 2.x), call_until_answered over session.call_tool.
    by_intent: key was derived from the tool's intent fields, which the
    call says (META_FINGERPRINT), so a reworded call is a replay."""
    tasks: Any = getattr(session, "experimental", None)
    if not hasattr(tasks, "call_tool_as_task"):
        return await call_until_answered(
            lambda m: session.call_tool(name, arguments, meta=cast(Any, m)), session, key=key, tool=name, resume=resume, deadline=deadline, by_intent=by_intent
        )
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    pause = 0.2

    def left() -> float:
        remaining = end - loop.time()
        if remaining <= 0:
            raise DeadlineError(pending_text(name, key, resume))
        return remaining

    while True:
        try:
            created = await asyncio.wait_for(tasks.call_tool_as_task(name, arguments, meta=_meta(key, by_intent)), _bound(left()))
            break
        except TimeoutError as e:
            raise DeadlineError(pending_text(name, key, resume)) from e
        except MCPError as e:
            words = str(e).removeprefix("no task was created: ")
            if not words.startswith("NO ANSWER YET") and e.error.code in _REFUSED:
                return types.CallToolResult(content=[types.TextContent(type="text", text=words)], isError=True)  # type: ignore[call-arg,unused-ignore]
        except Exception as e:
            if not outcome_unknown_within(e):
                raise
        # Nothing known to be recorded (the gateway or the server out of
        # reach, a closed connection): the same call again.
        await asyncio.sleep(min(pause, left()))
        pause = min(pause * 2, 5.0)
    while True:
        try:
            return await asyncio.wait_for(tasks.get_task_result(created.task.taskId, types.CallToolResult), _bound(left()))
        except TimeoutError as e:
            raise DeadlineError(pending_text(name, key, resume)) from e
        except Exception as e:
            if not outcome_unknown_within(e):
                raise
        await asyncio.sleep(min(pause, left()))
        pause = min(pause * 2, 5.0)


def _bound(seconds: float) -> float | None:
    return None if math.isinf(seconds) else seconds
