"""The Claude Agent SDK for Python (``claude-agent-sdk``): idemflow's
operations as the SDK's tools (in an in-process MCP server,
``create_sdk_mcp_server``), each call keyed by the intended call, so that a
turn killed mid call and sent again on its resumed session replays the
first answer instead of taking effect twice.

What the SDK keeps, read in claude-agent-sdk 0.2.190 (with its bundled
CLI, 2.1.337): each tool call has a ``tool_use`` ID, which the
``PreToolUse`` hook is handed; a tool's handler is handed the call's
arguments only. The session's transcript is written as the run goes, but
not before the tool runs, and a run killed mid call and resumed
(``options.resume``) holds at most the assistant message that asked for
the call and a ``tool_result`` saying it was interrupted: the model, asked
again, writes the call again under a new ``tool_use`` ID. So the key is
neither the ``tool_use`` ID nor anything read from the transcript. It is
the intended call (cl1, as the TypeScript client's ``callKey``): the
session, the turn (the ID of the user message the run answers, which the
app keeps and sends again with the message), the tool, the arguments
(RFC 8785, less a model-written ``idempotency_key``) and their occurrence
among the turn's calls of that tool with those arguments.

``run_durably`` records each call in the app's state file from the
``PreToolUse`` hook, written durably before the call runs, and its answer
from ``PostToolUse``. A call takes the key of the turn's earliest recorded
call of that tool with those arguments whose answer the model has not
read (one a crash interrupted, or whose answer never reached the
transcript); otherwise it is a new call, keyed as the turn's first
occurrence no call of this run took. The handler, which is not told the
``tool_use`` ID, takes the earliest call of this run recorded with its tool
and arguments that no handler took yet: calls with the same tool and
arguments are alike until one is answered.

Needs the ``claude-agent`` extra (``claude-agent-sdk``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from claude_agent_sdk import (
    ClaudeAgentOptions,
    HookMatcher,
    SdkMcpTool,
    get_session_info,
    get_session_messages,
    query,
    tool,
)
from claude_agent_sdk.types import Message
from pydantic import BaseModel, ValidationError

from ._files import write_durably
from ._tooltext import RESUME, arguments, outcome
from .client import AsyncClient, Client, Intent
from .errors import NoDurableIdentityError
from .keys import call_arguments, call_digest, call_intent, derive_key, intent_fields_of

__all__ = ["ARGS_KEY_SCHEME", "KEY_SCHEME", "NoDurableIdentityError", "call_key", "idemflow_tool", "run_durably"]

#: The scheme of a call's key: the intended call within the session's
#: turn, named by its intent fields (a ticket's customer, never its
#: wording).
KEY_SCHEME = "cl2"
#: The scheme before cl2: the intended call named by its whole arguments.
#: A turn's state file keeps the keys its calls took, so a call in flight
#: across the upgrade keeps its cl1 key.
ARGS_KEY_SCHEME = "cl1"


def call_key(
    session_id: str, turn_id: str, tool: str, args: Any, occurrence: int, *, fields: Sequence[Mapping[str, str]] = (), key_scheme: str = KEY_SCHEME
) -> str:
    """The key of a call from its parts (clients/testdata/keys.json's
    claude_agent vectors, shared with the TypeScript client): under cl2,
    named by call_intent(fields, args), under cl1 by its whole arguments."""
    if key_scheme not in (KEY_SCHEME, ARGS_KEY_SCHEME):
        raise ValueError(f"key_scheme {key_scheme!r}: {KEY_SCHEME} or {ARGS_KEY_SCHEME}")
    named = call_intent(fields, args) if key_scheme == KEY_SCHEME else call_arguments(args)
    return derive_key(key_scheme, session_id, derive_key("turn", turn_id), tool, call_digest(named), str(occurrence))


class _Turn:
    """A run's record of its turn's calls, shared by its hooks and its tools."""

    def __init__(self, path: Path, state: dict[str, Any], read: set[str], intents: Mapping[str, Sequence[Mapping[str, str]]]) -> None:
        self.path, self.state, self.intents = path, state, intents
        #: The calls of this run that started and have not ended.
        self.running: set[str] = set()
        #: The calls whose handler took them.
        self.taken_calls: set[str] = set()
        #: The keys this run's calls took.
        self.taken: set[str] = set()
        #: The calls a call written again may be: not written again in this
        #: run, their answers not read by the model.
        self.open = {c["id"] for c in state["calls"] if not (c["answered"] and c["id"] in read)}

    def fields(self, tool: str) -> Sequence[Mapping[str, str]]:
        """The tool's intent fields: the app's (none: its whole arguments),
        or idemflow's own tool's."""
        return self.intents[tool] if tool in self.intents else intent_fields_of(tool)

    async def start(self, call_id: str, tool: str, args: Any) -> None:
        """Records call call_id of tool with args, its key decided, durably.
        A call written again is one not yet answered to the model with the
        same intent (its intent fields; a call recorded before cl2 by its
        arguments), whose key it takes."""
        calls = self.state["calls"]
        if any(c["id"] == call_id for c in calls):
            return
        digest = call_arguments(args)
        fields = self.fields(tool)
        named = call_intent(fields, args)
        again = next((c for c in calls if c["tool"] == tool and c.get("intent", c["args"]) in (named, digest) and c["id"] in self.open), None)
        if again is not None:
            self.open.discard(again["id"])
            key = again["key"]
        else:
            n = 1
            while (key := call_key(self.state["session_id"], self.state["turn_id"], tool, args, n, fields=fields)) in self.taken:
                n += 1
        self.taken.add(key)
        calls.append({"id": call_id, "tool": tool, "args": digest, "intent": named, "key": key, "answered": False})
        self.running.add(call_id)
        await self.save()

    def take(self, tool: str, args: Any) -> tuple[str, str] | None:
        """The ID and key of the earliest running call of tool with args that
        no handler took yet, now taken."""
        digest = call_arguments(args)
        for c in self.state["calls"]:
            if c["id"] in self.running and c["id"] not in self.taken_calls and c["tool"] == tool and c["args"] == digest:
                self.taken_calls.add(c["id"])
                return c["id"], c["key"]
        return None

    async def answered(self, call_id: str) -> None:
        """Records that call call_id was answered (a final answer or refusal
        the model read)."""
        if call_id not in self.running:
            return
        self.running.discard(call_id)
        for c in self.state["calls"]:
            if c["id"] == call_id:
                c["answered"] = True
        await self.save()

    def ended(self, call_id: str) -> None:
        """Records that call call_id ended without an answer: the same call
        written again is it."""
        self.running.discard(call_id)
        if any(c["id"] == call_id and not c["answered"] for c in self.state["calls"]):
            self.open.add(call_id)

    async def save(self) -> None:
        await asyncio.to_thread(write_durably, self.path, json.dumps(self.state))


#: The turn a run of run_durably is in, for its tools: the SDK runs their
#: handlers in tasks of the run's own, which copy this context.
_current: ContextVar[_Turn | None] = ContextVar("idemflow_claude_turn", default=None)


def idemflow_tool(
    client: Client | AsyncClient,
    *,
    name: str,
    description: str,
    path: str | Callable[[dict[str, Any]], str],
    input_model: type[BaseModel],
    body: Callable[[dict[str, Any]], Any] | None = None,
    wait: float = 300.0,
) -> SdkMcpTool[Any]:
    """A tool of the Claude Agent SDK (for create_sdk_mcp_server) that runs
    one of idemflow's operations (a ticket, an order, a declared operation,
    an HTTP tool) exactly once per intended call, however often a resumed
    session writes it again. Its calls run under run_durably, which keys
    them; a call outside it reads NoDurableIdentityError, and nothing is
    sent.

    path is the operation's, or a function of the arguments; body makes the
    request's body from them (default: the arguments, as input_model reads
    them). The model reads {http_status, replayed, result}, or for a final
    refusal {http_status, error, problem, body, key}. A call whose final
    answer has not come within wait seconds returns, as the tool's error,
    that it is pending under its key and must not be made again; the call
    is not counted, so the same call asked again, now or in the turn sent
    again, is this one, under its key.
    """

    async def handler(raw: dict[str, Any]) -> dict[str, Any]:
        turn = _current.get()
        if turn is None:
            raise NoDurableIdentityError(f"{name}: called outside run_durably, which records each call before it runs")
        found = turn.take(name, raw)
        if found is None:
            raise NoDurableIdentityError(
                f"{name}: no call with these arguments was recorded before it ran (is the tool in an SDK MCP server of the run's options?)"
            )
        call_id, key = found
        try:
            args = arguments(input_model, raw)
        except ValidationError as e:
            return {"content": [{"type": "text", "text": f"invalid arguments, nothing was sent: {e}"}], "is_error": True}
        target = path(args) if callable(path) else path
        # A key named by the tool's intent fields (cl2): idemflow compares on them.
        by_intent = key.startswith(KEY_SCHEME + "_") and bool(turn.fields(name))
        kind, text = await outcome(client, Intent(key, target, body(args) if body else args, by_intent=by_intent), wait, name, RESUME["claude"])
        if kind == "pending":
            turn.ended(call_id)
        return {"content": [{"type": "text", "text": text}], "is_error": kind != "answer"}

    return tool(name, description, input_model.model_json_schema())(handler)


def _tool_name(name: str) -> str:
    """A tool's own name: an MCP tool's (mcp__<server>__<tool>) without its
    server's prefix, as idemflow_tool names it."""
    at = name.find("__", 5)
    return name[at + 2 :] if name.startswith("mcp__") and at > 0 else name


