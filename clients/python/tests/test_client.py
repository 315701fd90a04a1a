"""The client's rules against the real stack: replays, an answer lost on
the wire, typed errors never retried, Retry-After honoured, the store, a
downstream's own answers, and the token never logged."""

from __future__ import annotations

import asyncio
import http.server
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import idemflow
from idemflow import Intent
from idemflow._tooltext import refusal_text

from .conftest import DEADLINE_SLACK
from .modeltext import invitation
from .wire import Proxy


def ticket(title: str) -> dict[str, str]:
    return {"customer_id": "c-py", "title": title, "priority": "high"}


def test_a_replay_returns_the_first_answer_marked_replayed(client: idemflow.Client) -> None:
    key = str(uuid.uuid4())
    first = client.do(Intent(key, "/v1/tickets", ticket("once")))
    again = client.do(Intent(key, "/v1/tickets", ticket("once")))
    assert (first.status, first.replayed) == (201, False)
    assert again.replayed is True
    assert again.raw == first.raw


def test_the_async_client_keeps_the_same_rules(url: str, token: str) -> None:
    async def main() -> tuple[idemflow.Result, ...]:
        async with idemflow.AsyncClient(url, token, attempt_timeout=3) as c:
            key = str(uuid.uuid4())
            # Three at once, as parallel retries of one intent: one effect.
            return tuple(await asyncio.gather(*(c.do(Intent(key, "/v1/tickets", ticket("async"))) for _ in range(3))))

    answers = asyncio.run(main())
    assert len({a.body["ticket_id"] for a in answers}) == 1
    assert sorted(a.replayed for a in answers) == [False, True, True]


@pytest.fixture
def proxy(url: str) -> Iterator[Proxy]:
    p = Proxy(url, "answer-lost")
    yield p
    p.close()


def test_an_answer_lost_on_the_wire_is_retried_under_the_same_key_and_is_the_calls_own(proxy: Proxy, token: str) -> None:
    intent = Intent(str(uuid.uuid4()), "/v1/tickets", ticket("lost answer"))
    with idemflow.Client(proxy.url, token, attempt_timeout=3, initial_backoff=0.02, max_backoff=0.2) as c:
        r = c.do(intent)
        assert r.status == 201
        assert r.replayed is False, "the call that ran the intent got its own answer, on a later attempt"
        assert len(proxy.keys) >= 2 and len(set(proxy.keys)) == 1, proxy.keys
        again = c.do(intent)  # another call of the intent
    assert again.replayed is True and again.body == r.body


@pytest.mark.parametrize("deadline", [1.0, 3.0])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_deadline_is_a_bound_through_a_partition(url: str, token: str, deadline: float, flavour: str) -> None:
    # The client's defaults (an attempt of 10 s, Prefer: wait=5) are each
    # longer than the deadline, and every answer is held: the deadline
    # alone ends the call.
    p = Proxy(url, "answer-lost", hold=True)
    p.partitioned = True
    intent = Intent(str(uuid.uuid4()), "/v1/tickets", ticket(f"bound {deadline}"))

    async def run_async() -> None:
        async with idemflow.AsyncClient(p.url, token) as c:
            await c.do(intent, deadline=deadline)

    def run() -> None:
        if flavour == "async":
            asyncio.run(run_async())
            return
        with idemflow.Client(p.url, token) as c:
            c.do(intent, deadline=deadline)

    try:
        start = time.monotonic()
        with pytest.raises(idemflow.DeadlineError):
            run()
        took = time.monotonic() - start
    finally:
        p.close()
    assert took <= deadline + DEADLINE_SLACK, f"a deadline of {deadline} s ended the call after {took:.2f} s"
    waits = [int(v.removeprefix("wait=")) for v in p.prefers if v]
    assert waits and max(waits) <= deadline - 1, f"Prefer asked for {p.prefers} with {deadline} s left"


