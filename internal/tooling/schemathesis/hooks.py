"""idemflow's own checks, run by Schemathesis beside its built-in ones
(SCHEMATHESIS_HOOKS=hooks; schemathesis_test.go sets it), and the one hook
that keeps schema-valid requests from colliding on a key.

Every check reads the exchange Schemathesis made, sends what it needs to
the same server, and, for "nothing recorded", looks into the database:

- idemflow_replay: a stored 2xx of a POST, sent again with the same key and
  body, is the same status and bytes, with Idempotent-Replayed: true.
- idemflow_changed_body: the same key with one field changed to another
  valid value is 422 /problems/idempotency-key-reused; under
  Idempotency-Fingerprint: intent, a field outside the intent fields the
  answer names (Idempotency-Intent-Fields) changed is a replay of the
  first answer instead, byte for byte.
- idemflow_nothing_recorded: idemflow's own 4xx refusal of a POST added no
  record and no row under the key (rows a deployment already held under
  it, from an earlier run, are counted before the request and allowed).
- idemflow_tenant_isolation: the same request under the other tenant's
  token is not a replay of the first tenant's answer.
- idemflow_every_field_named: a 400 invalid-request for a JSON object
  names every field the served contract's schema finds broken (a wrong
  type, a missing or unknown field, a bad value), not only the first.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
from collections.abc import Hashable
from typing import Any

import jsonschema_rs
import psycopg
import requests
import schemathesis
from schemathesis import Case
from schemathesis.core.transport import Response

URL = os.environ["IDEMFLOW_URL"].rstrip("/")
# Optional: without a second tenant's token the isolation check is off,
# without the database the nothing-recorded check (scripts/schemathesis.sh).
TOKEN_B = os.environ.get("IDEMFLOW_TOKEN_B", "")
DATABASE_URL = os.environ.get("DATABASE_URL", "")
RUN = os.environ.get("IDEMFLOW_RUN_ID", "run")
REPLAYED = "Idempotent-Replayed"
ORIGIN = "Idempotency-Origin"

# The query for the tables holding a row per (tenant, key): the records,
# the recall table, every built-in's effects and every declared
# operation's, whose table must hold UNIQUE (tenant_id, idem_key). They
# are found in the deployment's own schema, never named here: a
# deployment has the operations it declared, not the example's.
KEYED_TABLES_SQL = """
SELECT format('%I.%I', c.table_schema, c.table_name)
FROM information_schema.columns c
JOIN information_schema.tables t USING (table_schema, table_name)
WHERE c.column_name = 'idem_key' AND t.table_type = 'BASE TABLE' AND c.table_schema = ANY (current_schemas(false))
ORDER BY 1
"""
_keyed_tables: list[str] | None = None


def keyed_tables(conn: psycopg.Connection) -> list[str]:
    """The deployment's tables with an idem_key column, read once a run."""
    global _keyed_tables
    with _lock:
        if _keyed_tables is None:
            _keyed_tables = [row[0] for row in conn.execute(KEYED_TABLES_SQL).fetchall()]
        return _keyed_tables


def rows_under(conn: psycopg.Connection, key: str) -> dict[str, int]:
    """How many rows each keyed table holds under key, where any does."""
    found = {t: conn.execute(f"SELECT count(*) FROM {t} WHERE idem_key = %s", (key,)).fetchone()[0] for t in keyed_tables(conn)}
    return {t: n for t, n in found.items() if n}


_lock = threading.Lock()
_counter = itertools.count()
# Keys a request of this run may have recorded something under: a refusal
# under one of them proves nothing about what it left.
_recorded_keys: set[str] = set()
# The rows each key held just before a POST under it was sent.
_rows_before: dict[str, dict[str, int]] = {}
# How often each of idemflow's checks judged an exchange (passed or
# failed it, not skipped it).
_judged: dict[str, int] = {}


def judged(name: str) -> None:
    with _lock:
        _judged[name] = _judged.get(name, 0) + 1


def header(response: Response, name: str) -> str | None:
    for k, v in response.headers.items():
        if k.lower() == name.lower():
            return v[0] if isinstance(v, list) else v
    return None


def request_key(response: Response) -> str | None:
    req = response.request
    if req.method != "POST":
        return None
    return req.headers.get("Idempotency-Key")


