"""The vectors every client shares (clients/testdata): how an answer is
read and how a key is derived. The Go and TypeScript tests read the same
files, so that the clients cannot drift."""

from __future__ import annotations

import base64
import json
import pathlib
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

import idemflow
from idemflow.answers import Fail, Judgement, Poll, Retry, Success
from idemflow.keys import call_intent, derive_key
from idemflow.langgraph import ARGS_KEY_SCHEME, KEY_SCHEME, durable_key

TESTDATA = pathlib.Path(__file__).resolve().parents[2] / "testdata"
ANSWERS = json.loads((TESTDATA / "answers.json").read_text())
KEYS = json.loads((TESTDATA / "keys.json").read_text())

ERRORS: dict[str, type[idemflow.ProblemError]] = {
    "invalid-request": idemflow.InvalidRequestError,
    "unauthorized": idemflow.UnauthorizedError,
    "not-found": idemflow.NotFoundError,
    "too-large": idemflow.TooLargeError,
    "key-reused": idemflow.KeyReusedError,
    "rejected": idemflow.RejectedError,
    "outcome-unknown": idemflow.OutcomeUnknownError,
}


def test_the_vectors_are_there() -> None:
    assert ANSWERS["answers"] and ANSWERS["operations"] and ANSWERS["backoff"] and ANSWERS["prefer_wait"]
    assert (
        KEYS["derive"]
        and KEYS["langgraph"]
        and KEYS["temporal"]
        and KEYS["temporal_args"]
        and KEYS["temporal_lineage"]
        and KEYS["openai_agents"]
        and KEYS["openai_agents_calls"]
        and KEYS["pydantic_ai"]
        and KEYS["dbos"]
        and KEYS["adk"]
        and KEYS["adk_calls"]
        and KEYS["llamaindex"]
        and KEYS["llamaindex_calls"]
    )


def check(name: str, j: Judgement, e: dict[str, Any]) -> None:
    assert j.action == e["action"], f"{name}: {j}"
    if isinstance(j, Success):
        if "replayed" in e:
            assert j.result.replayed == e["replayed"], f"{name}: replayed"
        if "status" in e:
            assert (j.result.status, j.result.raw) == (e["status"], e["body"]), f"{name}: answer"
    if isinstance(j, (Fail, Retry)):
        if "error" in e:
            assert isinstance(j.error, ERRORS[e["error"]]), f"{name}: {type(j.error).__name__}, want {e['error']}"
        if "code" in e:
            assert isinstance(j.error, idemflow.RejectedError) and j.error.code == e["code"], f"{name}: code"
        if "revisable" in e:
            assert j.error.revisable == e["revisable"], f"{name}: revisable"
        if "fields" in e:
            named = [f.get("field") for f in j.error.problem.get("errors", [])]
            assert named == e["fields"], f"{name}: the refusal's fields {named}"
    if isinstance(j, Retry) and "wait_ms" in e:
        assert j.wait * 1000 == e["wait_ms"], f"{name}: wait"


@pytest.mark.parametrize("a", ANSWERS["answers"], ids=lambda a: a["name"])
def test_answer(a: dict[str, Any]) -> None:
    check(a["name"], idemflow.judge(a["status"], a["headers"], a["body"]), a["expect"])


@pytest.mark.parametrize("o", ANSWERS["operations"], ids=lambda o: o["name"])
def test_polled_operation(o: dict[str, Any]) -> None:
    # a string is the view's exact text; an object is sent as the server writes one, compact
    view = o["view"] if isinstance(o["view"], str) else json.dumps(o["view"], separators=(",", ":"), ensure_ascii=False)
    check(o["name"], idemflow.judge_operation(view), o["expect"])


@pytest.mark.parametrize("b", ANSWERS["backoff"], ids=lambda b: f"attempt {b['attempt']}")
def test_backoff_ceiling(b: dict[str, Any]) -> None:
    assert idemflow.backoff_ceiling(b["initial_ms"], b["max_ms"], b["attempt"]) == b["ceiling_ms"]


