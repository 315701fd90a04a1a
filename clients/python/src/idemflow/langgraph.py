"""The LangGraph integration: a tool whose idempotency key names the
intended call, so that a run resumed from its checkpoint (after a crash, a
deploy, or a human review step), a fork from a checkpoint before the model
step (what chat UIs call regenerate), or a turn sent again before its
state was saved, which all call the tool again, replays the first answer
instead of taking effect twice.

The key (lg5) is derived from the run's thread, the node path of its
checkpoint namespace, the turn (the ID of the human message the call
answers), the tool, the call's intent (the tool's intent fields, a
ticket's customer, normalised: idemflow.keys.intent_canonical; for a tool
that declares none, its arguments in their RFC 8785 form, less the
idempotency_key an MCP tool takes from the model), and its occurrence
among the turn's calls of that tool with that intent. A fork whose model
rewords the call's free text is then the same call, a replay that says
what differed; another customer is another call. Not from the AI
message's or the tool call's IDs: a re-run of the model step
(a fork, a resume of a step that was not saved) writes the same call under
new ones. The human message's ID is in the checkpoint before the model
runs, and a chat UI sends it again with the message. Never from the
checkpoint namespace's task IDs: LangGraph derives a task ID from the
checkpoint the step started from, so anything that writes a checkpoint
between the crash and the resume (update_state in a review step) would
change it, and with it the key.

Needs the ``langgraph`` extra: ``pip install 'idemflow[langgraph]'``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool
from langgraph.prebuilt import InjectedState, ToolRuntime
from langgraph.types import interrupt
from pydantic import BaseModel, create_model

from ._tooltext import RESUME, answer_text, arguments, pending_text, refusal_text, request_intent
from .client import AsyncClient, Client, Intent
from .errors import DeadlineError, NoDurableIdentityError, ProblemError
from .keys import call_arguments, call_intent, derive_key, intent_fields_of, occurrence

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = [
    "ARGS_KEY_SCHEME",
    "KEY_SCHEME",
    "LEGACY_KEY_SCHEME",
    "IntendedCall",
    "call_message_id",
    "durable_key",
    "idemflow_tool",
    "intended_call",
    "node_path",
    "pending_answer",
]

#: The scheme of a LangGraph tool call's key: the intended call by its
#: intent fields (lg1 included the task IDs; lg2 lacked the AI message's
#: ID, and a reused tool-call ID was a replay; lg3 named the AI message
#: and the tool-call ID, which a fork's model step writes anew; lg4 named
#: the call's whole arguments, which a model rewords).
KEY_SCHEME = "lg5"

#: The scheme before lg4, for the calls in flight across that upgrade.
LEGACY_KEY_SCHEME = "lg3"

#: The scheme before lg5: the call's whole arguments, for the calls in
#: flight across the upgrade (docs/agents/langgraph.md says when to keep
#: it).
ARGS_KEY_SCHEME = "lg4"

_SCHEMES = (KEY_SCHEME, ARGS_KEY_SCHEME, LEGACY_KEY_SCHEME)


def node_path(checkpoint_ns: str) -> str:
    """The checkpoint namespace without its task IDs: "inner:<id>|tools:<id>"
    is "inner|tools". LangGraph refuses ":" and "|" in node names, so the
    path is what the graph's structure names, the same on every resume."""
    if not checkpoint_ns:
        return ""
    return "|".join(part.split(":", 1)[0] for part in checkpoint_ns.split("|"))


def _messages(state: Any, messages_key: str) -> list[BaseMessage]:
    """The messages of what ToolNode injects: the graph's state (a dict or
    an object with the messages) or the list of messages."""
    if isinstance(state, list):
        return state
    if isinstance(state, Mapping):
        return list(state.get(messages_key) or [])
    return list(getattr(state, messages_key, None) or [])


