"""Temporal-native agents: a team whose agent loop is a Temporal workflow
(the OpenAI Agents SDK's Temporal integration, or its own) calls idemflow
from its tool activities, under a key derived from the call's durable
identity. Temporal runs an activity at least once (a worker killed after
the effect, a timeout, a retry); every attempt of one call sends one key,
and idemflow makes the attempts one effect.

The key names the intended call, not its place in the run (the rule is
written once, in clients/testdata/keys.json, and Go's
agentclient.ActivityKey follows it): the run's lineage (the chain's first
run, which a reset and a workflow retry keep; a cron firing's own run),
its turn (how many times the lineage continued as new before it), the
tool, the call's arguments in their canonical JSON, and how many calls of
the same activity with the same arguments the run made before it. So a
reset that runs the model again finds every call the model asks for
again, wherever it comes, and a call with other arguments is new; a
reused workflow ID, a cron firing, a further turn of continue-as-new and a
further call are new intents.

An activity whose intent fields the worker declares
(``KeyInterceptor(intent={"open_ticket": BUILTIN_INTENT["create_ticket"]})``)
is keyed by its intent (tp4) in place of its whole arguments: the declared
fields of its one argument, normalised (idemflow.keys), so a reset whose
model rewrites only free text finds the first call's key. Its request
must say so (:func:`activity_by_intent`, ``Intent(by_intent=...)``), and
the answer is then the first call's, a replay naming what differed.

Register :class:`KeyInterceptor` on every worker of the workflows and the
activities: on the workflow's side it names each call in a header, and
hands the next turn its lineage on continue-as-new; on the activity's side
it hands the call's name to :func:`activity_key`. A call that no
interceptor named gets no key: :class:`NoDurableIdentityError`, which
fails the activity for good (non-retryable), naming the fix.

Needs the ``temporal`` extra: ``pip install 'idemflow[temporal]'``.
"""

from __future__ import annotations

import base64
import contextvars
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

import rfc8785
import temporalio.converter
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ContinueAsNewInput,
    ExecuteActivityInput,
    Interceptor,
    StartActivityInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from .errors import NoDurableIdentityError
from .keys import derive_key, intent_canonical

__all__ = [
    "CALL_HEADER",
    "INTENT_KEY_SCHEME",
    "KEY_SCHEME",
    "LINEAGE_HEADER",
    "KeyInterceptor",
    "NoCallIdentityError",
    "activity_by_intent",
    "activity_key",
    "args_digest",
    "call_key",
    "intent_digest",
]

#: The scheme of a Temporal activity's key.
KEY_SCHEME = "tp3"
#: tp3 with the call's intent in place of its arguments: a scheme of its
#: own, so no tp3 key in flight is read as an intent's.
INTENT_KEY_SCHEME = "tp4"
#: A call numbered by its place among the run's calls, by a workflow worker
#: of the previous release: its retries keep that key.
PLACE_KEY_SCHEME = "tp2"
#: A call no interceptor numbered, scheduled before ``upgraded_at``:
#: workflow ID, activity ID and tool.
LEGACY_KEY_SCHEME = "tp1"
#: The header that names a call, as JSON {"lineage", "turn", "args", "n"}.
CALL_HEADER = "idemflow-call"
#: The header that hands a continued run its lineage, as JSON
#: {"lineage", "turn", "by"}.
LINEAGE_HEADER = "idemflow-lineage"


class NoCallIdentityError(NoDurableIdentityError, ApplicationError):
    """No interceptor named this call, so no key can tell it from another
    run's: non-retryable, since no attempt can find what the first did
    not have, so the run fails at once instead of retrying for ever."""

    def __init__(self, message: str) -> None:
        ApplicationError.__init__(self, message, type="NoDurableIdentity", non_retryable=True)


@dataclass(frozen=True)
class _Call:
    lineage: str = ""  # tp3: the lineage's run; "" when no tp3 header came
    turn: int = 0
    args: str = ""
    n: int = 0  # tp3: the occurrence of (activity, args); tp2: the place
    intent: bool = False  # tp4: args is the digest of the call's intent
    run: str = ""  # tp2: the original run ID


