"""The official Python SDK's 1.x task client (mcp 1.30, which CrewAI
requires: session.experimental, MCP 2025-11-25 tasks) drives idemflow's
task path through idemflow.mcp.call_as_task, over stdio to idemflow mcp
and over streamable HTTP:
a task made up front, its result the call's own; a deadline that ends
first is DeadlineError, and the same key later a replay; a call idemflow
refused is its words, with no task."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamablehttp_client

from idemflow.errors import DeadlineError
from idemflow.mcp import call_as_task, is_error, result_text

from ..conftest import need


@asynccontextmanager
async def over_stdio() -> AsyncIterator[ClientSession]:
    env = {**get_default_environment(), **{k: need(k) for k in ("IDEMFLOW_URL", "IDEMFLOW_TOKEN", "IDEMFLOW_TOOLS")}}
    async with stdio_client(StdioServerParameters(command=need("IDEMFLOW_BIN"), args=["mcp"], env=env)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def over_http() -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {need('IDEMFLOW_TOKEN')}"}
    async with streamablehttp_client(need("IDEMFLOW_MCP_URL"), headers=headers) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


TRANSPORTS = {"stdio": over_stdio, "streamable HTTP": over_http}


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_the_sdks_task_client_gets_a_task_and_reads_the_calls_result(transport: str) -> None:
    assert version("mcp").startswith("1."), f"this environment's mcp is {version('mcp')}: the test is of the 1.x task client"

    async def main() -> None:
        async with TRANSPORTS[transport]() as session:
            assert hasattr(session.experimental, "call_tool_as_task")
            args: dict[str, Any] = {"idempotency_key": "written-by-the-model", "payment_id": f"p-{uuid.uuid4().hex[:8]}", "amount_cents": 100}

            async def durably(key: str, deadline: float) -> Any:
                return await call_as_task(session, "slow_refund", args, key=key, resume="call again under the same key", deadline=deadline)

            key = f"py-mcp1-{uuid.uuid4()}"
            start = time.monotonic()
            first = await durably(key, 30)
            took = time.monotonic() - start
            assert not is_error(first) and first.structuredContent is not None, result_text(first)
            assert first.structuredContent["replayed"] is False, first
            assert took > 3, f"answered after {took:.1f} s, before the service did"

            cut = f"py-mcp1-{uuid.uuid4()}"
            start = time.monotonic()
            with pytest.raises(DeadlineError):
                await durably(cut, 1.5)
            bound = time.monotonic() - start
            assert bound < 3, f"a 1.5 s deadline ended after {bound:.1f} s"
            again = await durably(cut, 30)
            assert not is_error(again) and again.structuredContent is not None and again.structuredContent["replayed"] is True, again

            no_amount = {"idempotency_key": "k", "payment_id": "p-1"}
            refused = await call_as_task(session, "slow_refund", no_amount, key=f"py-mcp1-{uuid.uuid4()}", resume="", deadline=30)
            assert is_error(refused), refused
            print(
                f"mcp {version('mcp')}'s task client over {transport}: a 4 s call waited on its task ({took:.1f} s, replayed=False);"
                f" a 1.5 s deadline ended after {bound:.1f} s; the same key again: replayed=True; refused arguments: {result_text(refused)[:120]!r}"
            )

    asyncio.run(main())
