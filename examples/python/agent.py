#!/usr/bin/env python3
"""An idemflow agent in plain Python (standard library only).

The one thing an agent must get right is the key: make it ONCE per intent,
store it before the first call, and send the SAME key on every retry, also
after the agent itself is killed and restarted. This agent keeps its intents
in a small SQLite file for that, and retries the way idemflow's Go client
does: same key; honour Retry-After; poll a 202; retry timeouts, connection
errors, 409 request-in-progress, 429 and 5xx; never retry 400, 401, 404,
413 or 422, which are answers.

    python3 agent.py --url http://127.0.0.1:8080 --token "$TOKEN" \\
        ticket --id step-1 --customer c-1 --title "Printer on fire"

Run it again with the same --id (after a crash, say): it resumes the same
intent with the same key, and prints the first answer. The intents are kept
in .idemflow/intents.db under the working directory (--db to choose).

After a 400 (or 413, 415) nothing was recorded, so running it again with the
same --id and corrected arguments sends them under the same key. Any other
change under a used --id is refused: use a new --id for a new intent.
"""

import argparse
import json
import os
import random
import sqlite3
import sys
import time
import urllib.error
import urllib.request
import uuid

NO_RETRY = {400, 401, 404, 413, 422}


class Rejected(Exception):
    """A final answer that is not a success: retrying cannot change it."""

    def __init__(self, status, problem):
        super().__init__(f"HTTP {status}: {problem.get('type')}: {problem.get('detail')}")
        self.status, self.problem = status, problem


class IntentMismatch(Exception):
    """Another request is stored under this intent ID, and the server may
    have recorded it: its key cannot carry the new one."""


def refused_unrecorded(status, answer):
    """An answer given before the server recorded anything: a 400 for the
    body (not a stored unstorable-input), a 413 or a 415."""
    if status in (413, 415):
        return True
    if status == 400:
        try:
            return json.loads(answer or "{}").get("type") != "/problems/unstorable-input"
        except ValueError:
            return True
    return False


class IntentStore:
    """Intents by the agent's own ID, in SQLite. An intent is committed
    before its first call: the key is only safe to send once it cannot be
    lost."""

    def __init__(self, path):
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("""CREATE TABLE IF NOT EXISTS intent (
            id TEXT PRIMARY KEY, key TEXT NOT NULL, method TEXT NOT NULL, path TEXT NOT NULL,
            body TEXT NOT NULL, status INTEGER, answer TEXT)""")
        self.db.commit()

    def open(self, intent_id, kind, method, path, body):
        """Return the stored intent, or make a new one with a new key."""
        canon = json.dumps(body, sort_keys=True, separators=(",", ":"))
        row = self.db.execute("SELECT key, method, path, body, status, answer FROM intent WHERE id = ?",
                              (intent_id,)).fetchone()
        if row:
            if (row[1], row[2], row[3]) == (method, path, canon):
                return {"id": intent_id, "key": row[0], "method": method, "path": path, "body": canon,
                        "status": row[4], "answer": row[5], "resumed": True}
            if (row[1], row[2]) != (method, path):
                diff = f"stored {row[1]} {row[2]}, asked {method} {path}"
            else:
                diff = f"stored body {row[3]}, asked body {canon}"
            if not refused_unrecorded(row[4], row[5]):
                raise IntentMismatch(f"intent {intent_id}: {diff}; its key may already be recorded with the "
                                     "stored request, so use a new --id for a new intent")
            # Refused before anything was recorded: the same key may carry
            # the corrected request.
            with self.db:
                self.db.execute("UPDATE intent SET method = ?, path = ?, body = ?, status = NULL, answer = NULL WHERE id = ?",
                                (method, path, canon, intent_id))
            return {"id": intent_id, "key": row[0], "method": method, "path": path, "body": canon,
                    "status": None, "answer": None, "resumed": True, "revised": diff}
        key = f"{kind}:{uuid.uuid4()}"
        with self.db:
            self.db.execute("INSERT INTO intent (id, key, method, path, body) VALUES (?, ?, ?, ?, ?)",
                            (intent_id, key, method, path, canon))
        return {"id": intent_id, "key": key, "method": method, "path": path, "body": canon,
                "status": None, "answer": None, "resumed": False}

    def done(self, intent, status, answer):
        with self.db:
            self.db.execute("UPDATE intent SET status = ?, answer = ? WHERE id = ?", (status, answer, intent["id"]))