@pytest.mark.parametrize("w", ANSWERS["prefer_wait"], ids=lambda w: f"{w['configured_s']} s with {w['left_ms']} ms left")
def test_prefer_wait(w: dict[str, Any]) -> None:
    assert idemflow.prefer_wait(w["configured_s"], w["left_ms"] / 1000) == w["wait_s"]


@pytest.mark.parametrize("d", KEYS["derive"], ids=lambda d: "/".join([d["scheme"], *d["parts"]]))
def test_derive_key(d: dict[str, Any]) -> None:
    assert derive_key(d["scheme"], *d["parts"]) == d["key"]


def langgraph_config(c: dict[str, Any]) -> dict[str, Any]:
    configurable = {"checkpoint_ns": c["checkpoint_ns"]}
    if c["thread_id"] is not None:
        configurable["thread_id"] = c["thread_id"]
    return {"configurable": configurable}


def langgraph_message(m: dict[str, Any]) -> BaseMessage:
    if m["type"] == "human":
        return HumanMessage(m["content"], id=m.get("id"))
    if m["type"] == "tool":
        return ToolMessage(m["content"], id=m.get("id"), tool_call_id=m["tool_call_id"])
    calls = [{"id": c["id"], "name": c["name"], "args": c["args"], "type": "tool_call"} for c in m.get("tool_calls", [])]
    return AIMessage(m.get("content", ""), id=m.get("id"), tool_calls=calls)


@pytest.mark.parametrize("c", KEYS["langgraph"], ids=lambda c: c["name"])
def test_langgraph_key(c: dict[str, Any]) -> None:
    config = langgraph_config(c)
    state = {"messages": [langgraph_message(m) for m in c["messages"]]}
    # An entry without a scheme is lg4's; lg5's names the tool's intent fields.
    scheme = c.get("scheme", ARGS_KEY_SCHEME)
    fields = c.get("intent", ())
    intent = (lambda a: call_intent(fields, a)) if scheme == KEY_SCHEME else None
    if "error" in c:
        with pytest.raises(idemflow.NoDurableIdentityError, match=c["error"]):
            durable_key(config, c["tool_call_id"], c["tool"], state, key_scheme=scheme, intent=intent)
    else:
        assert durable_key(config, c["tool_call_id"], c["tool"], state, key_scheme=scheme, intent=intent) == c["key"]


@pytest.mark.parametrize("c", KEYS["temporal"], ids=lambda c: c["name"])
def test_temporal_key(c: dict[str, Any]) -> None:
    from idemflow.temporal import call_key, intent_call_key, legacy_key, place_key

    if c["scheme"] == "tp4":
        got = intent_call_key(c["workflow_id"], c["lineage"], c["turn"], c["tool"], c["args"], c["n"], c["scope"])
    elif c["scheme"] == "tp3":
        got = call_key(c["workflow_id"], c["lineage"], c["turn"], c["tool"], c["args"], c["n"], c["scope"])
    elif c["scheme"] == "tp2":
        got = place_key(c["workflow_id"], c["original_run_id"], c["call"], c["tool"], c["scope"])
    else:
        got = legacy_key(c["workflow_id"], c["activity_id"], c["tool"], c["scope"])
    assert got == c["key"]


@pytest.mark.parametrize("c", KEYS["temporal_args"], ids=lambda c: c["name"])
def test_temporal_args_digest(c: dict[str, Any]) -> None:
    from temporalio.api.common.v1 import Payload

    from idemflow.temporal import args_digest, intent_digest

    payloads = [
        Payload(metadata={"encoding": p["encoding"].encode()}, data=base64.b64decode(p["data_base64"]) if "data_base64" in p else p["data"].encode())
        for p in c["payloads"]
    ]
    if "intent" not in c:
        assert args_digest(payloads) == c["digest"]
    elif "error" in c:
        with pytest.raises(ValueError, match=c["error"]):
            intent_digest(c["intent"], payloads)
    else:
        assert intent_digest(c["intent"], payloads) == c["digest"]


