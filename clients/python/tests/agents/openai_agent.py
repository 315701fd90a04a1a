"""An OpenAI Agents SDK agent on its own (no Temporal) for the kill tests
(test_openai_agents.py): a real Agent and Runner, a deterministic fake
model, and one tool that creates a ticket through idemflow. Run again with
the same --thread, it resumes from the RunState it saved.

    python -m tests.agents.openai_agent --thread T --state FILE [--tools idemflow|naive] [--unsafe] [--lost] [--key-scheme oa2|oa1]

with IDEMFLOW_URL and IDEMFLOW_TOKEN set.

The durable way (default) is run_durably: the tool needs approval, and
the RunState is saved, with the call's IDs, before the call runs.
--unsafe is the setting the README warns about: no approval, nothing
saved, so a run killed mid call starts again and the model writes the
call again. --tools naive makes the control: a fresh key on every call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, RunConfig, Runner
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.tool_context import ToolContext
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic import BaseModel

import idemflow
from idemflow.openai_agents import idemflow_function_tool, run_durably


class Ticket(BaseModel):
    customer_id: str
    title: str


class ScriptedModel(Model):
    """Asks for one ticket until a tool's output is in its input, then
    answers; after a tool error it asks again. Each call it writes has new
    IDs (a function-call item ID and a call ID), as a real model's: only a
    saved RunState keeps them. With call_id set, every call reuses that
    call ID, as a provider that numbers calls per response does; item_id
    set to the SDK's placeholder is a Chat Completions model's item."""

    def __init__(self, customer: str, call_id: str | None = None, item_id: str | None = None) -> None:
        self.customer = customer
        self.call_id = call_id
        self.item_id = item_id
        #: Every tool output the model was handed, as it read them.
        self.outputs: list[str] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        items = input if isinstance(input, list) else []
        # The turn: what follows the last user message.
        users = [n for n, i in enumerate(items) if isinstance(i, dict) and i.get("role") == "user"]
        items = items[users[-1] + 1 :] if users else items
        outputs = [str(i.get("output")) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        self.outputs = outputs
        # After an answer, done; after an error, ask again (a new call, as a
        # model writes one), up to twice.
        if outputs and (not outputs[-1].startswith("An error occurred") or len(outputs) >= 2):
            text = ResponseOutputText(type="output_text", text="The ticket is open.", annotations=[])
            out: Any = ResponseOutputMessage(id=f"msg_{uuid.uuid4().hex}", type="message", role="assistant", status="completed", content=[text])
        else:
            out = ResponseFunctionToolCall(
                type="function_call",
                id=self.item_id or f"fc_{uuid.uuid4().hex}",
                call_id=self.call_id or f"call_{uuid.uuid4().hex}",
                name="create_ticket",
                arguments=json.dumps({"customer_id": self.customer, "title": "Printer on fire"}),
            )
        return ModelResponse(output=[out], usage=Usage(), response_id=f"resp_{uuid.uuid4().hex}")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def naive_tool(client: idemflow.AsyncClient, needs_approval: bool) -> FunctionTool:
    async def invoke(ctx: ToolContext[Any], raw: str) -> str:
        # The bug of the incident: a key made at call time, new on every call.
        r = await client.do(idemflow.Intent(str(uuid.uuid4()), "/v1/tickets", json.loads(raw)))
        return json.dumps({"http_status": r.status, "replayed": r.replayed, "result": r.body})

    return FunctionTool(
        name="create_ticket",
        description="Create a support ticket.",
        params_json_schema=Ticket.model_json_schema(),
        on_invoke_tool=invoke,
        strict_json_schema=False,
        needs_approval=needs_approval,
    )


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thread", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--tools", default="idemflow", choices=["idemflow", "naive"])
    ap.add_argument("--unsafe", action="store_true")
    ap.add_argument("--lost", action="store_true", help="the saved RunState is gone: the app sends the turn again")
    ap.add_argument("--key-scheme", default="oa2", choices=["oa2", "oa1"])
    a = ap.parse_args()
    if a.lost:
        Path(a.state).unlink(missing_ok=True)
    # The client's attempts time out fast, so that a dropped answer is
    # retried at once (the kill comes first).
    async with idemflow.AsyncClient(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5) as c:
        if a.tools == "naive":
            tool = naive_tool(c, needs_approval=not a.unsafe)
        else:
            tool = idemflow_function_tool(
                c,
                name="create_ticket",
                description="Create a support ticket.",
                path="/v1/tickets",
                args_schema=Ticket,
                needs_approval=not a.unsafe,
                key_scheme=a.key_scheme,
            )
        agent = Agent(name="support", instructions="Open a ticket for the customer.", tools=[tool], model=ScriptedModel(a.thread))
        config = RunConfig(group_id=a.thread, tracing_disabled=True)

        if a.unsafe:
            print(f"starting {a.thread} (nothing saved)", flush=True)
            result = await Runner.run(agent, "My printer is on fire.", run_config=config)
        else:

            async def load() -> str | None:
                try:
                    with open(a.state) as f:
                        print(f"resuming {a.thread} from its saved RunState", flush=True)
                        return f.read()
                except FileNotFoundError:
                    print(f"starting {a.thread}", flush=True)
                    return None

            async def save(state: str) -> None:
                tmp = a.state + ".tmp"
                with open(tmp, "w") as f:
                    f.write(state)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, a.state)
                print("saved", flush=True)

            result = await run_durably(agent, "My printer is on fire.", run_config=config, load=load, save=save)

        for item in result.new_items:
            if item.type == "tool_call_output_item":
                print(f"tool create_ticket {item.output}", flush=True)
        print(f"DONE {result.final_output}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