@dataclass(frozen=True)
class _Intercepted:
    call: _Call
    upgraded_at: datetime | None


_call: contextvars.ContextVar[_Intercepted] = contextvars.ContextVar("idemflow_temporal_call")


def activity_key(tool: str | None = None, *, scope: str = "") -> str:
    """The key of the running activity's call of tool (default: the
    activity's type): the same on every attempt, and for the call made
    again by a reset (to any point, with a model that answers otherwise),
    a workflow retry, or a reset of a continue-as-new chain; another for
    every other intended call. scope, if given, is added to the parts (a
    name the caller wants the key to carry).

    Raises :class:`NoCallIdentityError` (a :class:`NoDurableIdentityError`
    Temporal does not retry) outside an activity, in one no workflow
    scheduled, or for a call no :class:`KeyInterceptor` named. A call a
    workflow worker of the previous release named keeps its tp2 key; see
    ``KeyInterceptor(upgraded_at=...)`` for one scheduled before the
    upgrade.
    """
    try:
        info = activity.info()
    except RuntimeError as e:
        raise NoCallIdentityError("idemflow: no key: activity_key was called outside a Temporal activity") from e
    if not info.workflow_id:
        raise NoCallIdentityError(f"idemflow: no key: activity {info.activity_type} was not scheduled by a workflow")
    got = _call.get(None)
    if got is None:
        raise NoCallIdentityError(
            "idemflow: no key: register idemflow.temporal.KeyInterceptor() on this worker (Worker(..., interceptors=[KeyInterceptor()])),"
            " and on the workflow's, so that the key can tell the workflow's calls apart"
        )
    tool = tool or info.activity_type
    c = got.call
    if c.lineage:
        derive = intent_call_key if c.intent else call_key
        return derive(info.workflow_id, c.lineage, c.turn, tool, c.args, c.n, scope)
    if c.run:
        activity.logger.warning(
            "idemflow: this call was numbered by its place (tp2), by a workflow worker of an earlier release: it keeps that key; upgrade the workflow's worker"
        )
        return place_key(info.workflow_id, c.run, c.n, tool, scope)
    if got.upgraded_at is not None and info.scheduled_time < got.upgraded_at:
        activity.logger.warning(
            "idemflow: this call was scheduled before the workflow's worker had KeyInterceptor (upgraded_at): it keeps the tp1 key its earlier attempts sent"
        )
        return legacy_key(info.workflow_id, info.activity_id, tool, scope)
    raise NoCallIdentityError(
        "idemflow: no key: the workflow's worker scheduled this call without idemflow.temporal.KeyInterceptor, so nothing tells it from"
        " another run's call: register KeyInterceptor() on the workflow's worker too"
    )


def activity_by_intent() -> bool:
    """Whether the running activity's key names its intent (declared on
    the workflow's worker) rather than its whole arguments: its request
    must then say so (``Intent(by_intent=True)``), so idemflow compares
    the intent fields alone and answers a reworded call with the first
    call's answer, naming what differed."""
    got = _call.get(None)
    return got is not None and bool(got.call.lineage) and got.call.intent


def _scope(scope: str) -> list[str]:
    return [scope] if scope else []


def call_key(workflow_id: str, lineage: str, turn: int, tool: str, args: str, n: int, scope: str = "", *, scheme: str = KEY_SCHEME) -> str:
    """The tp3 derivation the shared vectors check (clients/testdata/keys.json)."""
    return derive_key(scheme, workflow_id, lineage, str(turn), tool, args, str(n), *_scope(scope))


def intent_call_key(workflow_id: str, lineage: str, turn: int, tool: str, intent: str, n: int, scope: str = "") -> str:
    """tp4: tp3 with the digest of the call's intent (intent_digest)."""
    return call_key(workflow_id, lineage, turn, tool, intent, n, scope, scheme=INTENT_KEY_SCHEME)


def place_key(workflow_id: str, original_run_id: str, n: int, tool: str, scope: str = "") -> str:
    """tp2: a call numbered by its place, by the previous release."""
    return derive_key(PLACE_KEY_SCHEME, workflow_id, original_run_id, str(n), tool, *_scope(scope))