@pytest.mark.parametrize("c", KEYS["temporal_lineage"], ids=lambda c: c["name"])
def test_temporal_lineage(c: dict[str, Any]) -> None:
    from types import SimpleNamespace

    import temporalio.converter

    from idemflow.temporal import LINEAGE_HEADER, lineage_of

    info = SimpleNamespace(
        attempt=c["attempt"],
        continued_run_id=c["continued_run_id"] or None,
        cron_schedule=c["cron_schedule"] or None,
        first_execution_run_id=c["first_run_id"],
        original_execution_run_id=c["original_run_id"],
    )
    headers = {}
    if c["header"] is not None:
        headers[LINEAGE_HEADER] = temporalio.converter.default().payload_converter.to_payloads([c["header"]])[0]
    got = lineage_of(info, headers)  # type: ignore[arg-type]
    assert (got.id, got.turn) == (c["lineage"], c["turn"])


@pytest.mark.parametrize("c", KEYS["openai_agents"], ids=lambda c: c["name"])
def test_openai_agents_key(c: dict[str, Any]) -> None:
    from agents import RunConfig
    from agents.tool_context import ToolContext
    from openai.types.responses import ResponseFunctionToolCall

    from idemflow.openai_agents import durable_key as oa_key

    call = ResponseFunctionToolCall(type="function_call", id=c["item_id"], call_id=c["call_id"], name=c["tool"], arguments="{}")
    ctx = ToolContext(
        context=None, tool_name=c["tool"], tool_call_id=c["call_id"], tool_arguments="{}", tool_call=call, run_config=RunConfig(group_id=c["group_id"])
    )
    unique = c.get("call_ids_unique", False)
    if "error" in c:
        with pytest.raises(idemflow.NoDurableIdentityError, match=c["error"]):
            oa_key(ctx, c["tool"], call_ids_unique=unique)
    else:
        assert oa_key(ctx, c["tool"], call_ids_unique=unique) == c["key"]


@pytest.mark.parametrize("c", KEYS["openai_agents_calls"], ids=lambda c: c["name"])
def test_openai_agents_intended_call_key(c: dict[str, Any]) -> None:
    from idemflow.openai_agents import intended_call_keys

    # An entry without a scheme is oa2's (the whole arguments).
    keys = intended_call_keys(c["group_id"], c["input"], c["calls"], c["previous_response_id"], c["turn_id"], key_scheme=c.get("scheme", "oa2"))
    assert keys[c["call_id"]] == c["key"]


@pytest.mark.parametrize("c", KEYS["pydantic_ai"], ids=lambda c: c["name"])
def test_pydantic_ai_key(c: dict[str, Any]) -> None:
    from pydantic_ai import ModelMessagesTypeAdapter
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    from idemflow.pydantic_ai import message_key

    if c["scheme"] == "pa1":
        messages: list[Any] = [
            ModelResponse(parts=[ToolCallPart(c["tool"], {}, tool_call_id=i) for i in r["calls"]], run_id=r["run_id"], conversation_id=r["conversation_id"])
            for r in c["responses"]
        ]
    else:
        messages = ModelMessagesTypeAdapter.validate_python(c["messages"])
    fields = c.get("intent", ())
    intent = (lambda a: call_intent(fields, a)) if c["scheme"] == "pa3" else None
    if "error" in c:
        with pytest.raises(idemflow.NoDurableIdentityError, match=c["error"]):
            message_key(messages, c["call_id"], c["tool"], key_scheme=c["scheme"], intent=intent)
    else:
        assert message_key(messages, c["call_id"], c["tool"], key_scheme=c["scheme"], intent=intent) == c["key"]


@pytest.mark.parametrize("c", KEYS["dbos"], ids=lambda c: c["name"])
def test_dbos_step_key(c: dict[str, Any]) -> None:
    from idemflow.pydantic_ai import step_key

    assert step_key(c["workflow_id"], c["step_id"], c["tool"]) == c["key"]