class Agent:
    def __init__(self, url, token, store, attempt_timeout=10.0, max_backoff=5.0, log=print):
        self.url, self.token, self.store = url.rstrip("/"), token, store
        self.attempt_timeout, self.max_backoff, self.log = attempt_timeout, max_backoff, log

    def _send(self, method, path, key=None, body=None):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=body.encode() if body is not None else None)
        req.add_header("Authorization", "Bearer " + self.token)
        if key:
            req.add_header("Idempotency-Key", key)
        if body is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.attempt_timeout) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def _pause(self, n, headers):
        retry_after = (headers or {}).get("Retry-After")
        if retry_after and retry_after.isdigit():
            return int(retry_after)
        return random.uniform(0, min(self.max_backoff, 0.2 * 2 ** n))  # full jitter

    def do(self, intent, deadline=300.0):
        """Send the intent until it has a final answer. Every attempt
        carries the intent's key."""
        if intent["status"] is not None:
            if intent["status"] >= 400:
                raise Rejected(intent["status"], json.loads(intent["answer"] or "{}"))
            return intent["status"], json.loads(intent["answer"])
        end = time.monotonic() + deadline
        for n in range(1, 10_000):
            self.log(f"attempt {n} key={intent['key']}", flush=True)
            headers = None
            try:
                status, headers, raw = self._send(intent["method"], intent["path"], intent["key"], intent["body"])
                if status == 202:
                    status, raw = self._poll(headers.get("Location"), end)
                if status < 300:
                    self.store.done(intent, status, raw.decode())
                    return status, json.loads(raw)
                if status in NO_RETRY:
                    self.store.done(intent, status, raw.decode())
                    raise Rejected(status, json.loads(raw or b"{}"))
                self.log(f"attempt {n}: HTTP {status}, retrying with the same key", flush=True)
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                # A timeout is not a failure: the first call may have
                # succeeded and only its answer was lost.
                self.log(f"attempt {n}: {e}, retrying with the same key", flush=True)
            if time.monotonic() > end:
                raise TimeoutError(f"intent {intent['id']}: no final answer before the deadline")
            time.sleep(self._pause(n, headers))
        raise TimeoutError(f"intent {intent['id']}: too many attempts")

    def _poll(self, location, end):
        n = 0
        while time.monotonic() < end:
            n += 1
            status, headers, raw = self._send("GET", location)
            if status == 200:
                op = json.loads(raw)
                if op["status"] != "processing":
                    result_status = op.get("result_status", 500)
                    if result_status >= 500:
                        return result_status, json.dumps(op.get("result", {})).encode()  # retried by do
                    return result_status, json.dumps(op.get("result")).encode()
            time.sleep(self._pause(n, headers))
        return 504, b"{}"


def main(argv=None):
    p = argparse.ArgumentParser(description="An idemflow agent that cannot lose its key.")
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--db", default=os.path.join(".idemflow", "intents.db"),
                   help="the SQLite file that keeps the intents (default: .idemflow/intents.db)")
    p.add_argument("--attempt-timeout", type=float, default=10.0)
    sub = p.add_subparsers(dest="kind", required=True)
    t = sub.add_parser("ticket", help="create a support ticket")
    t.add_argument("--id", required=True, help="this intent's own name: the same id resumes it")
    t.add_argument("--customer", required=True)
    t.add_argument("--title", required=True)
    t.add_argument("--priority", default="normal")
    args = p.parse_args(argv)

    if os.path.dirname(args.db):
        os.makedirs(os.path.dirname(args.db), exist_ok=True)
    store = IntentStore(args.db)
    body = {"customer_id": args.customer, "title": args.title, "priority": args.priority}
    try:
        intent = store.open(args.id, "ticket:create", "POST", "/v1/tickets", body)
    except IntentMismatch as e:
        print(f"refused: {e}", flush=True)
        return 2
    if intent.get("revised"):
        print(f"revising intent {intent['id']} key={intent['key']}: its last answer recorded nothing "
              f"({intent['revised']})", flush=True)
    else:
        print(f"{'resuming' if intent['resumed'] else 'new'} intent {intent['id']} key={intent['key']}", flush=True)
    agent = Agent(args.url, args.token, store, attempt_timeout=args.attempt_timeout)
    try:
        status, answer = agent.do(intent)
    except Rejected as e:
        print(f"rejected: {e}", flush=True)
        return 2
    print(f"done {status} {json.dumps(answer, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
