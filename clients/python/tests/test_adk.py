"""Google ADK (idemflow.adk): a real LlmAgent, App and Runner on ADK's
SQLite session service, SIGKILLed mid tool call (the answer dropped after
idemflow executed, or the request held before it arrived) and resumed
with its invocation_id, ends with one ticket; the naive control (a fresh
key per call) makes two. An app that is not resumable, whose message is
sent again, makes one (the same intended call), and two under ad1's keys.
A rewind and the message sent again (a regenerate) replays. Also: a call ID reused by a later turn
is a second call, a pending answer ends the invocation instead of
reaching the model, and a call nothing durable names gets no key."""

from __future__ import annotations

import asyncio
import os
import textwrap
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from google.adk.apps import App, ResumabilityConfig
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.tools.mcp_tool import McpToolset, StdioConnectionParams
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from mcp import StdioServerParameters

import idemflow
from idemflow.adk import IdemflowTool, durable_key, durable_mcp_toolset, run_durably
from idemflow.errors import DeadlineError, NoDurableIdentityError

from . import children
from .agents.adk_agent import NaiveTool, ScriptedModel, Ticket, app
from .conftest import DEADLINE_SLACK, count, docs_block, need
from .wire import Fault, Proxy

CASES: list[tuple[str, Fault, tuple[str, ...], int, bool]] = [
    # name, fault, extra arguments, tickets after the kill and the rerun, the rerun's answer replayed
    ("resumed invocation, answer lost", "answer-lost", (), 1, True),
    ("resumed invocation, request held", "before-received", (), 1, False),
    ("control: fresh keys", "answer-lost", ("--tools", "naive"), 2, False),
    ("not resumable, the message sent again", "answer-lost", ("--unsafe",), 1, True),
    ("control: not resumable, ad1 keys", "answer-lost", ("--unsafe", "--key-scheme", "ad1"), 2, False),
    # Through idemflow's MCP server (ADK's McpToolset), the model writing
    # an idempotency_key of its own each time it writes the call.
    ("MCP wrapped: resumed invocation", "answer-lost", ("--via", "mcp"), 1, True),
    ("MCP wrapped: not resumable, the message sent again", "answer-lost", ("--via", "mcp", "--unsafe"), 1, True),
    ("MCP control: the model's key, the message sent again", "answer-lost", ("--via", "mcp", "--unsafe", "--tools", "naive"), 2, False),
]