def test_final_answers_are_typed_errors_never_retried(url: str, token: str) -> None:
    attempts: list[int] = []
    with idemflow.Client(url, token, attempt_timeout=3, initial_backoff=0.02, on_attempt=lambda n, _: attempts.append(n)) as c:
        key = str(uuid.uuid4())
        c.do(Intent(key, "/v1/tickets", ticket("first")))
        attempts.clear()
        with pytest.raises(idemflow.KeyReusedError) as reused:
            c.do(Intent(key, "/v1/tickets", ticket("changed")))
        # What an integration hands the model of it invites no new call.
        text = refusal_text(reused.value, key)
        assert not invitation(text), f"{text!r} invites a new call at {invitation(text)!r}"
        with pytest.raises(idemflow.InvalidRequestError) as bad:
            c.do(Intent(str(uuid.uuid4()), "/v1/tickets", {"title": ""}))
        assert bad.value.revisable and not bad.value.settled
        assert "customer_id" in bad.value.problem["detail"], bad.value.problem
        with pytest.raises(idemflow.NotFoundError):
            c.do(Intent(str(uuid.uuid4()), "/v1/orders/ORD-NOPE/pay", {"payment_ref": "p"}))
        order = c.do(Intent(str(uuid.uuid4()), "/v1/orders", {"customer_id": "c-py", "items": [{"sku": "SKU-MOUSE", "quantity": 1}]}))
        c.do(Intent(str(uuid.uuid4()), f"/v1/orders/{order.body['order_no']}/cancel", {}))
        attempts.clear()
        with pytest.raises(idemflow.RejectedError) as rejected:
            c.do(Intent(str(uuid.uuid4()), f"/v1/orders/{order.body['order_no']}/pay", {"payment_ref": "p"}))
        assert rejected.value.code == "invalid-transition"
        assert attempts == [1], "a final answer is not sent again"
    with idemflow.Client(url, "not-a-token") as c, pytest.raises(idemflow.UnauthorizedError):
        c.do(Intent(str(uuid.uuid4()), "/v1/tickets", ticket("x")))


