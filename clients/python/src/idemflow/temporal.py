"""Temporal-native agents: a team whose agent loop is a Temporal workflow
(the OpenAI Agents SDK's Temporal integration, or its own) calls idemflow
from its tool activities, under a key derived from the call's durable
identity. Temporal runs an activity at least once (a worker killed after
the effect, a timeout, a retry); every attempt of one call sends one key,
and idemflow makes the attempts one effect. Two intended calls never share
a key: another run of the same workflow ID (a reused ID, cron,
continue-as-new, a workflow retry) or another call in the run is another
key.

Register :class:`KeyInterceptor` on every worker of the workflows and the
activities: it names each call by the workflow's original run ID (which a
reset keeps) and the call's place among the run's activity calls, and
hands that to the activity in a header. The Go client
(agentclient.KeyInterceptor) writes and reads the same header.

Needs the ``temporal`` extra: ``pip install 'idemflow[temporal]'``.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

import temporalio.converter
from temporalio import activity, workflow
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    StartActivityInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from .errors import NoDurableIdentityError
from .keys import derive_key

__all__ = ["CALL_HEADER", "KEY_SCHEME", "KeyInterceptor", "activity_key"]

#: The scheme of a Temporal activity's key.
KEY_SCHEME = "tp2"
#: The scheme of an activity scheduled by a workflow worker without the
#: interceptor (before the upgrade): workflow ID, activity ID and tool.
LEGACY_KEY_SCHEME = "tp1"
#: The header that carries a call's identity, as JSON {"run": ..., "n": ...}.
CALL_HEADER = "idemflow-call"


@dataclass(frozen=True)
class _Call:
    run: str  # the workflow's original run ID; "" when no header came
    n: int  # the call's place among the run's activity calls, from 1


_call: contextvars.ContextVar[_Call] = contextvars.ContextVar("idemflow_temporal_call")


def activity_key(tool: str | None = None, *, scope: str = "") -> str:
    """The key of the running activity's call of tool (default: the
    activity's type): the same on every attempt, and for the call a reset
    makes again; another for every other intended call. scope, if given,
    is added to the parts (a name the caller wants the key to carry).

    Raises NoDurableIdentityError outside an activity, in one that no
    workflow scheduled, or on a worker without :class:`KeyInterceptor`. An
    activity scheduled by a workflow worker without it (one in flight
    across the upgrade) gets the tp1 key its earlier attempts sent, and a
    warning in the activity's log.
    """
    try:
        info = activity.info()
    except RuntimeError as e:
        raise NoDurableIdentityError("activity_key: not in a Temporal activity, so there is no durable identity to derive a key from") from e
    if not info.workflow_id:
        raise NoDurableIdentityError(f"activity_key: activity {info.activity_type} was not scheduled by a workflow, so it has no durable identity")
    call = _call.get(None)
    if call is None:
        raise NoDurableIdentityError(
            "activity_key: register idemflow.temporal.KeyInterceptor() on the worker (Worker(..., interceptors=[KeyInterceptor()])),"
            " so that the key can tell the workflow's calls apart"
        )
    tool = tool or info.activity_type
    if not call.run:
        activity.logger.warning(
            "idemflow: this activity was scheduled by a workflow worker without KeyInterceptor, so its key (tp1) cannot tell the workflow's runs apart"
        )
    return call_key(info.workflow_id, call.run, call.n, info.activity_id, tool, scope)


def call_key(workflow_id: str, original_run_id: str, n: int, activity_id: str, tool: str, scope: str = "") -> str:
    """The derivation the shared vectors check (clients/testdata/keys.json):
    tp2 from the run and the call's place, or tp1 where no run came."""
    extra = [scope] if scope else []
    if not original_run_id:
        return derive_key(LEGACY_KEY_SCHEME, workflow_id, activity_id, tool, *extra)
    return derive_key(KEY_SCHEME, workflow_id, original_run_id, str(n), tool, *extra)


class KeyInterceptor(Interceptor):
    """What :func:`activity_key` needs from the worker: on the workflow's
    side it numbers the activities and local activities the workflow
    starts and writes each call's identity into its header; on the
    activity's side it hands that identity to activity_key. It reads only
    ``workflow.info()`` and counts in the order the workflow's code runs,
    so the workflow stays deterministic."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityInbound(next)

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor] | None:
        return _WorkflowInbound


class _ActivityInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        call = _Call("", 0)
        payload = input.headers.get(CALL_HEADER)
        if payload is not None:
            raw = temporalio.converter.default().payload_converter.from_payloads([payload])[0]
            call = _Call(str(raw["run"]), int(raw["n"]))
        token = _call.set(call)
        try:
            return await super().execute_activity(input)
        finally:
            _call.reset(token)


class _WorkflowInbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_WorkflowOutbound(outbound))


class _WorkflowOutbound(WorkflowOutboundInterceptor):
    """One run's: the worker makes one for each workflow it runs or
    replays, so the count starts afresh each time."""

    def __init__(self, next: WorkflowOutboundInterceptor) -> None:
        super().__init__(next)
        self._calls = 0

    def _stamp(self, headers: Any) -> dict[str, Any]:
        self._calls += 1
        ident = {"run": workflow.info().original_execution_run_id, "n": self._calls}
        return {**headers, CALL_HEADER: temporalio.converter.default().payload_converter.to_payloads([ident])[0]}

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        input.headers = self._stamp(input.headers)
        return super().start_activity(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        input.headers = self._stamp(input.headers)
        return super().start_local_activity(input)