@pytest.mark.parametrize("c", KEYS["llamaindex"], ids=lambda c: c["name"])
def test_llamaindex_key(c: dict[str, Any]) -> None:
    from idemflow.llamaindex import call_key

    assert call_key(c["turn"], c["tool_id"], c["tool"]) == c["key"]


@pytest.mark.parametrize("c", KEYS["adk"], ids=lambda c: c["name"])
def test_adk_key(c: dict[str, Any]) -> None:
    from google.adk.events.event import Event
    from google.adk.sessions.session import Session
    from google.genai import types

    from idemflow.adk import durable_key as adk_key

    events = [
        Event(
            id=e["id"],
            invocation_id=e["invocation"],
            author="support",
            content=types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(id=i, name=c["tool"], args={})) for i in e["calls"]]),
        )
        for e in c["events"]
    ]

    class Context:
        function_call_id = c["call_id"] or None
        invocation_id = c["invocation"]
        session = Session(id=c["session"], app_name=c["app"], user_id=c["user"], events=events)

    if "error" in c:
        with pytest.raises(idemflow.NoDurableIdentityError, match=c["error"]):
            adk_key(Context(), c["tool"], "ad1")  # type: ignore[arg-type]
    else:
        assert adk_key(Context(), c["tool"], "ad1") == c["key"]  # type: ignore[arg-type]


def adk_event(e: dict[str, Any]) -> Any:
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    kw: dict[str, Any] = {"id": e["id"], "invocation_id": e["invocation"], "author": e.get("author", "support")}
    if e.get("rewind"):
        return Event(**kw, actions=EventActions(rewind_before_invocation_id=e["rewind"]))
    parts = [types.Part(text=e["text"])] if "text" in e else []
    parts += [types.Part(function_call=types.FunctionCall(id=c["id"], name=c["name"], args=c["args"])) for c in e.get("calls", [])]
    parts += [types.Part(function_response=types.FunctionResponse(id=r, name="create_ticket", response={"ok": True})) for r in e.get("responses", [])]
    return Event(**kw, content=types.Content(role="user" if kw["author"] == "user" else "model", parts=parts))


@pytest.mark.parametrize("c", KEYS["adk_calls"], ids=lambda c: c["name"])
def test_adk_intended_call_key(c: dict[str, Any]) -> None:
    from idemflow.adk import intended_call_key

    events = [adk_event(e) for e in c["events"]]
    # An entry without a scheme is ad2's (the whole arguments); ad3's names the tool's intent fields.
    scheme, fields = c.get("scheme", "ad2"), c.get("intent", ())
    named = lambda a: call_intent(fields, a)  # noqa: E731
    assert intended_call_key(c["app"], c["user"], c["session"], events, c["invocation"], c["call_id"], c["tool"], key_scheme=scheme, intent=named) == c["key"]


@pytest.mark.parametrize("c", KEYS["llamaindex_calls"], ids=lambda c: c["name"])
def test_llamaindex_intended_call_key(c: dict[str, Any]) -> None:
    from llama_index.core.llms import ChatMessage

    from idemflow.keys import call_arguments
    from idemflow.llamaindex import intended_call_key, turn_of

    turn = turn_of([ChatMessage.model_validate(m) for m in c["history"]], c["user_msg"])
    # The calls as FunctionAgent records them (parse_agent_output).
    calls = [[i, n, call_arguments(a)] for i, n, a in c["calls"]]
    # An entry without a scheme is li2's (the whole arguments); li3's names the tool's intent fields.
    scheme, fields = c.get("scheme", "li2"), c.get("intent", ())
    assert intended_call_key(turn, calls, c["tool_id"], c["tool"], key_scheme=scheme, intent=lambda a: call_intent(fields, a)) == c["key"]