def unquote(key: str) -> str:
    """The key an RFC 8941 quoted form stands for (idem.ParseKey's rule)."""
    key = key.strip()
    if len(key) >= 2 and key[0] == '"' and key[-1] == '"':
        return key[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return key


def valid_key(key: str) -> bool:
    k = unquote(key)
    return 1 <= len(k) <= 255 and all(0x21 <= ord(c) <= 0x7E and c != "," for c in k)


def resend(response: Response, **changes: Any) -> requests.Response:
    """The request of response, sent again as another call: without its
    Idempotency-Origin, unless changes set one (headers={ORIGIN: ...})."""
    req = response.request
    headers = {k: v for k, v in req.headers.items() if k.lower() not in ("content-length", ORIGIN.lower())}
    for k, v in changes.pop("headers", {}).items():
        # None drops a header the request had, in any case.
        headers = {h: w for h, w in headers.items() if h.lower() != k.lower()}
        if v is not None:
            headers[k] = v
    body = changes.pop("body", req.body)
    return requests.request(req.method or "POST", req.url or "", headers=headers, data=body, timeout=60)


def intent_fields(response: Response) -> set[str] | frozenset[str]:
    """The fields a request is compared on under its key: its intent fields
    where it was sent with Idempotency-Fingerprint: intent and the answer
    names them (Idempotency-Intent-Fields), else every field."""
    if (header(response, "Idempotency-Fingerprint") or "").strip().lower() != "intent":
        return _EVERY_FIELD
    named = {f.strip() for f in (header(response, "Idempotency-Intent-Fields") or "").split(",") if f.strip()}
    return named or _EVERY_FIELD


class _Every(frozenset[str]):
    """Every field: a set that holds any name."""

    def __contains__(self, _: object) -> bool:
        return True


_EVERY_FIELD = _Every()


def stored_success(response: Response) -> bool:
    return request_key(response) is not None and header(response, REPLAYED) is not None and 200 <= response.status_code < 300


def unique_by(body: dict[str, Any], operation: Any) -> None:
    """Drops the items of a body's arrays that repeat the member their
    schema names in x-unique-by (an order's lines, one per SKU): a rule
    across items that JSON Schema cannot state (uniqueItems says no two
    items are equal, not that no two name one SKU). The declaration says
    it in the contract, and the server refuses a repeat with a 400."""
    try:
        props = operation["requestBody"]["content"]["application/json"]["schema"]["properties"]
    except (KeyError, TypeError):
        return
    for name, schema in props.items():
        member = schema.get("x-unique-by") if isinstance(schema, dict) else None
        if member is None or not isinstance(body.get(name), list):
            continue
        seen: set[Any] = set()
        kept = []
        for item in body[name]:
            value = item.get(member) if isinstance(item, dict) else None
            if value is None or not isinstance(value, Hashable) or value not in seen:
                kept.append(item)
                if isinstance(value, Hashable):
                    seen.add(value)
        body[name] = kept


@schemathesis.hook
def before_call(ctx: Any, case: Case, kwargs: dict[str, Any]) -> None:
    """Makes a schema-valid request's key its own (own_key), then counts
    the rows a POST's key already holds, so that idemflow_nothing_recorded
    judges what the request added, not what the deployment had."""
    own_key(case)
    key = next((str(v) for n, v in (case.headers or {}).items() if n.lower() == "idempotency-key"), None)
    if not DATABASE_URL or case.method.upper() != "POST" or key is None or not valid_key(key):
        return
    k = unquote(key)
    with psycopg.connect(DATABASE_URL) as conn:
        before = rows_under(conn, k)
    with _lock:
        _rows_before[k] = before


def own_key(case: Case) -> None:
    """A schema-valid request gets a key of its own (the generated one with
    a suffix, in its own form): Hypothesis draws the same few keys again
    and again, and a key reused with another body is refused by design,
    which would hide the operation from every other check. Negative cases
    keep their keys as drawn."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return
    body = case.body
    if isinstance(body, dict):
        unique_by(body, case.operation.definition.raw)
    if not case.headers:
        return
    for name in list(case.headers):
        if name.lower() != "idempotency-key":
            continue
        key = str(case.headers[name])
        suffix = f"-{RUN}-{next(_counter)}"
        if key.startswith('"') and key.endswith('"') and len(key) >= 2:
            inner = key[1:-1][: 255 - len(suffix) - 2]
            inner = inner[:-1] if inner.endswith("\\") and not inner.endswith("\\\\") else inner
            case.headers[name] = f'"{inner}{suffix}"'
        else:
            case.headers[name] = key[: 255 - len(suffix)] + suffix


@schemathesis.hook
def after_call(ctx: Any, case: Case, response: Response) -> None:
    key = request_key(response)
    if key is None:
        return
    # Anything but idemflow's refusal before a record may have recorded
    # something under the key.
    if response.status_code not in (400, 401, 404, 405, 413, 415) or header(response, REPLAYED) is not None:
        with _lock:
            _recorded_keys.add(unquote(key))


@schemathesis.check
def idemflow_replay(ctx: Any, response: Response, case: Case) -> bool | None:
    """A stored 2xx, sent again with the same key and body, is the same
    status and bytes, marked Idempotent-Replayed: true."""
    if not stored_success(response):
        return None
    judged("idemflow_replay")
    again = resend(response)  # another call
    assert again.status_code == response.status_code, f"the replay is {again.status_code}, the first answer {response.status_code}"
    assert again.content == response.content, f"the replay's body differs from the first answer's:\n{again.content!r}\n{response.content!r}"
    assert again.headers.get(REPLAYED) == "true", f"the replay says {REPLAYED}: {again.headers.get(REPLAYED)}"
    origin = response.request.headers.get(ORIGIN)
    if origin is not None and response.headers.get(REPLAYED) == "false":
        # The same call asking again (its origin): its own answer.
        own = resend(response, headers={ORIGIN: origin})
        assert own.content == response.content and own.headers.get(REPLAYED) == "false", (
            f"the call that ran the intent, asking again under {ORIGIN}: {origin}, got {own.status_code} {REPLAYED}: {own.headers.get(REPLAYED)}"
        )
    return True


def _change(value: Any, schema: dict[str, Any]) -> Any:
    """Another valid value for a field, or None when this one cannot be
    changed safely (an enum, a format, a string its pattern refuses)."""
    if any(k in schema for k in ("enum", "const", "format")):
        return None
    if isinstance(value, str) and "pattern" in schema:
        changed = _change(value, {k: v for k, v in schema.items() if k != "pattern"})
        # The document's patterns are ECMA-262; Python's re reads the
        # simple ones the same, and one it cannot read changes nothing.
        try:
            return changed if changed is not None and re.search(schema["pattern"], changed) else None
        except re.error:
            return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        for v in (value + 1, value - 1):
            if (lo is None or v >= lo) and (hi is None or v <= hi):
                return v
        return None
    if isinstance(value, str):
        hi = schema.get("maxLength")
        if value and value[-1] != "x":
            return value[:-1] + "x"
        if hi is None or len(value) < hi:
            return value + "y" if value.endswith("x") else value + "x"
        return None
    return None


_document: dict[str, Any] = {}


def _deref(node: Any) -> Any:
    """node with its local $ref followed (the served document's own)."""
    seen = 0
    while isinstance(node, dict) and "$ref" in node and seen < 16:
        target: Any = _document
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node, seen = target, seen + 1
    return node


def _request_schema(case: Case) -> Any:
    """The request body's schema node in the served document (the document
    fetched once a run), as written there, or None."""
    with _lock:
        if not _document:
            _document.update(requests.get(URL + "/openapi.json", timeout=30).json())
    op = _deref(_document["paths"].get(case.path, {}).get(case.method.lower(), {}))
    return ((op.get("requestBody") or {}).get("content") or {}).get("application/json", {}).get("schema")


def _field_schemas(case: Case) -> dict[str, Any]:
    """The request body's properties, by name, from the served document."""
    schema = _deref(_request_schema(case) or {})
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    return {name: _deref(p) for name, p in props.items()} if isinstance(props, dict) else {}


def _resolved(node: Any, depth: int = 0) -> Any:
    """node with every local $ref replaced by what it names, so that a
    validator needs no document around it. The contract's schemas do not
    refer to themselves; the depth bound only keeps a mistake finite."""
    node = _deref(node)
    if depth > 64:
        return node
    if isinstance(node, dict):
        return {k: _resolved(v, depth + 1) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolved(v, depth + 1) for v in node]
    return node


# Each operation's resolved body schema and its validator, made once a run.
_body_schemas: dict[tuple[str, str], tuple[dict[str, Any], Any] | None] = {}


def _body_schema(case: Case) -> tuple[dict[str, Any], Any] | None:
    """The served contract's schema of the request body, resolved, with a
    validator of it (formats left out: OpenAPI 3.1 makes them annotations,
    which a server need not enforce)."""
    at = (case.path, case.method.lower())
    with _lock:
        if at in _body_schemas:
            return _body_schemas[at]
    schema = _request_schema(case)
    made = None
    if isinstance(schema, dict):
        resolved = _resolved(schema)
        made = (resolved, jsonschema_rs.validator_for(resolved, validate_formats=False))
    with _lock:
        _body_schemas[at] = made
    return made


def _names(member: str, field: str) -> bool:
    """Whether a field error's name (items[0].sku, or "" for a member
    named "") names the top-level member or something inside it. A member
    whose name holds "." or "[" is written as it is, so it is matched
    whole, never split."""
    written = '""' if member == "" else member
    return field == written or field.startswith(written + ".") or field.startswith(written + "[")


def broken_fields(validator: Any, body: dict[str, Any]) -> set[str]:
    """The body's top-level members the validator finds broken: the first
    member of each error's path, the member a required rule misses, the
    members an additionalProperties rule refuses."""
    found: set[str] = set()
    for err in validator.iter_errors(body):
        path = list(err.instance_path)
        kind = err.kind
        if path:
            found.add(str(path[0]))
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
            found.add(str(kind.property))
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.AdditionalProperties):
            found.update(str(u) for u in kind.unexpected)
    return found


def named_fields(problem: Any) -> list[str]:
    """The fields a problem's errors name, as written."""
    errors = problem.get("errors") or [] if isinstance(problem, dict) else []
    return [str(e.get("field", "")) for e in errors if isinstance(e, dict)]


def unnamed(broken: set[str], named: list[str]) -> list[str]:
    """The broken members no field error names."""
    return sorted(m for m in broken if not any(_names(m, f) for f in named))


@schemathesis.check
def idemflow_every_field_named(ctx: Any, response: Response, case: Case) -> bool | None:
    """A 400 invalid-request for a JSON object body names, in its errors,
    every top-level field the contract's schema finds broken: one answer
    tells the caller everything to mend (docs/http-contract.md)."""
    if response.status_code != 400 or response.request.method != "POST" or not response.request.body:
        return None
    if not (header(response, "Content-Type") or "").startswith("application/problem+json"):
        return None
    problem = json.loads(response.content)
    if problem.get("type") != "/problems/invalid-request":
        return None
    try:
        body = json.loads(response.request.body)
    except ValueError:
        return None
    made = _body_schema(case)
    if not isinstance(body, dict) or made is None:
        return None
    schema, validator = made
    broken = broken_fields(validator, body)
    if not broken:
        return None  # refused by a rule the schema cannot state (x-unique-by)
    judged("idemflow_every_field_named")
    named = named_fields(problem)
    missing = unnamed(broken, named)
    assert not missing, f"the 400 names {sorted(named)}, but the contract's schema also finds {missing} broken: {response.text[:400]}"
    # Generated refusals mostly break one rule: one more fault, a member
    # the schema does not allow, makes it a body with several, and the
    # answer must name them all.
    if schema.get("additionalProperties") is False:
        extra = f"idemflow_unknown_{next(_counter)}"
        worse = {**body, extra: 1}
        again = resend(response, body=json.dumps(worse).encode())
        assert again.status_code == 400, f"the body with {extra} added as well was answered {again.status_code}: {again.text[:300]}"
        named = named_fields(again.json())
        missing = unnamed(broken_fields(validator, worse), named)
        assert not missing, f"with {extra} added, the 400 names {sorted(named)}, not {missing}: {again.text[:400]}"
    return True


@schemathesis.check
def idemflow_changed_body(ctx: Any, response: Response, case: Case) -> bool | None:
    """The same key with one field changed to another valid value is
    refused: 422 /problems/idempotency-key-reused, nothing executed."""
    if not stored_success(response) or not response.request.body:
        return None
    try:
        body = json.loads(response.request.body)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    schemas = _field_schemas(case)
    for field, value in body.items():
        changed = _change(
            value,
            schemas.get(field, {}) if isinstance(schemas.get(field), dict) else {},
        )
        if changed is None:
            continue
        judged("idemflow_changed_body")
        again = resend(response, body=json.dumps({**body, field: changed}).encode())
        if field not in intent_fields(response):
            # Free text under a key taken by intent fields: the first answer.
            assert again.status_code == response.status_code and again.headers.get(REPLAYED) == "true" and again.content == response.content, (
                f"the intent-keyed key with {field} (no intent field) changed from {value!r} to {changed!r} was answered"
                f" {again.status_code} {again.headers.get(REPLAYED)}: {again.text[:300]}"
            )
            return True
        problem = again.json() if again.headers.get("Content-Type", "").startswith("application/problem+json") else {}
        assert again.status_code == 422 and problem.get("type") == "/problems/idempotency-key-reused", (
            f"the key with {field} changed from {value!r} to {changed!r} was answered {again.status_code}: {again.text[:300]}"
        )
        return True
    return None


@schemathesis.check
def idemflow_nothing_recorded(ctx: Any, response: Response, case: Case) -> bool | None:
    """idemflow's own refusal of a POST (400, 401, 404, 405, 413, 415,
    without Idempotent-Replayed) left no record and no row under the key."""
    key = request_key(response)
    if not DATABASE_URL or key is None or response.status_code not in (400, 401, 404, 405, 413, 415) or header(response, REPLAYED) is not None:
        return None
    if not valid_key(key):
        return None  # nothing can be stored under it
    k = unquote(key)
    with _lock:
        if k in _recorded_keys:
            return None  # an earlier request recorded it: this refusal proves nothing
    judged("idemflow_nothing_recorded")
    with _lock:
        before = _rows_before.get(k, {})
    with psycopg.connect(DATABASE_URL) as conn:
        after = rows_under(conn, k)
    added = {t: n - before.get(t, 0) for t, n in after.items() if n > before.get(t, 0)}
    assert not added, f"a {response.status_code} refusal added rows under key {k!r}: {added} (before it: {before})"
    return True


@schemathesis.check
def idemflow_tenant_isolation(ctx: Any, response: Response, case: Case) -> bool | None:
    """The same request under the other tenant's token is that tenant's
    own intent, never a replay of this one's answer."""
    if not TOKEN_B or not stored_success(response):
        return None
    judged("idemflow_tenant_isolation")
    other = resend(response, headers={"Authorization": f"Bearer {TOKEN_B}"})
    # A key this run made (before_call's suffix) is new to the other
    # tenant, so its answer cannot be a replay. A key drawn as it is may
    # have been the other tenant's own in an earlier run against the same
    # deployment: its replay is its own answer, never this one's bytes.
    if f"-{RUN}-" in (request_key(response) or ""):
        assert other.headers.get(REPLAYED) != "true", f"the other tenant got a replay under a key new to it: {other.status_code} {other.text[:300]}"
    if 200 <= other.status_code < 300:
        assert other.content != response.content, "the other tenant got this tenant's answer, byte for byte"
    return True


@schemathesis.check
class IdemflowChecksRan:
    """Fails the run when one of idemflow's checks never judged an
    exchange: a check that never runs cannot fail, and proves nothing."""

    def after_run(self, ctx: Any) -> None:
        names = ["idemflow_replay", "idemflow_changed_body", "idemflow_every_field_named"]
        names += ["idemflow_nothing_recorded"] if DATABASE_URL else []
        names += ["idemflow_tenant_isolation"] if TOKEN_B else []
        off = {
            "idemflow_nothing_recorded": DATABASE_URL,
            "idemflow_tenant_isolation": TOKEN_B,
        }
        print(
            "idemflow's checks off (no --database-url or --token-b): " + (", ".join(n for n, v in off.items() if not v) or "none"),
            flush=True,
        )
        with _lock:
            counts = {n: _judged.get(n, 0) for n in names}
        print(
            "idemflow's checks judged: " + ", ".join(f"{n} {c}" for n, c in counts.items()),
            flush=True,
        )
        missing = [n for n, c in counts.items() if c == 0]
        assert not missing, f"idemflow's checks never judged an exchange: {missing}"