def legacy_key(workflow_id: str, activity_id: str, tool: str, scope: str = "") -> str:
    """tp1: a call scheduled before the upgrade, which nothing numbered."""
    return derive_key(LEGACY_KEY_SCHEME, workflow_id, activity_id, tool, *_scope(scope))


def args_digest(payloads: Sequence[Payload]) -> str:
    """A call's arguments: each payload's encoding and data, JSON in its
    RFC 8785 form (a model that writes the same arguments in another order
    asks for the same call), anything else as base64."""
    parts: list[str] = []
    for p in payloads:
        enc = p.metadata.get("encoding", b"").decode("utf-8", "replace")
        data = base64.b64encode(p.data).decode("ascii")
        if enc == "json/plain":
            try:
                data = rfc8785.dumps(json.loads(p.data)).decode("utf-8")
            except (ValueError, rfc8785.CanonicalizationError):
                pass
        parts += [enc, data]
    return derive_key("args", *parts)


def intent_digest(fields: Sequence[Mapping[str, str]], payloads: Sequence[Payload]) -> str:
    """A call's intent: the declared fields of its one argument, a JSON
    object, normalised; ValueError for any other arguments, which have no
    intent fields to read (the workflow's mistake, not the model's)."""
    if len(payloads) != 1 or payloads[0].metadata.get("encoding", b"") != b"json/plain":
        raise ValueError(f"intent fields name members of an activity's one argument, a JSON object; this call has {len(payloads)} arguments")
    args = json.loads(payloads[0].data)
    if not isinstance(args, dict):
        raise ValueError("intent fields name members of a JSON object; this call's argument is no JSON object")
    return derive_key("intent", intent_canonical(fields, args))


@dataclass(frozen=True)
class _Lineage:
    id: str
    turn: int = 0


def lineage_of(info: workflow.Info, headers: Mapping[str, Payload]) -> _Lineage:
    """The lineage of the run info describes, whose start carried headers:
    read only from the run's start, so every replay, reset and worker
    computes the same (agentclient.lineageOf is its Go twin)."""
    carried: dict[str, Any] = {}
    if LINEAGE_HEADER in headers:
        try:
            raw = _converter().from_payloads([headers[LINEAGE_HEADER]])[0]
            carried = raw if isinstance(raw, dict) else {}
        except Exception:
            carried = {}
    has = bool(carried.get("lineage"))
    continued = info.continued_run_id or ""
    if has and info.attempt == 1 and carried.get("by", "") == continued:
        # Continued as new by its predecessor: the next turn.
        return _Lineage(str(carried["lineage"]), int(carried.get("turn", 0)))
    if has and info.attempt > 1 and not info.cron_schedule:
        # A retry of a continued run: Temporal copies the failed run's start.
        return _Lineage(str(carried["lineage"]), int(carried.get("turn", 0)))
    if not info.cron_schedule and (not continued or info.attempt > 1):
        # The chain's first run, or its retry: the first run ID.
        return _Lineage(info.first_execution_run_id)
    # A cron firing, or a run continued by a worker without the interceptor.
    return _Lineage(info.original_execution_run_id)


def _converter() -> temporalio.converter.PayloadConverter:
    return temporalio.converter.default().payload_converter