def test_no_interceptor_no_key() -> None:
    from temporalio.testing import ActivityEnvironment

    from idemflow.temporal import activity_key

    with pytest.raises(idemflow.NoDurableIdentityError, match="KeyInterceptor"):
        ActivityEnvironment().run(lambda: activity_key("create_ticket"))


def test_no_activity_no_key() -> None:
    from temporalio.exceptions import ApplicationError

    from idemflow.temporal import activity_key

    with pytest.raises(idemflow.NoDurableIdentityError, match="outside a Temporal activity") as e:
        activity_key("create_ticket")
    assert isinstance(e.value, ApplicationError) and e.value.non_retryable, "Temporal must not retry a call that has no key"


def test_a_polled_base64_answer_is_its_bytes() -> None:
    raw = '{"a": 1}'
    view = {"status": "succeeded", "result_status": 200, "result_base64": base64.b64encode(raw.encode()).decode()}
    j = idemflow.judge_operation(json.dumps(view))
    assert isinstance(j, Success) and j.result.raw == raw and not isinstance(j, Poll)


BODIES = json.loads((TESTDATA / "bodies.json").read_text())


@pytest.mark.parametrize(
    "c,same",
    [(c, True) for c in BODIES["same"]] + [(c, False) for c in BODIES["different"]],
    ids=[f"same: {c['name']}" for c in BODIES["same"]] + [f"different: {c['name']}" for c in BODIES["different"]],
)
def test_the_store_compares_bodies_as_every_client_does(c: dict[str, Any], same: bool, tmp_path: pathlib.Path) -> None:
    with idemflow.SQLiteStore(tmp_path / "intents.db") as store:
        first = store.open("step", "POST", "/v1/tickets", json.loads(c["stored"]))
        if same:
            assert store.open("step", "POST", "/v1/tickets", json.loads(c["asked"])).key == first.key
        else:
            with pytest.raises(idemflow.IntentMismatchError):
                store.open("step", "POST", "/v1/tickets", json.loads(c["asked"]))


def test_a_body_stored_before_jcs_still_compares_as_its_value(tmp_path: pathlib.Path) -> None:
    """A row written by the sorted json.dumps the store used before keeps
    its intent: 2.0 stored as "2.0" is the 2 asked now."""
    with idemflow.SQLiteStore(tmp_path / "intents.db") as store:
        first = store.open("step", "POST", "/v1/tickets", {"quantity": 2})
        old = json.dumps({"title": "t", "quantity": 2.0}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        store._db.execute("UPDATE intent SET body = ? WHERE step_id = 'step'", (old,))
        assert store.open("step", "POST", "/v1/tickets", {"quantity": 2, "title": "t"}).key == first.key


def test_no_text_after_a_refusal_or_a_pending_answer_invites_a_new_call() -> None:
    """The rule's own examples show the check catches what it should; then
    every pending text an integration can hand on, and a refusal as the
    integrations write it (test_final_answers_are_typed_errors_never_retried
    checks one from the real server)."""
    from idemflow._tooltext import RESUME, pending_text

    from .modeltext import RULE, invitation

    assert all(invitation(s) for s in RULE["examples"]["invite"]), [s for s in RULE["examples"]["invite"] if not invitation(s)]
    assert not any(invitation(s) for s in RULE["examples"]["allow"]), [invitation(s) for s in RULE["examples"]["allow"]]
    for name, resume in RESUME.items():
        text = pending_text("create_ticket", "lg3_k", resume)
        assert not invitation(text), f"{name}: {text!r} invites a new call at {invitation(text)!r}"


@pytest.mark.parametrize("v", KEYS["intent"], ids=lambda v: v["name"])
def test_intent_fields_are_normalised_as_every_client_does(v: dict[str, Any]) -> None:
    from idemflow.keys import intent_canonical

    got = intent_canonical(v["fields"], v["args"])
    assert got == v["canonical"]
    assert derive_key("intent", got) == v["key"]


def test_the_intent_vectors_are_there() -> None:
    assert len(KEYS["intent"]) >= 15
