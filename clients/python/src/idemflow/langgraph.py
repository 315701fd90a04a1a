"""The LangGraph integration: a tool whose idempotency key is derived from
the framework's own durable identity of the call, so that a run resumed
from its checkpoint (after a crash, a deploy, or a human review step),
which calls the tool again, replays the first answer instead of taking
effect twice.

LangGraph checkpoints the model's message, with its own ID and its
tool_calls[].id, before the tool node runs (with durability="sync"); a
resumed run runs the tool node again with the same thread, the same node
path and the same message. The key is derived from those, the tool-call ID
and the tool's name. The message's ID is there because some models and
servers number tool calls per message (call_0, call_1): a later turn of
the thread brings the same tool-call ID back, and is another intended
call. Never from the checkpoint namespace's task IDs: LangGraph derives a
task ID from the checkpoint the step started from, so anything that writes
a checkpoint between the crash and the resume (update_state in a review
step) would change it, and with it the key.

Needs the ``langgraph`` extra: ``pip install 'idemflow[langgraph]'``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool
from langgraph.prebuilt import InjectedState
from langgraph.types import interrupt
from pydantic import BaseModel, create_model

from ._tooltext import RESUME, answer_text, arguments, pending_text, refusal_text
from .client import AsyncClient, Client, Intent
from .errors import DeadlineError, NoDurableIdentityError, ProblemError
from .keys import derive_key

__all__ = ["KEY_SCHEME", "call_message_id", "durable_key", "idemflow_tool", "node_path", "pending_answer"]

#: The scheme of a LangGraph tool call's key (lg1 included the task IDs;
#: lg2 lacked the AI message's ID, and a reused tool-call ID was a replay).
KEY_SCHEME = "lg3"


def node_path(checkpoint_ns: str) -> str:
    """The checkpoint namespace without its task IDs: "inner:<id>|tools:<id>"
    is "inner|tools". LangGraph refuses ":" and "|" in node names, so the
    path is what the graph's structure names, the same on every resume."""
    if not checkpoint_ns:
        return ""
    return "|".join(part.split(":", 1)[0] for part in checkpoint_ns.split("|"))


def call_message_id(state: Any, tool_call_id: str | None, messages_key: str = "messages") -> str | None:
    """The ID of the AI message that asked for the tool call: the last one
    in the graph state's messages carrying tool_call_id (the one ToolNode
    runs), or None when the state holds none with an ID. state is what
    ToolNode injects: the graph's state (a dict or an object with the
    messages) or the list of messages."""
    if isinstance(state, list):
        messages = state
    elif isinstance(state, Mapping):
        messages = state.get(messages_key) or []
    else:
        messages = getattr(state, messages_key, None) or []
    for m in reversed(messages):
        if isinstance(m, AIMessage) and any(c.get("id") == tool_call_id for c in m.tool_calls):
            return m.id or None
    return None


def durable_key(config: Mapping[str, Any] | None, tool_call_id: str | None, tool_name: str, message_id: str | None) -> str:
    """The key of one tool call: from the run's thread_id, the node path of
    its checkpoint namespace, the ID of the AI message that asked for it
    (call_message_id), the call's ID and the tool's name.

    Raises NoDurableIdentityError when the run has no thread (no
    checkpointer, or invoked without configurable.thread_id), the call no
    ID, or the call's message is unknown: a random key would protect
    nothing across a resume, and a key without the message would answer a
    later turn that reuses the tool-call ID with this one's replay; neither
    is made in silence.
    """
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
    if not message_id:
        raise NoDurableIdentityError(
            f"{tool_name}: the AI message that asked for call {tool_call_id} is not in the graph's state with an ID (call the tool"
            " through a ToolNode of a graph whose state keeps the messages), so no key can tell this call from a later turn's that reuses its ID"
        )
    return derive_key(KEY_SCHEME, str(thread_id), node_path(str(configurable.get("checkpoint_ns") or "")), message_id, tool_call_id, tool_name)


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
    ToolNode's: the key names the AI message that asked for the call.
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

    def prepare(kwargs: dict[str, Any], config: RunnableConfig) -> tuple[str, Intent]:
        call_id = kwargs.pop("tool_call_id", None)
        state = kwargs.pop("idemflow_state", None)
        key = durable_key(config, call_id, name, call_message_id(state, call_id, messages_key))
        args = arguments(args_schema, kwargs)
        p = path(args) if callable(path) else path
        return key, Intent(key, p, body(args) if body else args)

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