class KeyInterceptor(Interceptor):
    """What :func:`activity_key` needs from the worker: on the workflow's
    side it names each activity and local activity the workflow starts
    (lineage, turn, arguments, occurrence) in the call's header, and the
    next turn's lineage in a continue-as-new's; on the activity's side it
    hands that name to activity_key. It reads only the run's start and the
    workflow's own calls, in the order its code makes them, so the
    workflow stays deterministic and its history gains no event.

    upgraded_at is the explicit path for calls in flight across the upgrade
    to the interceptor: a call no interceptor named, scheduled before it,
    keeps the tp1 key its earlier attempts sent; one scheduled later fails
    as any unnamed call does. Set it to when the last workflow worker got
    the interceptor, and drop it once those calls have ended.

    intent maps an activity's name to its intent fields, as the operation
    it calls declares them (its MCP tool's ``_meta["io.idemflow/intent"]``,
    ``idemflow.keys.BUILTIN_INTENT`` for idemflow's own): its calls are
    keyed by their intent (tp4). Give it to the workflow's worker, where
    calls are named; a call whose argument is not one JSON object fails
    the workflow task, visibly, until the code is fixed. Declare it before
    the first call, or once every run that may be reset to before a call
    has closed: a call first named by its arguments is another key."""

    def __init__(self, upgraded_at: datetime | None = None, *, intent: Mapping[str, Sequence[Mapping[str, str]]] | None = None) -> None:
        self._upgraded_at = upgraded_at
        intents = {name: tuple(fields) for name, fields in (intent or {}).items()}
        # A class of this interceptor's own: Temporal makes the workflow's
        # interceptor from a class, and each worker may declare others.
        self._workflow_class = type("_WorkflowInbound", (_WorkflowInbound,), {"intents": intents})

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityInbound(next, self._upgraded_at)

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor] | None:
        return self._workflow_class


class _ActivityInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, upgraded_at: datetime | None) -> None:
        super().__init__(next)
        self._upgraded_at = upgraded_at

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        call = _Call()
        payload = input.headers.get(CALL_HEADER)
        if payload is not None:
            try:
                raw = _converter().from_payloads([payload])[0]
                call = _Call(
                    lineage=str(raw.get("lineage", "")),
                    turn=int(raw.get("turn", 0)),
                    args=str(raw.get("args", "")),
                    n=int(raw["n"]),
                    run=str(raw.get("run", "")),
                    intent=bool(raw.get("intent", False)),
                )
            except Exception as e:
                raise NoCallIdentityError(f"idemflow: no key: the header {CALL_HEADER}: {e}") from e
        token = _call.set(_Intercepted(call, self._upgraded_at))
        try:
            return await super().execute_activity(input)
        finally:
            _call.reset(token)


class _WorkflowInbound(WorkflowInboundInterceptor):
    intents: Mapping[str, Sequence[Mapping[str, str]]] = {}

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_WorkflowOutbound(outbound, self.intents))


class _WorkflowOutbound(WorkflowOutboundInterceptor):
    """One run's: the worker makes one for each workflow it runs or
    replays, so the occurrences count afresh each time."""

    def __init__(self, next: WorkflowOutboundInterceptor, intents: Mapping[str, Sequence[Mapping[str, str]]]) -> None:
        super().__init__(next)
        self._intents = intents
        self.line: _Lineage | None = None
        self._seen: dict[tuple[str, str], int] = {}

    def _lineage(self) -> _Lineage:
        # Read from the run's start (workflow.info() carries its headers),
        # at the first call that needs it: a signal handler may schedule an
        # activity in the first activation, before the run's own code.
        if self.line is None:
            info = workflow.info()
            self.line = lineage_of(info, info.headers)
        return self.line

    def _stamp(self, activity: str, args: Sequence[Any], headers: Mapping[str, Payload]) -> dict[str, Payload]:
        line = self._lineage()
        payloads = workflow.payload_converter().to_payloads(list(args))
        fields = self._intents.get(activity)
        digest = intent_digest(fields, payloads) if fields is not None else args_digest(payloads)
        self._seen[(activity, digest)] = self._seen.get((activity, digest), 0) + 1
        ident: dict[str, Any] = {"lineage": line.id, "turn": line.turn, "args": digest, "n": self._seen[(activity, digest)]}
        if fields is not None:
            ident["intent"] = True
        return {**headers, CALL_HEADER: _converter().to_payloads([ident])[0]}

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        input.headers = self._stamp(input.activity, input.args, input.headers)
        return super().start_activity(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        input.headers = self._stamp(input.activity, input.args, input.headers)
        return super().start_local_activity(input)

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        line = self._lineage()
        nxt = {"lineage": line.id, "turn": line.turn + 1, "by": workflow.info().run_id}
        input.headers = {**input.headers, LINEAGE_HEADER: _converter().to_payloads([nxt])[0]}
        super().continue_as_new(input)
