"""A CrewAI flow for the kill tests (test_crewai.py): a real Flow with
@persist on SQLite, a method whose crew has one agent, a deterministic
scripted model that speaks CrewAI's ReAct format, and one tool that
creates a ticket through idemflow. Run again with the same --thread and
--state, the flow is restored from its persisted state and the unfinished
method runs again, as CrewAI resumes a flow.

    python -m tests.crewai.crewai_agent --thread T --state FILE [--tools idemflow|naive] [--drift] [--via mcp]

with IDEMFLOW_URL and IDEMFLOW_TOKEN set (and IDEMFLOW_BIN for --via mcp).
--tools naive is the control (a fresh key on every call); --drift makes
the model write other arguments on every run (the limit the docs name).
--via mcp reaches create_ticket through idemflow's MCP server (idemflow
mcp over stdio): the model writes an idempotency_key of its own, new each
time it writes the call; --tools idemflow makes the tool
idemflow.crewai.mcp_tools', --tools naive CrewAI's own MCP tools
(Agent(mcps=[...])), where the model's key decides.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import uuid
from typing import Any

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

from crewai import Agent, Crew, Task
from crewai.flow.flow import Flow, start
from crewai.flow.persistence import persist
from crewai.flow.persistence.sqlite import SQLiteFlowPersistence
from crewai.llms.base_llm import BaseLLM
from crewai.mcp import MCPServerStdio
from crewai.tools import BaseTool
from pydantic import BaseModel

import idemflow
from idemflow.crewai import IdemflowTool, mcp_tools


class Ticket(BaseModel):
    customer_id: str
    title: str


class ScriptedModel(BaseLLM):
    """Asks for `calls` tickets, each with its own title, one after another,
    then answers. After a pending answer it asks again, at most `retries`
    times, with the title reworded, as a model does that reads a failure.
    With drift, every title differs on every run, as a model that writes
    the call otherwise when asked again. With model_key, each call carries
    an idempotency_key of the model's, new each time (an MCP tool's). The
    tool is the one listed whose name ends in create_ticket (CrewAI's own
    MCP tools are named after their server)."""

    customer: str = ""
    calls: int = 1
    retries: int = 2
    drift: bool = False
    model_key: bool = False

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None, **kwargs: Any) -> str:
        texts = [str(m.get("content", "")) for m in messages] if isinstance(messages, list) else [str(messages)]
        answers = [t for t in texts if '{"http_status"' in t]
        if answers:
            last = answers[-1]
            ANSWERS[:] = [json.dumps(json.JSONDecoder().raw_decode(last[last.rindex('{"http_status"') :])[0])]
        joined = "\n".join(texts)
        answered = joined.count('Observation: {"http_status"')
        pending = joined.count("pending under key")
        if answered >= self.calls or pending > self.retries:
            return "Thought: I now know the final answer\nFinal Answer: The ticket is open."
        title = "Printer on fire" + (f" #{answered + 1}" if answered else "") + (" (asked again)" * pending)
        title += f" ({uuid.uuid4().hex[:6]})" if self.drift else ""
        call: dict[str, Any] = {"customer_id": self.customer, "title": title}
        if self.model_key:
            call = {"idempotency_key": str(uuid.uuid4()), **call}
        listed = re.search(r"Tool Name: (\S*create_ticket)\b", joined)
        return f"Thought: I should open a ticket\nAction: {listed.group(1) if listed else 'create_ticket'}\nAction Input: {json.dumps(call)}"

    def supports_function_calling(self) -> bool:
        return False

    def supports_stop_words(self) -> bool:
        return True

    def get_context_window_size(self) -> int:
        return 8192


class NaiveTool(BaseTool):
    """The bug of the incident: a key made at call time, new on every call."""

    name: str = "create_ticket"
    description: str = "Create a support ticket."
    args_schema: type[BaseModel] = Ticket
    client: Any = None

    def _run(self, **kwargs: Any) -> str:
        r = self.client.do(idemflow.Intent(str(uuid.uuid4()), "/v1/tickets", kwargs))
        return json.dumps({"http_status": r.status, "replayed": r.replayed, "result": r.body})


#: The tool answers of this process's run, as the agent read them.
ANSWERS: list[str] = []


class State(BaseModel):
    id: str = ""


def idemflow_mcp() -> MCPServerStdio:
    """idemflow mcp over stdio, on the test's gateway."""
    env = {"IDEMFLOW_URL": os.environ["IDEMFLOW_URL"], "IDEMFLOW_TOKEN": os.environ["IDEMFLOW_TOKEN"], "PATH": os.environ.get("PATH", "")}
    return MCPServerStdio(command=os.environ["IDEMFLOW_BIN"], args=["mcp"], env=env)


def support_flow(
    state_file: str,
    client: idemflow.Client,
    model: ScriptedModel,
    naive: bool = False,
    deadline: float = math.inf,
    cache: bool = True,
    via_mcp: bool = False,
    key_scheme: str = "cr2",
) -> Flow[State]:
    @persist(SQLiteFlowPersistence(state_file))
    class Support(Flow[State]):
        @start()
        def open_ticket(self) -> str:
            tools: list[BaseTool] = []
            mcps: list[Any] = []
            if via_mcp and naive:
                mcps = [idemflow_mcp()]  # CrewAI's own MCP tools
            elif via_mcp:
                tools = mcp_tools(idemflow_mcp(), flow=self, names=["create_ticket"], deadline=deadline)
            elif naive:
                tools = [NaiveTool(client=client)]
            else:
                tools = [
                    IdemflowTool(
                        client,
                        flow=self,
                        name="create_ticket",
                        description="Create a support ticket.",
                        path="/v1/tickets",
                        args_schema=Ticket,
                        deadline=deadline,
                        key_scheme=key_scheme,
                    )
                ]
            agent = Agent(
                role="support",
                goal="Open tickets for customers.",
                backstory="A support agent.",
                llm=model,
                tools=tools,
                mcps=mcps,
                cache=cache,
                verbose=False,
            )
            task = Task(description="Open a ticket for the customer.", expected_output="One sentence.", agent=agent)
            return str(Crew(agents=[agent], tasks=[task], verbose=False).kickoff())

    return Support()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thread", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--tools", default="idemflow", choices=["idemflow", "naive"])
    ap.add_argument("--drift", action="store_true")
    ap.add_argument("--key-scheme", default="cr2", choices=["cr2", "cr1"])
    ap.add_argument("--via", default="http", choices=["http", "mcp"])
    a = ap.parse_args()
    # The client's attempts time out fast, so that a dropped answer is
    # retried at once (the kill comes first).
    with idemflow.Client(os.environ["IDEMFLOW_URL"], os.environ["IDEMFLOW_TOKEN"], attempt_timeout=3, initial_backoff=0.05, max_backoff=0.5) as c:
        via_mcp = a.via == "mcp"
        model = ScriptedModel(model="scripted", customer=a.thread, drift=a.drift, model_key=via_mcp)
        flow = support_flow(a.state, c, model, naive=a.tools == "naive", via_mcp=via_mcp, key_scheme=a.key_scheme)
        print(f"running {a.thread}", flush=True)
        result = flow.kickoff(inputs={"id": a.thread})
        for answer in ANSWERS:
            print(f"tool create_ticket {answer}", flush=True)
        print(f"DONE {result}", flush=True)


if __name__ == "__main__":
    main()
