"""The one derivation of a key from a durable identity, shared with the Go
and TypeScript clients through clients/testdata/keys.json."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Any

import rfc8785

__all__ = ["canonical", "derive_key", "occurrence"]


def derive_key(scheme: str, *parts: str) -> str:
    """The key of the identity named by parts (a framework's thread,
    namespace and call IDs, and the tool's name): the same parts give the
    same key in any process and any language, other parts another key.
    47 characters, within idemflow's rules."""
    h = hashlib.sha256()
    for p in (scheme, *parts):
        h.update(p.encode("utf-8"))
        h.update(b"\0")
    digest = base64.urlsafe_b64encode(h.digest()).decode("ascii").rstrip("=")
    return f"{scheme}_{digest[:42]}"


def canonical(value: Any) -> str:
    """value in its RFC 8785 form: the same JSON text in every client,
    whatever the order of its keys."""
    return rfc8785.dumps(value).decode("utf-8")


def call_arguments(value: Any) -> str:
    """A tool call's arguments in their RFC 8785 form, less a top-level
    idempotency_key: idemflow's MCP tools take one the model writes, new
    each time it writes the call, so it is no part of the intended call
    (the same call through the native tool and through MCP has one key)."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "idempotency_key"}
    return canonical(value)


def occurrence(calls: Sequence[tuple[str, str, str]], call_id: str) -> tuple[str, int] | None:
    """What names call call_id among a turn's calls beyond its turn and
    tool: the digest of its arguments (derive_key("args", ...)) and their
    occurrence (from 1) among the calls of its tool with those arguments,
    up to it. calls are (call ID, tool, arguments in RFC 8785 form), in
    their order; the last one named call_id is the call (a later response
    may bring an ID back). None where calls do not hold call_id."""
    at = max((i for i, c in enumerate(calls) if c[0] == call_id), default=-1)
    if at < 0:
        return None
    _, tool, args = calls[at]
    return derive_key("args", args), sum(1 for _, t, a in calls[: at + 1] if t == tool and a == args)