class _Scripted:
    """A server that answers from a script, recording when each request came."""

    def __init__(self, script: list[tuple[int, dict[str, str], str]]) -> None:
        self.seen: list[tuple[float, str | None]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.seen.append((time.monotonic(), self.headers.get("Idempotency-Key")))
                status, headers, body = script[min(len(outer.seen), len(script)) - 1]
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            do_GET = do_POST

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_retry_after_is_honoured_and_409_429_5xx_are_retried() -> None:
    problem = '{{"type":"/problems/{}","status":{}}}'
    s = _Scripted(
        [
            (409, {"Retry-After": "1"}, problem.format("request-in-progress", 409)),
            (429, {}, problem.format("slow-down", 429)),
            (503, {}, problem.format("service-unavailable", 503)),
            (201, {"Idempotent-Replayed": "false"}, '{"ticket_id":"t-1"}'),
        ]
    )
    try:
        with idemflow.Client(s.url, "t", initial_backoff=0.01, max_backoff=0.02) as c:
            r = c.do(Intent("k-1", "/v1/tickets", ticket("scripted")))
    finally:
        s.server.shutdown()
    assert r.body == {"ticket_id": "t-1"}
    assert [k for _, k in s.seen] == ["k-1"] * 4
    # The pause after the 409 is its Retry-After (1 s), not the backoff.
    assert s.seen[1][0] - s.seen[0][0] >= 0.95


def test_a_202s_polled_answer_is_the_requests_own_not_a_replay() -> None:
    """The 202 says this request started the run it then polls: the answer
    the operation holds is its first, as Go's Do reads it."""
    view = '{"operation_id":"o","status":"succeeded","result_status":201,"result_content_type":"application/json","result":{"ticket_id":"t-9"}}'
    s = _Scripted(
        [
            (202, {"Location": "/v1/operations/o", "Retry-After": "0"}, '{"operation_id":"o","status":"processing"}'),
            (200, {"Content-Type": "application/json"}, view),
        ]
    )
    try:
        with idemflow.Client(s.url, "t", initial_backoff=0.01) as c:
            r = c.do(Intent("k-3", "/v1/tickets", ticket("polled")))
    finally:
        s.server.shutdown()
    assert (r.status, r.body, r.replayed) == (201, {"ticket_id": "t-9"}, False)
    assert len(s.seen) == 2


def test_outcome_unknown_is_final() -> None:
    s = _Scripted([(502, {"Idempotent-Replayed": "false"}, '{"type":"/problems/outcome-unknown","status":502,"code":"outcome-unknown"}')])
    try:
        with idemflow.Client(s.url, "t", initial_backoff=0.01) as c, pytest.raises(idemflow.OutcomeUnknownError):
            c.do(Intent("k-2", "/v1/tools/refund", {}))
    finally:
        s.server.shutdown()
    assert len(s.seen) == 1


def test_the_store_keeps_an_intents_key_across_restarts(client: idemflow.Client, tmp_path: Any) -> None:
    db = tmp_path / "intents.db"
    with idemflow.SQLiteStore(db) as a, idemflow.SQLiteStore(db) as b:
        assert a.open("step-1", "POST", "/v1/tickets", ticket("stored")).key == b.open("step-1", "POST", "/v1/tickets", ticket("stored")).key
        with pytest.raises(idemflow.IntentMismatchError):
            b.open("step-1", "POST", "/v1/tickets", ticket("other"))
    with idemflow.SQLiteStore(db) as store:
        first = client.run(store, "step-1", "POST", "/v1/tickets", ticket("stored"))
    with idemflow.SQLiteStore(db) as store:  # a restarted agent
        resumed = client.run(store, "step-1", "POST", "/v1/tickets", ticket("stored"))
    assert resumed.raw == first.raw and resumed.replayed


def test_after_a_refusal_the_same_step_carries_a_corrected_body(client: idemflow.Client, tmp_path: Any) -> None:
    with idemflow.SQLiteStore(tmp_path / "intents.db") as store:
        with pytest.raises(idemflow.InvalidRequestError):
            client.run(store, "step-2", "POST", "/v1/tickets", {"customer_id": "c-py", "title": ""})
        key = store.open("step-2", "POST", "/v1/tickets", {"customer_id": "c-py", "title": ""}).key
        fixed = client.run(store, "step-2", "POST", "/v1/tickets", ticket("corrected"))
        assert fixed.status == 201 and fixed.body["idempotency_key"] == key
        with pytest.raises(idemflow.IntentMismatchError):
            store.open("step-2", "POST", "/v1/tickets", ticket("changed after it was recorded"))


def refund(cents: int) -> dict[str, Any]:
    return {"payment_id": "pay-py", "amount_cents": cents}


def test_a_downstreams_202_is_the_calls_answer_and_its_4xx_a_rejection(client: idemflow.Client) -> None:
    key = str(uuid.uuid4())
    first = client.do(Intent(key, "/v1/tools/refund_queued", refund(100)))
    again = client.do(Intent(key, "/v1/tools/refund_queued", refund(100)))
    assert (first.status, first.replayed, again.replayed) == (202, False, True)
    assert again.raw == first.raw
    with pytest.raises(idemflow.RejectedError) as e:
        client.do(Intent(str(uuid.uuid4()), "/v1/tools/refund_queued", refund(2_000_000)))
    assert not isinstance(e.value, idemflow.InvalidRequestError)
    assert e.value.code == idemflow.DOWNSTREAM_REJECTED and e.value.settled


def test_the_token_is_never_logged(url: str, token: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with idemflow.Client(url, token) as c:
        c.do(Intent(str(uuid.uuid4()), "/v1/tickets", ticket("logged")))
        with pytest.raises(idemflow.KeyReusedError) as e:
            key = str(uuid.uuid4())
            c.do(Intent(key, "/v1/tickets", ticket("a")))
            c.do(Intent(key, "/v1/tickets", ticket("b")))
        text = caplog.text + repr(c) + str(e.value) + repr(e.value)
    assert caplog.records, "nothing was logged at DEBUG: the check would be empty"
    assert token not in text


def test_the_python_snippet_runs_as_written(url: str, token: str, tmp_path: Path) -> None:
    """docs/agents.md's first Python snippet, as written, run twice from a
    folder laid out as the repository's root after scripts/run.sh (the
    demo token in .idemflow/demo-token): the ticket's step replays the
    second time, the order's new key is a new intent."""
    import subprocess
    import sys

    from .conftest import docs_block

    snippet = docs_block("# Python (`clients/python`)\n")
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert snippet in readme, "clients/python/README.md's program is no longer docs/agents.md's"
    (tmp_path / ".idemflow").mkdir()
    (tmp_path / ".idemflow" / "demo-token").write_text(token + "\n")
    (tmp_path / "snippet.py").write_text(snippet)
    env = {**os.environ, "IDEMFLOW_URL": url}
    runs = [subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    first, second = (r.stdout.split("\n") for r in runs)
    print(f"the snippet, run twice: {first[:2]} then {second[:2]}")
    assert first[0].startswith("201 False ") and second[0] == first[0].replace("201 False ", "201 True "), (first, second)
    assert first[1].startswith("201 False ") and second[1].startswith("201 False ") and first[1] != second[1], (first, second)