def _answers_read(session_id: str, directory: str | None) -> set[str]:
    """The tool_use IDs whose tool_result the session's transcript holds."""
    read: set[str] = set()
    for m in get_session_messages(session_id, directory=directory):
        content = m.message.get("content") if isinstance(m.message, dict) else None
        if isinstance(content, list):
            read.update(p["tool_use_id"] for p in content if isinstance(p, dict) and p.get("type") == "tool_result" and isinstance(p.get("tool_use_id"), str))
    return read


def _with_hooks(hooks: dict[Any, list[HookMatcher]] | None, turn: _Turn) -> dict[Any, list[HookMatcher]]:
    """The run's hooks with the turn's: each call recorded before it runs,
    and its answer after."""

    def on_call(act: Callable[[str, Any], Awaitable[None]]) -> Any:
        """A hook callback that hands act the call's tool_use ID and input."""

        async def hook(data: Any, tool_use_id: str | None, context: Any) -> Any:
            call_id = data.get("tool_use_id") or tool_use_id
            if call_id:
                await act(call_id, data)
            return {}

        return hook

    async def pre(call_id: str, data: Any) -> None:
        await turn.start(call_id, _tool_name(str(data.get("tool_name"))), data.get("tool_input") or {})

    async def post(call_id: str, data: Any) -> None:
        await turn.answered(call_id)

    async def failed(call_id: str, data: Any) -> None:
        turn.ended(call_id)

    own = dict(hooks or {})
    for event, act in (("PreToolUse", pre), ("PostToolUse", post), ("PostToolUseFailure", failed)):
        own[event] = [*own.get(event, []), HookMatcher(hooks=[on_call(act)])]
    return own


