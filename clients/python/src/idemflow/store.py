"""A durable intent store for callers with no framework: an intent's key is
made once, written before the first attempt, and found again by the
intent's own step ID after a restart."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import rfc8785

from .answers import Result
from .errors import IntentMismatchError

__all__ = ["SQLiteStore", "Store", "StoredIntent"]


@dataclass(frozen=True)
class StoredIntent:
    step_id: str
    key: str
    method: str
    path: str
    body: Any
    #: (status, raw answer) once the intent has a final answer.
    result: tuple[int, str] | None = None
    #: The intent was stored before this open (a resumed one).
    resumed: bool = False
    #: What changed, when this open replaced a request idemflow had
    #: refused (nothing recorded) with a corrected one under the same key.
    revised: str = ""


class Store(Protocol):
    def open(self, step_id: str, method: str, path: str, body: Any) -> StoredIntent:
        """The intent named step_id: the stored one, or a new one with a new
        key, stored before this returns."""

    def done(self, step_id: str, result: Result) -> None:
        """Records the intent's final answer."""

    def refused(self, step_id: str) -> None:
        """Records that idemflow refused the request as sent (nothing was
        recorded there), so the next open may carry a corrected one."""


def _canonical(body: Any) -> str:
    """body's RFC 8785 (JCS) form, as every idemflow client compares bodies
    (clients/testdata/bodies.json): members sorted, numbers written one way
    (2.0 and 2.5e3 are 2 and 2500). A value JCS cannot write (an integer
    past 2**53, which idemflow refuses anyway) keeps a sorted JSON form."""
    try:
        return rfc8785.dumps(body).decode()
    except rfc8785.CanonicalizationError:
        return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _stored_canonical(text: str) -> str:
    """A stored body in today's canonical form: a row written before the
    store used JCS (a sorted json.dumps) compares as its value does."""
    try:
        return _canonical(json.loads(text))
    except ValueError:
        return text


class SQLiteStore:
    """Intents in one SQLite file (created with its folder). Safe for the
    threads of one process; a second process may share the file (SQLite
    locks it)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        path = os.fspath(path)
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # the key is on disk before it is sent
        self._db.execute(
            """CREATE TABLE IF NOT EXISTS intent (
                 step_id TEXT PRIMARY KEY,
                 key TEXT NOT NULL,
                 method TEXT NOT NULL,
                 path TEXT NOT NULL,
                 body TEXT NOT NULL,
                 refused INTEGER NOT NULL DEFAULT 0,
                 result_status INTEGER,
                 result_raw TEXT)"""
        )

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, step_id: str, method: str, path: str, body: Any) -> StoredIntent:
        want = _canonical(body)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(
                    "SELECT key, method, path, body, refused, result_status, result_raw FROM intent WHERE step_id = ?", (step_id,)
                ).fetchone()
                if row is None:
                    key = str(uuid.uuid4())
                    self._db.execute("INSERT INTO intent (step_id, key, method, path, body) VALUES (?, ?, ?, ?, ?)", (step_id, key, method, path, want))
                    self._db.execute("COMMIT")
                    return StoredIntent(step_id, key, method, path, body)
                key, m, p, b, refused, status, raw = row
                revised = ""
                if (m, p, _stored_canonical(b)) != (method, path, want):
                    diff = f"stored {m} {p}, asked {method} {path}" if (m, p) != (method, path) else f"stored body {b}, asked body {want}"
                    if not refused or status is not None:
                        raise IntentMismatchError(
                            f"intent {step_id}: {diff}; its key may already be recorded with the stored request, so use a new step ID for a new intent"
                        )
                    self._db.execute("UPDATE intent SET method = ?, path = ?, body = ?, refused = 0 WHERE step_id = ?", (method, path, want, step_id))
                    revised = diff
                self._db.execute("COMMIT")
                result = (status, raw) if status is not None else None
                return StoredIntent(step_id, key, method, path, body, result, resumed=True, revised=revised)
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def done(self, step_id: str, result: Result) -> None:
        with self._lock:
            self._db.execute("UPDATE intent SET result_status = ?, result_raw = ?, refused = 0 WHERE step_id = ?", (result.status, result.raw, step_id))

    def refused(self, step_id: str) -> None:
        with self._lock:
            self._db.execute("UPDATE intent SET refused = 1 WHERE step_id = ?", (step_id,))
