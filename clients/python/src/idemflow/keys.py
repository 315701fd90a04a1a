"""The one derivation of a key from a durable identity, shared with the Go
and TypeScript clients through clients/testdata/keys.json."""

from __future__ import annotations

import base64
import hashlib
import re
import unicodedata
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import rfc8785

__all__ = ["BUILTIN_INTENT", "NORMS", "call_intent", "canonical", "derive_key", "intent_canonical", "intent_fields_of", "normalize", "occurrence"]


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
    return call_digest(args), sum(1 for _, t, a in calls[: at + 1] if t == tool and a == args)


#: The rules of an intent field (idemflow's intent package; the shared
#: vectors in clients/testdata/keys.json, "intent").
NORMS = ("id", "text", "number", "set", "exact")

#: The intent fields of idemflow's built-in tools, as their declarations
#: publish them (OpenAPI's x-idemflow-intent, the MCP tool's _meta
#: "io.idemflow/intent").
BUILTIN_INTENT: Mapping[str, tuple[Mapping[str, str], ...]] = {
    "create_ticket": ({"name": "customer_id", "norm": "id"},),
    "create_order": ({"name": "customer_id", "norm": "id"}, {"name": "items", "norm": "set"}, {"name": "coupon_code", "norm": "id"}),
    "pay_order": ({"name": "order_no", "norm": "id"}, {"name": "payment_ref", "norm": "id"}),
    "cancel_order": ({"name": "order_no", "norm": "id"},),
    "refund_order": ({"name": "order_no", "norm": "id"},),
    "fulfill_order": ({"name": "order_no", "norm": "id"},),
}

_BUILTIN_PATHS = {"/v1/tickets": "create_ticket", "/v1/orders": "create_order"}

# Unicode's White_Space, written out: each language's own notion of a
# space differs (U+FEFF, U+001C), and the three clients must agree.
_WHITE_SPACE = (
    "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680"
    + "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    + "\u2028\u2029\u202f\u205f\u3000"
)
_SPACE_RUN = re.compile("[" + _WHITE_SPACE + "]+")
_DECIMAL = re.compile(r"^([+-]?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]{1,3}))?$")


def intent_fields_of(tool: str, path: str | None = None) -> tuple[Mapping[str, str], ...]:
    """The intent fields of a built-in tool, by its name or its path
    (an app may name its tool otherwise); () for any other tool."""
    return tuple(BUILTIN_INTENT.get(tool) or BUILTIN_INTENT.get(_BUILTIN_PATHS.get(path or "", ""), ()))


def _nfc(s: str) -> str:
    return unicodedata.normalize("NFC", s)


def _plain(neg: bool, digits: str, exp: int) -> str:
    digits = digits.lstrip("0")
    if not digits:
        return "0"
    while digits.endswith("0"):
        digits, exp = digits[:-1], exp + 1
    point = len(digits) + exp
    if exp >= 0:
        s = digits + "0" * exp
    elif point <= 0:
        s = "0." + "0" * -point + digits
    else:
        s = digits[:point] + "." + digits[point:]
    return "-" + s if neg else s


def _number(v: float) -> str:
    # The shortest round-trip form (repr), as Go and JavaScript print it.
    t = Decimal(repr(float(v))).as_tuple()
    return _plain(bool(t.sign), "".join(map(str, t.digits)), int(t.exponent))


def _exact(v: Any) -> Any:
    if isinstance(v, str):
        return _nfc(v)
    if isinstance(v, list | tuple):
        return [_exact(e) for e in v]
    if isinstance(v, Mapping):
        return {_nfc(str(k)): _exact(e) for k, e in v.items()}
    return v


def normalize(norm: str, v: Any) -> Any:
    """v under the intent rule norm (NORMS); a value the rule does not
    apply to is kept exact."""
    if norm not in NORMS:
        raise ValueError(f"norm {norm!r} is none of {NORMS}")
    if norm == "id" and isinstance(v, str):
        return _nfc(v).strip(_WHITE_SPACE)
    if norm == "text" and isinstance(v, str):
        return _nfc(_SPACE_RUN.sub(" ", _nfc(v)).strip(" ").lower())
    if norm == "number" and isinstance(v, int | float) and not isinstance(v, bool):
        return _number(v)
    if norm == "number" and isinstance(v, str):
        m = _DECIMAL.match(v.strip(_WHITE_SPACE))
        if m:
            frac = m.group(3) or ""
            return _plain(m.group(1) == "-", m.group(2) + frac, int(m.group(4) or 0) - len(frac))
        return _nfc(v).strip(_WHITE_SPACE)
    if norm == "set" and isinstance(v, list | tuple):
        return sorted((_exact(e) for e in v), key=lambda e: canonical(e).encode("utf-8"))
    return _exact(v)


def intent_canonical(fields: Sequence[Mapping[str, str]], args: Mapping[str, Any]) -> str:
    """The intent of a call's arguments: the RFC 8785 text of an object
    holding each intent field's normalised value (None where args lacks
    it) and nothing else."""
    return canonical({f["name"]: normalize(f["norm"], args.get(f["name"])) for f in fields})


def call_intent(fields: Sequence[Mapping[str, str]], args: Any) -> str:
    """What names a call beyond its turn and tool, as occurrence compares
    it: "intent:" and its intent (intent_canonical) where the tool
    declares intent fields, so a reworded call is the same call; else its
    whole arguments (call_arguments)."""
    if fields and isinstance(args, Mapping):
        return "intent:" + intent_canonical(fields, args)
    return call_arguments(args)


def call_digest(call: str) -> str:
    """The digest a key takes of call_intent's text: derive_key("intent",
    its intent) or derive_key("args", its arguments)."""
    if call.startswith("intent:"):
        return derive_key("intent", call[len("intent:") :])
    return derive_key("args", call)
