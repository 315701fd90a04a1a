"""Temporal-native agents: a team whose agent loop is a Temporal workflow
(the OpenAI Agents SDK's Temporal integration, or its own) calls idemflow
from its tool activities, under a key derived from the activity's durable
identity. Temporal runs an activity at least once (a worker killed after
the effect, a timeout, a retry); every attempt of one activity has the same
workflow ID and activity ID, so every attempt sends one key, and idemflow
makes the attempts one effect.

Needs the ``temporal`` extra: ``pip install 'idemflow[temporal]'``.
"""

from __future__ import annotations

from temporalio import activity

from .errors import NoDurableIdentityError
from .keys import derive_key

__all__ = ["KEY_SCHEME", "activity_key"]

#: The scheme of a Temporal activity's key.
KEY_SCHEME = "tp1"


def activity_key(tool: str | None = None, *, scope: str = "") -> str:
    """The key of the running activity: from its workflow ID, its activity
    ID (the same on every attempt, and independent of the run ID, which a
    reset changes) and the tool's name (default: the activity's type).

    A workflow that continues as new starts its activity IDs again at "1":
    give each run's calls a scope that names them across runs (the model's
    tool-call ID, or a turn number the workflow carries over), or two calls
    in two runs share a key.

    Raises NoDurableIdentityError outside an activity, or in one that no
    workflow scheduled (a standalone activity has no durable call to name).
    """
    try:
        info = activity.info()
    except RuntimeError as e:
        raise NoDurableIdentityError("activity_key: not in a Temporal activity, so there is no durable identity to derive a key from") from e
    if not info.workflow_id:
        raise NoDurableIdentityError(f"activity_key: activity {info.activity_type} was not scheduled by a workflow, so it has no durable identity")
    parts = [info.workflow_id, info.activity_id, tool or info.activity_type]
    if scope:
        parts.append(scope)
    return derive_key(KEY_SCHEME, *parts)
