"""The official MCP Python SDK (the mcp package) as a real client of
idemflow's MCP server, over stdio (`idemflow mcp`) and over streamable
HTTP: nothing of idemflow's own client code sits between them."""

from __future__ import annotations

import asyncio
import json
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx2
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client

from idemflow.errors import DeadlineError
from idemflow.mcp import call_until_answered

from .conftest import docs_block, need

META_KEY = "io.idemflow/idempotency-key"


@asynccontextmanager
async def over_stdio() -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=need("IDEMFLOW_BIN"),
        args=["mcp"],
        env={
            **get_default_environment(),
            "IDEMFLOW_URL": need("IDEMFLOW_URL"),
            "IDEMFLOW_TOKEN": need("IDEMFLOW_TOKEN"),
            "IDEMFLOW_TOOLS": need("IDEMFLOW_TOOLS"),
        },
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def over_http(url: str | None = None) -> AsyncIterator[ClientSession]:
    """A session with idemflow mcp --http at url (the stack's by default)."""
    headers = {"Authorization": f"Bearer {need('IDEMFLOW_TOKEN')}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url or need("IDEMFLOW_MCP_URL"), http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


def text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


TRANSPORTS: dict[str, Callable[[], AbstractAsyncContextManager[ClientSession]]] = {"stdio": over_stdio, "streamable HTTP": over_http}


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_the_official_mcp_sdk_calls_idemflows_tools(transport: str) -> None:
    async def main() -> None:
        async with TRANSPORTS[transport]() as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert {"create_ticket", "create_order", "get_operation"} <= set(tools), sorted(tools)
            assert "title" in tools["create_ticket"].input_schema["properties"]

            key = f"py-mcp-{uuid.uuid4()}"
            args = {"idempotency_key": "written-by-the-model", "customer_id": "c-mcp-py", "title": "via the MCP SDK"}
            # The client's durable key, in _meta, names the intent, whatever
            # key the model wrote.
            first = await session.call_tool("create_ticket", args, meta={META_KEY: key})
            again = await session.call_tool("create_ticket", {**args, "idempotency_key": "another-from-the-model"}, meta={META_KEY: key})
            assert not first.is_error and not again.is_error, (text(first), text(again))
            one, two = first.structured_content, again.structured_content
            assert one is not None and two is not None
            assert (one["replayed"], two["replayed"]) == (False, True)
            assert two["result"]["ticket_id"] == one["result"]["ticket_id"]
            assert one["result"]["idempotency_key"] == key
            assert json.loads(text(first))["result"]["ticket_id"] == one["result"]["ticket_id"], "the text a model reads is the same JSON"
            print(f"MCP over {transport}: replay of {one['result']['ticket_id']}: replayed={two['replayed']}")

            changed = await session.call_tool("create_ticket", {**args, "title": "changed"}, meta={META_KEY: key})
            assert changed.is_error and "CONFLICT" in text(changed), text(changed)

            bad = await session.call_tool("create_ticket", {"idempotency_key": f"py-bad-{uuid.uuid4()}", "customer_id": "c-mcp-py", "title": 7})
            assert bad.is_error and "title" in text(bad), text(bad)
            print(f"MCP over {transport}: changed arguments: {text(changed)[:90]}...; bad arguments: {text(bad)[:120]}")

    asyncio.run(main())


def test_the_docs_meta_call_runs_in_a_session() -> None:
    """docs/agents.md's one call with a durable key in _meta, as written,
    inside a real session: the names it uses (session, thread_id,
    call_id) are the function's parameters, and its import runs too."""
    block = docs_block("With the official Python SDK (the `mcp` package):")
    scope: dict[str, Any] = {}
    exec("async def snippet(session, thread_id, call_id):\n" + textwrap.indent(block, "    "), scope)
    thread_id, call_id = f"docs-{uuid.uuid4()}", "call-1"

    async def main() -> None:
        async with over_http() as session:
            await scope["snippet"](session, thread_id, call_id)
            await scope["snippet"](session, thread_id, call_id)
            # The key the snippet derived names one intent: a third call
            # under it, with another model-written key, is its replay.
            from idemflow import derive_key

            key = derive_key("mcp1", thread_id, call_id, "create_ticket")
            args = {"idempotency_key": "another", "customer_id": "c-1", "title": "Printer on fire"}
            again = await session.call_tool("create_ticket", args, meta={META_KEY: key})
            assert not again.is_error, text(again)
            assert again.structured_content is not None and again.structured_content["replayed"] is True, text(again)
            assert again.structured_content["result"]["idempotency_key"] == key

    asyncio.run(main())


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_a_call_that_outlasts_its_wait_waits_on_its_task(transport: str) -> None:
    """slow_refund's service takes 4 s. A call that bounds its wait at 1 s
    gets NO ANSWER YET with its task (the SDK cannot ask for one up
    front), and call_until_answered waits on the task: the call's own
    answer, not a replay, and never the words. A deadline shorter than
    the call raises DeadlineError; the same key later gets the first
    call's answer, a replay."""

    async def main() -> None:
        async with TRANSPORTS[transport]() as session:
            args = {"idempotency_key": "written-by-the-model", "payment_id": f"p-{uuid.uuid4().hex[:8]}", "amount_cents": 100}

            async def durably(key: str, deadline: float) -> Any:
                return await call_until_answered(
                    lambda meta: session.call_tool("slow_refund", args, meta=meta),
                    session,
                    key=key,
                    tool="slow_refund",
                    resume="call again under the same key",
                    deadline=deadline,
                    wait=1.0,
                )

            key = f"py-mcp-slow-{uuid.uuid4()}"
            start = time.monotonic()
            first = await durably(key, 30)
            took = time.monotonic() - start
            assert not first.is_error, text(first)
            assert first.structured_content is not None and first.structured_content["replayed"] is False, first
            assert took > 3, f"answered after {took:.1f} s, before the service did"

            cut = f"py-mcp-slow-{uuid.uuid4()}"
            start = time.monotonic()
            with pytest.raises(DeadlineError) as pending:
                await durably(cut, 1.5)
            bound = time.monotonic() - start
            assert bound < 3, f"a 1.5 s deadline ended after {bound:.1f} s"
            again = await durably(cut, 30)
            assert not again.is_error and again.structured_content is not None and again.structured_content["replayed"] is True, again
            print(
                f"MCP over {transport}: a 4 s call waited on its task ({took:.1f} s, replayed=False);"
                f" a 1.5 s deadline ended after {bound:.1f} s ({pending.value}); the same key again: replayed=True"
            )

    asyncio.run(main())


def test_the_docs_http_session_runs(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agents/mcp.md's Python session over streamable HTTP, as
    written but for the URL (the test stack's idemflow mcp --http): it
    connects with the bearer token and lists idemflow's tools; a wrong
    token is refused before any session opens."""
    block = docs_block("this; the session is what every Python wrapper below takes:")
    assert '"http://127.0.0.1:8090/"' in block
    code = block.replace('"http://127.0.0.1:8090/"', repr(need("IDEMFLOW_MCP_URL")))
    scope: dict[str, Any] = {"__name__": "docs"}
    exec(compile(code, "docs/agents/mcp.md", "exec"), scope)
    asyncio.run(scope["main"]())
    listed = capsys.readouterr().out
    print(f"the docs' session listed {listed.strip()}")
    assert "create_ticket" in listed and "create_order" in listed, listed
    # The SDK reports the server's 401 as an MCP error; nothing is listed.
    monkeypatch.setenv("IDEMFLOW_TOKEN", "idf_not_a_token_of_anyone")
    capsys.readouterr()
    with pytest.raises(Exception, match="unhandled errors in a TaskGroup") as refused:
        asyncio.run(scope["main"]())
    assert refused.group_contains(MCPError), repr(refused.value)
    assert capsys.readouterr().out == ""