def _call_message(messages: list[BaseMessage], tool_call_id: str | None) -> int:
    """The index of the last AI message carrying tool_call_id, or -1."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if tool_call_id and isinstance(m, AIMessage) and any(c.get("id") == tool_call_id for c in m.tool_calls):
            return i
    return -1


def call_message_id(state: Any, tool_call_id: str | None, messages_key: str = "messages") -> str | None:
    """The ID of the AI message that asked for the tool call: the last one
    in the graph state's messages carrying tool_call_id (the one ToolNode
    runs), or None when the state holds none with an ID."""
    messages = _messages(state, messages_key)
    at = _call_message(messages, tool_call_id)
    return (messages[at].id or None) if at >= 0 else None


@dataclass(frozen=True)
class IntendedCall:
    """What names an intended call within its thread: the turn (the ID of
    the human message it answers, "" before the first), the digest of its
    arguments (RFC 8785) and its occurrence (from 1) among the turn's calls
    of its tool with those arguments."""

    turn: str
    args: str
    occurrence: int


def intended_call(
    state: Any,
    tool_call_id: str | None,
    tool_name: str,
    messages_key: str = "messages",
    intent: Callable[[dict[str, Any]], str] | None = None,
) -> IntendedCall | None:
    """The intended call that the tool call tool_call_id of tool_name is,
    from the graph state's messages: the last AI message carrying it, the
    last human message before that (the turn), and the calls of tool_name
    in the turn's AI messages, in their order. None when the messages do
    not hold the call. intent(args) is what names a call of tool_name
    beyond its turn (call_intent of its request; default: its whole
    arguments). Raises NoDurableIdentityError when the turn's human
    message has no ID: nothing else in the state tells a turn sent again
    from the next one that says the same."""
    messages = _messages(state, messages_key)
    at = _call_message(messages, tool_call_id)
    if at < 0 or not tool_call_id:
        return None
    start = next((i for i in range(at - 1, -1, -1) if isinstance(messages[i], HumanMessage)), -1)
    turn = ""
    if start >= 0:
        turn = messages[start].id or ""
        if not turn:
            raise NoDurableIdentityError(
                f"{tool_name}: the human message that call {tool_call_id} answers has no ID (keep the graph's messages with add_messages,"
                " which gives each one, or send each message with its own), so no key can tell a turn sent again from the next one"
            )

    # The tool is the name the model wrote (the tool's, when ToolNode runs it).
    def named(c: Mapping[str, Any]) -> str:
        args = c.get("args") or {}
        return intent(args) if intent is not None and c.get("name") == tool_name else call_arguments(args)

    calls = [(c.get("id") or "", c.get("name") or "", named(c)) for m in messages[start + 1 : at + 1] if isinstance(m, AIMessage) for c in m.tool_calls]
    found = occurrence(calls, tool_call_id)
    assert found is not None  # messages[at] holds the call
    return IntendedCall(turn, *found)


def durable_key(
    config: Mapping[str, Any] | None,
    tool_call_id: str | None,
    tool_name: str,
    state: Any,
    *,
    messages_key: str = "messages",
    key_scheme: str = KEY_SCHEME,
    intent: Callable[[dict[str, Any]], str] | None = None,
) -> str:
    """The key of one tool call, from the run's thread_id, the node path of
    its checkpoint namespace and the state's messages: under lg5, the
    intended call (intended_call) by intent(args) (call_intent of the
    request the call makes: its intent fields where the tool declares
    them) and the tool's name; under lg4, the same by the call's whole
    arguments; under lg3 (the legacy scheme), the ID of the AI message
    that asked for the call (call_message_id), the call's ID and the
    tool's name.

    Raises NoDurableIdentityError when the run has no thread (no
    checkpointer, or invoked without configurable.thread_id), the call no
    ID, or the state does not hold the call: a random key would protect
    nothing across a resume, and a key without the turn would answer a
    later turn's call with this one's replay; neither is made in silence.
    """
    if key_scheme not in _SCHEMES:
        raise ValueError(f"key_scheme {key_scheme!r}: one of {', '.join(_SCHEMES)}")
    configurable = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or thread_id == "":
        raise NoDurableIdentityError(
            f"{tool_name}: the run has no thread_id (compile the graph with a checkpointer and invoke it with "
            'config={"configurable": {"thread_id": ...}}), so no key can survive a resume'
        )
    if not tool_call_id:
        raise NoDurableIdentityError(
            f"{tool_name}: the call has no tool-call ID (call the tool through a ToolNode, or invoke it with a ToolCall), so no key can survive a resume"
        )
    missing = NoDurableIdentityError(
        f"{tool_name}: the AI message that asked for call {tool_call_id} is not in the graph's state with an ID (call the tool"
        " through a ToolNode of a graph whose state keeps the messages), so no key can tell this call from a later turn's"
    )
    path = node_path(str(configurable.get("checkpoint_ns") or ""))
    if key_scheme == LEGACY_KEY_SCHEME:
        message_id = call_message_id(state, tool_call_id, messages_key)
        if not message_id:
            raise missing
        return derive_key(LEGACY_KEY_SCHEME, str(thread_id), path, message_id, tool_call_id, tool_name)
    c = intended_call(state, tool_call_id, tool_name, messages_key, intent if key_scheme == KEY_SCHEME else None)
    if c is None:
        raise missing
    return derive_key(key_scheme, str(thread_id), path, c.turn, tool_name, c.args, str(c.occurrence))


def pending_answer(name: str, key: str) -> dict[str, str]:
    """What the run is paused with (LangGraph's interrupt) when a call's
    final answer did not come within the deadline: never a tool error,
    which ToolNode(handle_tool_errors=True) would hand to the model, whose
    retry would be a new tool call, a new key and a second effect. Resume
    the run (Command(resume=True) on the same thread): the tool node runs
    the call again under the same key, and gets its answer."""
    return {
        "idemflow": "pending",
        "tool": name,
        "key": key,
        "message": pending_text(name, key, RESUME["langgraph"]),
    }


def idemflow_tool(
    client: Client | AsyncClient,
    *,
    name: str,
    description: str,
    path: str | Callable[[dict[str, Any]], str],
    args_schema: type[BaseModel],
    body: Callable[[dict[str, Any]], Any] | None = None,
    deadline: float = 300.0,
    messages_key: str = "messages",
    key_scheme: str = KEY_SCHEME,
    intent: Sequence[Mapping[str, str]] | None = None,
) -> BaseTool:
    """A LangGraph tool that runs one of idemflow's operations (a ticket, an
    order, a declared operation, an HTTP tool) exactly once per tool call,
    however often a resumed run calls it.

    path is the operation's (/v1/tickets, /v1/tools/refund_create) or a
    function of the arguments; body makes the request's body from them
    (default: the arguments). The tool returns JSON to the model:
    {http_status, replayed, result}, or for a final refusal {http_status,
    error, problem, body, key}. With an AsyncClient the tool is async.

    deadline is how long one call waits for its final answer (seconds).
    When it ends, the tool pauses the run with LangGraph's interrupt
    (pending_answer), which ToolNode re-raises whatever handle_tool_errors
    says: an answer still pending may have taken effect, so it is never an
    error for the model to retry. Arguments the model left out are left
    out of the body, not sent as null.

    messages_key is the state's field that holds the messages, as the
    ToolNode's: the key names the turn and the call in them.

    intent is the operation's intent fields ([{"name", "norm"}], as its
    declaration publishes them: OpenAPI's x-idemflow-intent); idemflow's
    own tools' are known by name or path (idemflow.keys.BUILTIN_INTENT).
    The key names the request's intent fields, not its free text, and the
    request says so (Idempotency-Fingerprint: intent): a fork or a turn
    sent again whose model rewords the title gets the first ticket, a
    replay whose answer names what differed. A tool with none is keyed by
    its whole arguments.

    key_scheme ARGS_KEY_SCHEME ("lg4") keys a call by its whole arguments,
    as the release before lg5 did, and LEGACY_KEY_SCHEME ("lg3") as the
    one before lg4, for a run paused across the upgrade
    (docs/agents/langgraph.md).
    """
    # The call's ID and the graph's state reach the tool through
    # LangChain's injection: the model sees args_schema, the function also
    # gets tool_call_id and idemflow_state. The state defaults to None so
    # that a call outside a ToolNode gets NoDurableIdentityError, not a
    # validation error.
    schema = create_model(
        args_schema.__name__,
        __base__=args_schema,
        tool_call_id=(Annotated[str, InjectedToolCallId], ...),
        idemflow_state=(Annotated[Any, InjectedState], None),
    )

    fields = tuple(intent) if intent is not None else intent_fields_of(name, path if isinstance(path, str) else None)
    by_intent = bool(fields) and key_scheme == KEY_SCHEME

    def request(args: dict[str, Any]) -> Any:
        return body(args) if body else args

    intent_of = request_intent(fields, args_schema, body)

    def prepare(kwargs: dict[str, Any], config: RunnableConfig) -> tuple[str, Intent]:
        call_id = kwargs.pop("tool_call_id", None)
        state = kwargs.pop("idemflow_state", None)
        key = durable_key(config, call_id, name, state, messages_key=messages_key, key_scheme=key_scheme, intent=intent_of)
        args = arguments(args_schema, kwargs)
        p = path(args) if callable(path) else path
        return key, Intent(key, p, request(args), by_intent=by_intent)

    if isinstance(client, AsyncClient):
        aclient = client

        async def arun(config: RunnableConfig, **kwargs: Any) -> str:
            key, intent = prepare(kwargs, config)
            while True:
                try:
                    return answer_text(await aclient.do(intent, deadline=deadline))
                except ProblemError as e:
                    return refusal_text(e, key)
                except DeadlineError:
                    interrupt(pending_answer(name, key))  # a resume returns here, and waits again

        return StructuredTool.from_function(coroutine=arun, name=name, description=description, args_schema=schema)

    sclient = client

    def run(config: RunnableConfig, **kwargs: Any) -> str:
        key, intent = prepare(kwargs, config)
        while True:
            try:
                return answer_text(sclient.do(intent, deadline=deadline))
            except ProblemError as e:
                return refusal_text(e, key)
            except DeadlineError:
                interrupt(pending_answer(name, key))  # a resume returns here, and waits again

    return StructuredTool.from_function(func=run, name=name, description=description, args_schema=schema)


async def mcp_tools(session: ClientSession, *, names: list[str] | None = None, deadline: float = 300.0, messages_key: str = "messages") -> list[BaseTool]:
    """The tools of idemflow's MCP server (idemflow mcp, through the mcp
    package's ClientSession, connected by the app), as LangGraph tools
    keyed as idemflow_tool keys its calls: each call sends, in _meta, the
    key of its intended call (lg5, by the intent fields the tool publishes
    in its _meta, or its arguments less the idempotency_key the model
    writes), so a resume, a fork, a reworded call or a turn sent
    again is a replay, and waits on the call's task (idemflow.mcp) up to
    deadline (seconds). Past it the tool pauses the run (pending_answer,
    LangGraph's interrupt), never an error the model reads; a resume waits
    on the same task again. The model reads the tool's text:
    {http_status, replayed, result}, or its words for a refusal.

    This stands in for langchain-mcp-adapters' load_mcp_tools, whose calls
    send no _meta of the app's (and whose 0.3 releases need mcp<2). names:
    the tools to take (default: all)."""
    listed = (await session.list_tools()).tools
    return [
        _mcp_tool(session, t.name, t.description or t.name, dict(t.input_schema), deadline, messages_key, _published_intent(t))
        for t in listed
        if names is None or t.name in names
    ]


def _published_intent(tool: Any) -> tuple[Mapping[str, str], ...]:
    from .mcp import intent_fields

    return intent_fields(tool)


def _mcp_tool(
    session: ClientSession, name: str, description: str, schema: dict[str, Any], deadline: float, messages_key: str, fields: Sequence[Mapping[str, str]] = ()
) -> BaseTool:
    from .mcp import call_as_task, result_text

    def intent_of(raw: dict[str, Any]) -> str:
        return call_intent(fields, raw)

    # The model is shown the MCP tool's own schema (a dict, which LangChain
    # hands on unvalidated: the server validates); ToolNode sees runtime in
    # the function's signature and injects the call's ID, the state and the
    # config there.
    async def arun(runtime: ToolRuntime, **kwargs: Any) -> str:
        key = durable_key(runtime.config, runtime.tool_call_id, name, runtime.state, messages_key=messages_key, intent=intent_of)
        while True:
            try:
                return result_text(await call_as_task(session, name, kwargs, key=key, resume=RESUME["langgraph"], deadline=deadline, by_intent=bool(fields)))
            except DeadlineError:
                interrupt(pending_answer(name, key))  # a resume returns here, and waits on the task again

    return StructuredTool.from_function(coroutine=arun, name=name, description=description, args_schema=schema)
