"""A LlamaIndex agent for the kill tests (test_llamaindex.py): idemflow's
FunctionAgent (LlamaIndex's, which names the turn and the call) with a
deterministic scripted model and one tool that creates a ticket through
idemflow, run by run_durably, which saves its context to --state at each
call's stop. Run again with the same --thread and --state, it restores
the turn it was killed in.

    python -m tests.agents.llamaindex_agent --thread T --state FILE [--tools idemflow|naive] [--unsafe] [--calls N] [--key-scheme li3|li2|li1] [--via mcp]

--via mcp reaches create_ticket through idemflow's MCP server (idemflow
mcp over stdio, the mcp package's ClientSession; IDEMFLOW_BIN names it):
the model writes an idempotency_key of its own, new each time it writes
the call; --tools idemflow makes the tool mcp_tools', --tools naive leaves
the key to the model.

with IDEMFLOW_URL and IDEMFLOW_TOKEN set. --tools naive is the control
(a fresh key on every call, the same saving and restoring). --unsafe is
what an app whose saved context is lost can do: send the message again,
a turn in which the model writes the call again under a new tool_id (the
same intended call under li3 (li2 before it); a new key under li1, --key-scheme li1).
"""

import argparse
import asyncio
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core.llms import ChatMessage, ChatResponse, MessageRole
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from pydantic import BaseModel

import idemflow
from idemflow.llamaindex import FunctionAgent, idemflow_tool, mcp_tools, run_durably


class Ticket(BaseModel):
    customer_id: str
    title: str