async def run_durably(
    prompt: str,
    options: ClaudeAgentOptions,
    *,
    session_id: str,
    turn_id: str,
    state: str | Path,
    fork_of: str | None = None,
    rerun: bool = False,
    intents: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
) -> AsyncIterator[Message]:
    """One turn of a Claude agent, query()'s messages in turn: prompt on the
    session session_id (a UUID the app chose for the conversation), started
    under it or resumed, each tool call recorded in the file state before it
    runs and once answered, so that idemflow_tool keys it by the intended
    call. turn_id is the ID the app gave the user message this run
    answers: send a turn killed mid call again with the same one, and its
    calls written again are the same intents.

    fork_of is the session this run forks where session_id is new (a chat's
    "retry in a new branch": resume and fork_session). rerun says the fork
    re-runs turn_id as it was asked in fork_of: its calls are keyed as that
    session's turn's (give the same state file), so the call the model
    writes again is the call whose answer it never read. Without rerun a
    fork is a new conversation, whose calls are new intents.

    A call is named by its intent fields (cl2): idemflow's own tools' by
    name, and intents (tool name to [{"name", "norm"}]) for the app's
    others, so a call the model rewords when the turn is sent again is the
    call it wrote first, a replay that names what differed."""
    if not session_id or not turn_id:
        raise NoDurableIdentityError(
            "run_durably needs the session's ID and the turn's (the user message's) ID: nothing else names a call written again after a crash"
        )
    if rerun and not fork_of:
        raise NoDurableIdentityError("run_durably: rerun names a turn of the session it forks: give fork_of")
    # The session the turn was asked in, which its calls' keys name: the
    # forked one, where the fork re-runs its turn.
    asked = fork_of if rerun and fork_of else session_id
    path = Path(state)
    saved: dict[str, Any] = {"session_id": asked, "turn_id": turn_id, "calls": []}
    if path.exists():
        on_disk = json.loads(path.read_text())
        if on_disk["session_id"] != asked:
            raise ValueError(f"{path} records session {on_disk['session_id']}, not {asked}")
        if on_disk["turn_id"] == turn_id:
            saved = on_disk
    directory = str(options.cwd) if options.cwd is not None else None
    known = get_session_info(session_id, directory=directory) is not None
    # A new fork starts from the forked session's transcript: what the
    # model read there, it reads in the fork.
    source = session_id if known else fork_of
    read = _answers_read(source, directory) if source and (known or get_session_info(source, directory=directory) is not None) else set()
    turn = _Turn(path, saved, read, intents or {})
    await turn.save()
    if known:
        run = dataclasses.replace(options, resume=session_id)
    elif fork_of:
        run = dataclasses.replace(options, resume=fork_of, fork_session=True, session_id=session_id)
    else:
        run = dataclasses.replace(options, session_id=session_id)
    run.hooks = _with_hooks(options.hooks, turn)
    token = _current.set(turn)
    try:
        async for m in query(prompt=prompt, options=run):
            yield m
    finally:
        try:
            _current.reset(token)
        except ValueError:
            # Closed from another context (the generator collected
            # unfinished): the run's own context ends with it.
            pass