@pytest.mark.parametrize("name,fault,extra,tickets,replayed", CASES, ids=[c[0] for c in CASES])
def test_a_killed_adk_agent_resumes_its_invocation_without_a_duplicate(
    name: str, fault: Fault, extra: tuple[str, ...], tickets: int, replayed: bool, url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    thread = f"py-adk-{name.split(':')[0].split(',')[-1].strip().replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    # The first POST reaches the gateway and its answer is dropped (or it
    # never arrives), and the agent is SIGKILLed while it waits; the app
    # then runs it again, the way it resumes.
    args = ["--state", str(tmp_path / "sessions.db"), *extra]
    resumed = "resuming" if extra in ((), ("--via", "mcp")) else None
    children.kill_case("tests.agents.adk_agent", name, thread, args, url, db, tickets=tickets, replayed=replayed, fault=fault, resumed=resumed)


REWINDS = [
    # name, the model's options, key scheme, tickets after the regenerate, its answers replayed
    ("the same call under a new ID", {}, "ad3", 1, [True]),
    ("two identical calls, both written again", {"calls": 2}, "ad3", 2, [True, True]),
    ("a model that rewords the call: the same intent, a replay", {"reword": True}, "ad3", 1, [True]),
    ("control: ad2 keys the whole arguments", {"reword": True}, "ad2", 2, [False]),
    ("control: ad1 keys the invocation and the call's IDs", {}, "ad1", 2, [False]),
]


@pytest.mark.parametrize("name,model,scheme,tickets,replayed", REWINDS, ids=[r[0] for r in REWINDS])
def test_a_rewind_and_the_message_sent_again_makes_the_same_call_once(
    name: str, model: dict[str, Any], scheme: str, tickets: int, replayed: list[bool], url: str, token: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    """ADK's regenerate: Runner.rewind_async to before the turn's
    invocation, and the user's message sent again. A new invocation, whose
    model writes the same call under a new ID in a new event: the same
    intended call, one ticket, a replay, also where the model words it
    otherwise (the ticket's customer is its intent): the answer names what
    differed. Two identical calls stay two; the controls key the whole
    arguments (ad2) and the invocation and the call's IDs (ad1)."""
    who = f"py-adk-rewind-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[int, list[Any], list[str]]:
        async with idemflow.AsyncClient(url, token) as c:
            tool = IdemflowTool(c, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket, key_scheme=scheme)
            runner = Runner(app=app(who, tool, **model), session_service=SqliteSessionService(str(tmp_path / "sessions.db")))
            await turn(runner, who)
            n_first = count(db, "ticket", who)
            session = await runner.session_service.get_session(app_name="support_app", user_id="u", session_id=who)
            assert session is not None
            first = session.events[0].invocation_id
            await runner.rewind_async(user_id="u", session_id=who, rewind_before_invocation_id=first)
            again = await turn(runner, who)
            session = await runner.session_service.get_session(app_name="support_app", user_id="u", session_id=who)
            assert session is not None
            ids = [f.id or "" for e in session.events for f in e.get_function_calls()]
            return n_first, again, ids

    n_first, again, ids = asyncio.run(scenario())
    n = count(db, "ticket", who)
    print(
        f"{name}: {n_first} tickets after the first turn, {n} after the rewind and the message sent again;"
        f" replayed {[a['replayed'] for a in again]}, differed {[a.get('differed') for a in again]}"
    )
    assert ids and len(set(ids)) == len(ids), f"the model wrote every call under a new ID: {ids}"
    assert (n, [a["replayed"] for a in again]) == (tickets, replayed)
    if model.get("reword") and all(replayed):
        assert [a.get("differed") for a in again] == [["title"]], again


def message(text: str = "Open a ticket.") -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def turn(runner: Runner, session: str) -> list[dict[str, Any]]:
    """One turn of the session to its end: the tool answers it produced."""
    answers = []
    async for event in run_durably(runner, user_id="u", session_id=session, new_message=message()):
        answers += [dict(r.response or {}) for r in event.get_function_responses()]
    return answers


async def pending_then_resumed(runner: Runner, who: str, proxy: Proxy) -> list[dict[str, Any]]:
    """A turn of session who across a partition longer than its tool's
    deadline (the tool raises DeadlineError, whose words say to resume,
    and the invocation ends with nothing handed to the model), then run
    again once the partition healed: the answers of the resumed turn."""
    proxy.partitioned = True
    with pytest.raises(DeadlineError) as failed:
        await turn(runner, who)
    assert "must not be made again" in str(failed.value), str(failed.value)
    session = await runner.session_service.get_session(app_name="support_app", user_id="u", session_id=who)
    assert session is not None
    handed = [r.response for e in session.events for r in e.get_function_responses()]
    assert handed == [], f"the model was handed {handed}"
    proxy.partitioned = False
    return await turn(runner, who)


def test_a_call_id_reused_in_a_later_turn_is_a_second_call(url: str, token: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """A provider that numbers calls per response brings call_0 back in the
    next turn of the same session: two turns, two tickets, neither
    answered as the other's replay."""
    who = f"py-adk-reused-{uuid.uuid4().hex[:8]}"

    async def turns() -> list[bool]:
        async with idemflow.AsyncClient(url, token) as c:
            tool = IdemflowTool(c, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket)
            runner = Runner(app=app(who, tool, call_id="call_0"), session_service=SqliteSessionService(str(tmp_path / "s.db")))
            first = await turn(runner, who)
            second = await turn(runner, who)
            return [a["replayed"] for a in first + second]

    replayed = asyncio.run(turns())
    n = count(db, "ticket", who)
    print(f"two turns under call_0: replayed {replayed}, {n} tickets")
    assert (replayed, n) == ([False, False], 2)


@pytest.mark.parametrize("deadline", [1.0, 3.0])
def test_a_pending_call_ends_the_invocation_within_its_deadline(url: str, token: str, deadline: float, tmp_path: Path) -> None:
    """The tool's deadline is a bound on the turn, with the client's
    defaults (an attempt of 10 s): through a partition that holds every
    answer, the invocation ends with DeadlineError by the deadline plus
    the slack the client states (it ended after about 12 s at deadline=3
    when the client looked at its deadline only between attempts)."""
    proxy = Proxy(url, "answer-lost", path="/never", hold=True)
    proxy.partitioned = True

    async def scenario() -> float:
        async with idemflow.AsyncClient(proxy.url, token) as c:
            who = f"py-adk-bound-{uuid.uuid4().hex[:8]}"
            tool = IdemflowTool(c, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket, deadline=deadline)
            runner = Runner(app=app(who, tool), session_service=SqliteSessionService(str(tmp_path / "s.db")))
            start = asyncio.get_running_loop().time()
            with pytest.raises(DeadlineError):
                await turn(runner, who)
            return asyncio.get_running_loop().time() - start

    try:
        took = asyncio.run(scenario())
    finally:
        proxy.close()
    print(f"ADK, deadline={deadline}: the invocation ended after {took:.2f} s")
    # The turn's own work (the session, the scripted model) beside the call's.
    assert took <= deadline + DEADLINE_SLACK + 0.5, f"a deadline of {deadline} s ended the turn after {took:.2f} s"


def test_a_pending_answer_ends_the_invocation_and_never_reaches_the_model(url: str, token: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """A partition longer than the tool's wait: the tool raises, the
    invocation ends with nothing handed to the model, and the invocation
    resumed gets the first call's answer, one ticket. The control is a
    tool under the same key that hands the timeout to the model as a
    result: the model calls again, under a new call ID and a new key, and
    that is a second ticket."""
    proxy = Proxy(url, "answer-lost", path="/never")

    class ErrorToModel(NaiveTool):
        """A tool under the durable key that hands a timeout to the model."""

        async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
            try:
                r = await self._client.do(idemflow.Intent(durable_key(tool_context, self.name), "/v1/tickets", args), deadline=1.2)
            except DeadlineError as e:
                return {"error": str(e)}
            return {"http_status": r.status, "replayed": r.replayed, "result": r.body}

    class Retrying(ScriptedModel):
        """Calls again after an error, as a model does."""

        requests: int = 0

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            self.requests += 1
            last = llm_request.contents[-1]
            responses = [p.function_response for p in last.parts or [] if p.function_response]
            if responses and "error" in (responses[0].response or {}) and self.requests < 3:
                llm_request.contents[-1] = message()
            async for r in super().generate_content_async(llm_request, stream):
                yield r

    async def scenario() -> tuple[int, int]:
        async with idemflow.AsyncClient(proxy.url, token, attempt_timeout=0.3, initial_backoff=0.02, max_backoff=0.1) as c:
            who = f"py-adk-pending-{uuid.uuid4().hex[:8]}"
            tool = IdemflowTool(c, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket, deadline=1.2)
            agent_app = app(who, tool)
            runner = Runner(app=agent_app, session_service=SqliteSessionService(str(tmp_path / "s.db")))
            resumed = await pending_then_resumed(runner, who, proxy)
            assert [a["replayed"] for a in resumed] == [True], resumed

            naive = f"py-adk-pending-control-{uuid.uuid4().hex[:8]}"
            control = app(naive, ErrorToModel(c))
            control.root_agent.model = Retrying(customer=naive)  # type: ignore[union-attr]
            control_runner = Runner(app=control, session_service=SqliteSessionService(str(tmp_path / "c.db")))
            proxy.partitioned = True
            await turn(control_runner, naive)
            proxy.partitioned = False
            return count(db, "ticket", who), count(db, "ticket", naive)

    try:
        ours, control_tickets = asyncio.run(scenario())
    finally:
        proxy.close()
    print(f"pending answer: the invocation ended, its resume replayed, {ours} ticket; the control: {control_tickets} tickets")
    assert ours == 1
    assert control_tickets == 2, "the control's retry under a new key made a second ticket"


def test_a_later_turn_sent_before_the_last_was_resumed_is_a_turn_of_its_own(url: str, token: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """Turn 1's call is pending (a partition longer than its deadline) and
    its invocation ends unfinished; the user sends turn 2 in other words
    before turn 1 was resumed. run_durably finishes turn 1 (its call
    replays) and then runs turn 2, whose call is a second ticket, never
    dropped for turn 1. The same message sent again is turn 1 finished,
    one ticket."""
    proxy = Proxy(url, "answer-lost", path="/never")

    async def scenario(later: str) -> tuple[int, list[bool]]:
        async with idemflow.AsyncClient(proxy.url, token, attempt_timeout=0.3, initial_backoff=0.02, max_backoff=0.1) as c:
            who = f"py-adk-later-{uuid.uuid4().hex[:8]}"
            tool = IdemflowTool(c, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket, deadline=1.2)
            runner = Runner(app=app(who, tool), session_service=SqliteSessionService(str(tmp_path / f"{who}.db")))
            proxy.partitioned = True
            with pytest.raises(DeadlineError):
                await turn(runner, who)
            proxy.partitioned = False
            replayed = []
            async for event in run_durably(runner, user_id="u", session_id=who, new_message=message(later)):
                replayed += [bool((r.response or {}).get("replayed")) for r in event.get_function_responses()]
            return count(db, "ticket", who), replayed

    try:
        later = asyncio.run(scenario("My network is down too."))
        again = asyncio.run(scenario("Open a ticket."))
    finally:
        proxy.close()
    print(
        f"a later turn sent before the last was resumed: {later[0]} tickets, answers replayed {later[1]}; the same message sent again: {again[0]}, {again[1]}"
    )
    assert later == (2, [True, False])
    assert again == (1, [True])


def test_a_call_nothing_durable_names_gets_no_key(url: str, token: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """An app that is not resumable is refused by run_durably, and a call
    whose event is not in the session (a tool run outside ADK's flow) gets
    NoDurableIdentityError: nothing is sent."""
    who = f"py-adk-noid-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with idemflow.AsyncClient(url, token) as c:
            tool = IdemflowTool(c, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket)
            runner = Runner(app=app(who, tool, resumable=False), session_service=SqliteSessionService(str(tmp_path / "s.db")))
            with pytest.raises(NoDurableIdentityError, match="not resumable"):
                await turn(runner, who)
            resumable = Runner(app=app(who, tool), session_service=SqliteSessionService(str(tmp_path / "s.db")))
            session = await resumable.session_service.create_session(app_name="support_app", user_id="u", session_id=who)

            class Outside:
                function_call_id = "call_x"
                invocation_id = "e-none"

            Outside.session = session  # type: ignore[attr-defined]
            with pytest.raises(NoDurableIdentityError, match="no event of invocation"):
                await tool.run_async(args={"customer_id": who, "title": "t"}, tool_context=Outside())  # type: ignore[arg-type]

    asyncio.run(scenario())
    assert count(db, "ticket", who) == 0


def test_the_docs_snippet_runs(url: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """docs/agents/adk.md's program, as written, with the scripted model in
    place of gemini-2.5-flash (the only change), run as a process:
    SIGKILLed while its call waits (the answer dropped after the ticket
    was made) and run again, it resumes and makes no second ticket."""
    snippet = docs_block("# Google ADK (Python 3.11+)\n")
    assert 'model="gemini-2.5-flash"' in snippet and '"ticket-42"' in snippet
    session = f"ticket-docs-{uuid.uuid4().hex[:6]}"
    model = 'model=__import__("tests.agents.adk_agent", fromlist=["ScriptedModel"]).ScriptedModel(customer="c-1")'
    code = snippet.replace('model="gemini-2.5-flash"', model).replace('"ticket-42"', repr(session))
    again = children.kill_snippet_mid_call_and_rerun(code, tmp_path, url, lambda: count(db, "ticket", "c-1"))
    assert "The ticket is open." in again.stdout, again.stdout


def test_a_confirmed_call_runs_once_under_the_key_it_was_asked_with(url: str, token: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """require_confirmation: the call stops for the user's answer (ADK's
    confirmation request), nothing sent; the confirmed call, resumed from
    the answer, makes one ticket, under the key derived before the stop;
    sending the confirmation again changes nothing."""
    who = f"py-adk-confirm-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
        async with idemflow.AsyncClient(url, token) as c:
            tool = IdemflowTool(c, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket, require_confirmation=True)
            runner = Runner(app=app(who, tool), session_service=SqliteSessionService(str(tmp_path / "s.db")))
            asked = await turn(runner, who)
            before = count(db, "ticket", who)
            session = await runner.session_service.get_session(app_name="support_app", user_id="u", session_id=who)
            assert session is not None
            request = next(call for e in session.events for call in e.get_function_calls() if call.name == "adk_request_confirmation")
            confirm = types.Content(
                role="user",
                parts=[types.Part(function_response=types.FunctionResponse(id=request.id, name="adk_request_confirmation", response={"confirmed": True}))],
            )
            answers = []
            async for event in run_durably(runner, user_id="u", session_id=who, new_message=confirm):
                answers += [dict(r.response or {}) for r in event.get_function_responses()]
            return before, asked, answers

    before, asked, answers = asyncio.run(scenario())
    print(f"confirmation: asked {asked}; {before} tickets before the answer; then {answers}")
    assert before == 0
    assert [a.get("http_status") for a in answers if "http_status" in a] == [201], answers
    assert [a["result"]["idempotency_key"] for a in answers if "result" in a] == [asked[0]["key"]], "the confirmed call ran under another key"
    assert count(db, "ticket", who) == 1


def mcp_toolset(url: str, token: str) -> McpToolset:
    """ADK's McpToolset on idemflow mcp over stdio, at url: create_ticket."""
    env = {"IDEMFLOW_URL": url, "IDEMFLOW_TOKEN": token}
    params = StdioConnectionParams(server_params=StdioServerParameters(command=need("IDEMFLOW_BIN"), args=["mcp"], env=env), timeout=30)
    return McpToolset(connection_params=params, tool_filter=["create_ticket"])


def test_a_pending_answer_over_mcp_ends_the_invocation_and_never_reaches_the_model(url: str, token: str, db: psycopg.Connection, tmp_path: Path) -> None:
    """durable_mcp_toolset across a partition between idemflow mcp and the
    gateway longer than its deadline: the tool raises DeadlineError, the
    invocation ends with nothing handed to the model, and run_durably
    sends the stored call again under its key once the partition heals:
    the first call's answer, a replay, one ticket."""
    proxy = Proxy(url, "answer-lost", path="/never")

    async def scenario() -> str:
        who = f"py-adk-mcp-pending-{uuid.uuid4().hex[:8]}"
        toolset = durable_mcp_toolset(mcp_toolset(proxy.url, token), deadline=3, wait=1)
        try:
            runner = Runner(app=app(who, toolset, model_key=True), session_service=SqliteSessionService(str(tmp_path / "s.db")))
            resumed = await pending_then_resumed(runner, who, proxy)
            assert [a["structuredContent"]["replayed"] for a in resumed] == [True], resumed
        finally:
            await toolset.close()
        return who

    try:
        who = asyncio.run(scenario())
    finally:
        proxy.close()
    print(f"ADK over MCP: a pending call ended the invocation with nothing to the model; run_durably's resend replayed; {count(db, 'ticket', who)} ticket")
    assert count(db, "ticket", who) == 1


def test_the_docs_mcp_toolset_runs(url: str, token: str, db: psycopg.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agents/mcp.md's ADK toolset, as written (idemflow on PATH, the
    names it uses the function's parameters), after the same turn made
    through the native IdemflowTool in a session of the same ID: the call
    through MCP, with a model-written key of its own, has the native
    tool's key, so it is that call's replay, one ticket."""
    block = docs_block("**Google ADK** (`idemflow.adk.durable_mcp_toolset`).")
    scope: dict[str, Any] = {}
    exec("def snippet(model, url, token):\n" + textwrap.indent(block + "return agent, toolset\n", "    "), scope)
    monkeypatch.setenv("PATH", f"{os.path.dirname(need('IDEMFLOW_BIN'))}{os.pathsep}{os.environ['PATH']}")
    who = f"py-adk-docs-mcp-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with idemflow.AsyncClient(url, token) as c:
            native = IdemflowTool(c, name="create_ticket", description="Create a ticket.", path="/v1/tickets", args_schema=Ticket)
            first = await turn(Runner(app=app(who, native), session_service=SqliteSessionService(str(tmp_path / "native.db"))), who)
        agent, toolset = scope["snippet"](ScriptedModel(customer=who, model_key=True), url, token)
        try:
            mcp_app = App(name="support_app", root_agent=agent, resumability_config=ResumabilityConfig(is_resumable=True))
            again = await turn(Runner(app=mcp_app, session_service=SqliteSessionService(str(tmp_path / "mcp.db"))), who)
        finally:
            await toolset.close()
        return first, again

    first, again = asyncio.run(scenario())
    answers = [first[0], again[0]["structuredContent"]]
    assert [a["replayed"] for a in answers] == [False, True], answers
    assert answers[1]["result"] == answers[0]["result"]
    assert count(db, "ticket", who) == 1