class ScriptedModel(MockFunctionCallingLLM):
    """Asks for `calls` tickets in one answer, each with its own title,
    until a tool's answer is the last message, then answers. Each call it
    writes has a new ID, as a real model's; with call_id set, the first
    call of every answer reuses that ID, as a provider that numbers calls
    per answer does. identical: the calls ask for the same ticket; reword:
    the title is new on every answer."""

    customer: str = ""
    calls: int = 1
    call_id: str | None = None
    identical: bool = False
    reword: bool = False
    #: The call carries an idempotency_key the model wrote (an MCP tool of
    #: idemflow's takes one), new each time it writes the call.
    model_key: bool = False
    runs: int = 0

    async def achat(self, messages: Sequence[ChatMessage], **kw: Any) -> ChatResponse:
        if messages and messages[-1].role == MessageRole.TOOL:
            # What the model reads of the calls: each answer once, under
            # its call's ID (the kill tests read this line).
            answered = [m.additional_kwargs.get("tool_call_id") for m in messages if m.role == MessageRole.TOOL]
            # (A call restored from a saved memory is a dict.)
            asked = [c["tool_id"] if isinstance(c, dict) else c.tool_id for m in messages for c in m.additional_kwargs.get("tool_calls", [])]
            print(f"model reads {json.dumps({'asked': asked, 'answered': answered})}", flush=True)
            return ChatResponse(message=ChatMessage(role="assistant", content="The ticket is open."))
        self.runs += 1
        again = f" ({self.runs})" if self.reword else ""
        calls = [
            ToolSelection(
                tool_id=(self.call_id if self.call_id and i == 0 else f"call_{uuid.uuid4().hex[:12]}"),
                tool_name="create_ticket",
                tool_kwargs={
                    **({"idempotency_key": str(uuid.uuid4())} if self.model_key else {}),
                    "customer_id": self.customer,
                    "title": "Printer on fire" + (f" #{i + 1}" if i and not self.identical else "") + again,
                },
            )
            for i in range(self.calls)
        ]
        return ChatResponse(message=ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": calls}))

    def get_tool_calls_from_response(self, response: ChatResponse, error_on_no_tool_call: bool = True, **kw: Any) -> list[ToolSelection]:
        calls: list[ToolSelection] = response.message.additional_kwargs.get("tool_calls", [])
        return calls


def naive_tool(client: idemflow.AsyncClient) -> FunctionTool:
    """The bug of the incident: a key made at call time, new on every call."""

    async def create_ticket(customer_id: str, title: str) -> str:
        r = await client.do(idemflow.Intent(str(uuid.uuid4()), "/v1/tickets", {"customer_id": customer_id, "title": title}))
        return json.dumps({"http_status": r.status, "replayed": r.replayed, "result": r.body})

    return FunctionTool.from_defaults(async_fn=create_ticket, name="create_ticket", description="Create a support ticket.")


def naive_mcp_tool(session: ClientSession) -> FunctionTool:
    """create_ticket through idemflow's MCP server, its key the model's."""

    async def create_ticket(**kwargs: Any) -> str:
        result = await session.call_tool("create_ticket", kwargs)
        return "".join(getattr(c, "text", "") for c in result.content)

    return FunctionTool.from_defaults(async_fn=create_ticket, name="create_ticket", description="Create a support ticket.")


def agent(
    client: idemflow.AsyncClient,
    customer: str,
    naive: bool = False,
    calls: int = 1,
    call_id: str | None = None,
    key_scheme: str = "li3",
    identical: bool = False,
    reword: bool = False,
    tool: FunctionTool | None = None,
) -> FunctionAgent:
    """The agent; tool, where given, is its create_ticket (one through MCP,
    whose model writes a key of its own)."""
    model_key = tool is not None
    if tool is None:
        description = "Create a support ticket."
        tool = (
            naive_tool(client)
            if naive
            else idemflow_tool(client, name="create_ticket", description=description, path="/v1/tickets", args_schema=Ticket, key_scheme=key_scheme)
        )
    model = ScriptedModel(customer=customer, calls=calls, call_id=call_id, identical=identical, reword=reword, model_key=model_key)
    return FunctionAgent(tools=[tool], llm=model, streaming=False)


def tool_answers(state: Path) -> list[str]:
    """The tool answers of the last turn, as the model read them."""
    memory = json.loads(state.read_text())["memory"]
    last_user = max(i for i, m in enumerate(memory) if m["role"] == "user")
    return [b["text"] for m in memory[last_user:] if m["role"] == "tool" for b in m["blocks"] if b.get("block_type") == "text"]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thread", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--tools", default="idemflow", choices=["idemflow", "naive"])
    ap.add_argument("--unsafe", action="store_true")
    ap.add_argument("--calls", type=int, default=1, help="tickets the model asks for in one answer")
    ap.add_argument("--key-scheme", default="li3", choices=["li3", "li2", "li1"])
    ap.add_argument("--via", default="function", choices=["function", "mcp"])
    ap.add_argument("--later", help="a later turn's message, sent in place of the resume (before the last turn was restored)")
    a = ap.parse_args()
    state = Path(a.state)
    # The client's attempts time out fast, so that a dropped answer is
    # retried at once (the kill comes first).
    async with idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5) as c:
        if a.unsafe:
            # No saved context: all the app can do is send the message again.
            state.unlink(missing_ok=True)
        resumed = state.exists() and json.loads(state.read_text())["running"]
        print(f"{'resuming' if resumed else 'starting'} {a.thread}", flush=True)
        user_msg = a.later if a.later else None if resumed else "My printer is on fire."
        if a.via == "mcp":
            env = {**get_default_environment(), "IDEMFLOW_URL": os.environ["IDEMFLOW_URL"], "IDEMFLOW_TOKEN": os.environ["IDEMFLOW_TOKEN"]}
            params = StdioServerParameters(command=os.environ["IDEMFLOW_BIN"], args=["mcp"], env=env)
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                tool = naive_mcp_tool(session) if a.tools == "naive" else (await mcp_tools(session, names=["create_ticket"]))[0]
                result = await run_durably(agent(c, a.thread, calls=a.calls, tool=tool), state, user_msg=user_msg)
        else:
            result = await run_durably(agent(c, a.thread, naive=a.tools == "naive", calls=a.calls, key_scheme=a.key_scheme), state, user_msg=user_msg)
        for answer in tool_answers(state):
            print(f"tool create_ticket {json.dumps(json.loads(answer))}", flush=True)
        print(f"DONE {result}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
