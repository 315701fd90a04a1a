"""The clients, sync and asyncio: an intent is sent under one key until it
has a final answer, by the rules every idemflow client shares (the same key
on every attempt, Retry-After honoured, a 202 polled, timeouts, connection
errors, 409 request-in-progress, 429 and 5xx retried, no 4xx retried,
outcome-unknown final).

The rules are one generator (_exchange) that asks for HTTP requests and
pauses; Client and AsyncClient only carry them out, so the two cannot
differ.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from .answers import Fail, Poll, Result, Retry, Success, backoff_ceiling, judge, judge_operation, prefer_wait, retry_after
from .errors import DeadlineError, ProblemError, problem_error
from .store import Store

__all__ = ["AsyncClient", "AsyncTokenProvider", "Client", "Intent", "TokenProvider"]

#: Returns the bearer token for the next attempt (an OAuth access token,
#: renewed as it expires).
TokenProvider = Callable[[], str]
AsyncTokenProvider = Callable[[], Awaitable[str]]


@dataclass(frozen=True)
class Intent:
    """One intent: its key, fixed once, and the request it stands for."""

    key: str
    path: str
    body: Any = None
    method: str = "POST"
    #: The key was derived from the operation's intent fields (a
    #: framework's call, idemflow.keys.intent_canonical): the gateway
    #: compares the request on them alone (Idempotency-Fingerprint:
    #: intent), so a re-run whose model reworded free text gets the first
    #: answer, with Result.differed.
    by_intent: bool = False


@dataclass(frozen=True)
class _Send:
    method: str
    path: str
    key: str | None
    body: Any
    #: This attempt's bound (seconds): the attempt timeout, or what is
    #: left of the deadline when that is less.
    timeout: float
    #: Sent as Prefer: wait=N.
    wait: int
    by_intent: bool = False
    #: Sent as Idempotency-Origin: the call's own name, the same on each of
    #: its attempts, so that the call that ran the intent is told so
    #: (replayed False) on whichever attempt's answer reaches it.
    origin: str | None = None


@dataclass(frozen=True)
class _Sleep:
    seconds: float


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: httpx.Headers
    text: str


_Step = _Send | _Sleep
# What a step is answered with: an answer, a transport error, or None.
_Reply = _Answer | Exception | None


class _Again(Exception):
    def __init__(self, cause: object, wait: float = 0.0) -> None:
        super().__init__(str(cause))
        self.wait = wait


@dataclass
class _Options:
    base_url: str
    token: str | TokenProvider | AsyncTokenProvider = field(repr=False)
    attempt_timeout: float
    initial_backoff: float
    max_backoff: float
    wait_seconds: int
    on_attempt: Callable[[int, Intent], None] | None


def _past_deadline(intent: Intent) -> DeadlineError:
    return DeadlineError(f"intent {intent.key}: no final answer before the deadline")


def _send(o: _Options, intent: Intent, method: str, path: str, key: str | None, body: Any, end: float, origin: str | None = None) -> _Send:
    left = end - time.monotonic()
    if left <= 0:
        raise _past_deadline(intent)
    return _Send(method, path, key, body, min(o.attempt_timeout, left), prefer_wait(o.wait_seconds, left), intent.by_intent and key is not None, origin)


def _pause(o: _Options, wait: float, n: int, end: float) -> float | None:
    """The pause before attempt n+1: the server's Retry-After, else the
    backoff; None when it would end past the deadline, which a caller's
    deadline is a bound on."""
    pause = wait or random.random() * backoff_ceiling(o.initial_backoff, o.max_backoff, n)
    return pause if time.monotonic() + pause < end else None


def _exchange(o: _Options, intent: Intent, deadline: float) -> Generator[_Step, _Reply, Result]:
    if not intent.key:
        raise ValueError("idemflow: an intent needs its key")
    end = time.monotonic() + deadline
    origin = str(uuid.uuid4())  # this call's, on each of its attempts
    n = 0
    while True:
        n += 1
        if o.on_attempt:
            o.on_attempt(n, intent)
        wait = 0.0
        try:
            reply = yield _send(o, intent, intent.method, intent.path, intent.key, intent.body, end, origin)
            if isinstance(reply, Exception):
                # A timeout is not a failure: the first call may have succeeded.
                raise _Again(reply)
            assert isinstance(reply, _Answer)
            j = judge(reply.status, reply.headers, reply.text)
            if isinstance(j, Poll):
                return (yield from _poll(o, intent, reply.headers.get("Location") or "", end))
            if isinstance(j, Success):
                return j.result
            if isinstance(j, Retry):
                raise _Again(j.error, j.wait)
            raise j.error
        except _Again as e:
            wait = e.wait
        pause = _pause(o, wait, n, end)
        if pause is None:
            raise _past_deadline(intent)
        yield _Sleep(pause)


def _poll(o: _Options, intent: Intent, location: str, end: float) -> Generator[_Step, _Reply, Result]:
    n = 0
    while time.monotonic() < end:
        n += 1
        wait = 0.0
        reply = yield _send(o, intent, "GET", location, None, None, end)
        if isinstance(reply, _Answer):
            wait = retry_after(reply.headers.get("Retry-After"))
            if reply.status == 200:
                # Done: its answer, as a replay would give it, but not
                # marked replayed: the 202 said this request started the
                # run. One that ended without an answer is retried: the
                # intent is sent again with its key.
                j = judge_operation(reply.text)
                if isinstance(j, Success):
                    return replace(j.result, replayed=False)
                if isinstance(j, Retry):
                    raise _Again(j.error)
                if isinstance(j, Fail):
                    raise j.error
            elif reply.status < 500 and reply.status != 429:
                raise problem_error(reply.status, reply.text, False)
        pause = _pause(o, wait, n, end)
        if pause is None:
            break
        yield _Sleep(pause)
    raise _Again(DeadlineError("polling ended at the deadline"))


class _Base:
    def __init__(
        self,
        base_url: str,
        token: str | TokenProvider | AsyncTokenProvider,
        *,
        attempt_timeout: float = 10.0,
        initial_backoff: float = 0.2,
        max_backoff: float = 5.0,
        wait_seconds: int = 5,
        on_attempt: Callable[[int, Intent], None] | None = None,
    ) -> None:
        """base_url is idemflow's (e.g. http://127.0.0.1:8080), token the
        tenant's bearer token (never logged): idemflow's API token, or an
        OAuth access token. A token provider (a callable, or for
        AsyncClient a coroutine function) is asked before every attempt,
        so that a service agent's client-credentials token is renewed as it
        expires; it should cache the token while it is good. attempt_timeout bounds one
        attempt; the backoff is capped exponential with full jitter; Prefer:
        wait=N asks the server to hold a new intent's answer up to N s.
        A call's deadline bounds all of them: no attempt, pause or wait
        outlasts what is left of it."""
        self._o = _Options(base_url.rstrip("/"), token, attempt_timeout, initial_backoff, max_backoff, wait_seconds, on_attempt)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._o.base_url!r})"

    def _request(self, s: _Send, token: str) -> tuple[str, str, dict[str, str], bytes | None]:
        headers = {"Authorization": f"Bearer {token}", "Prefer": f"wait={s.wait}"}
        if s.key is not None:
            headers["Idempotency-Key"] = s.key
        if s.by_intent:
            headers["Idempotency-Fingerprint"] = "intent"
        if s.origin is not None:
            headers["Idempotency-Origin"] = s.origin
        content = None
        if s.body is not None:
            headers["Content-Type"] = "application/json"
            content = json.dumps(s.body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return s.method, self._o.base_url + s.path, headers, content


_TRANSPORT = (httpx.TransportError,)


class Client(_Base):
    """idemflow's client (sync). Use it as a context manager, or close it."""

    def __init__(self, base_url: str, token: str | TokenProvider, **kw: Any) -> None:
        super().__init__(base_url, token, **kw)
        self._http = httpx.Client(timeout=self._o.attempt_timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def do(self, intent: Intent, *, deadline: float = 300.0) -> Result:
        """Sends the intent until it has a final answer. Every attempt
        carries the intent's key, so however often it is sent, it takes
        effect once. Raises a ProblemError for a final refusal or rejection,
        DeadlineError when the deadline passes first."""
        gen = _exchange(self._o, intent, deadline)
        reply: _Reply = None
        while True:
            try:
                step = gen.send(reply)
            except StopIteration as done:
                result: Result = done.value
                return result
            if isinstance(step, _Sleep):
                time.sleep(step.seconds)
                reply = None
                continue
            try:
                token = self._o.token() if callable(self._o.token) else self._o.token
                if not isinstance(token, str):
                    raise TypeError("idemflow: Client's token provider must return a str; use AsyncClient for a coroutine")
                method, url, headers, content = self._request(step, token)
                r = self._http.request(method, url, headers=headers, content=content, timeout=step.timeout)
                reply = _Answer(r.status_code, r.headers, r.text)
            except _TRANSPORT as e:
                reply = e

    def run(self, store: Store, step_id: str, method: str, path: str, body: Any, *, deadline: float = 300.0) -> Result:
        """Runs the intent a store keeps under step_id: made (with its key)
        and stored before the first attempt, sent until it has a final
        answer, which is stored too. After a restart the same step_id
        resumes it, with the same key.

        Another request under a used step_id raises IntentMismatchError,
        except after idemflow refused the last one as sent (400, 413, 415:
        nothing recorded), when the same key carries the corrected one."""
        stored = store.open(step_id, method, path, body)
        if stored.result is not None:
            return Result.of(stored.result[0], stored.result[1], True)
        try:
            r = self.do(Intent(stored.key, path, body, method), deadline=deadline)
        except ProblemError as e:
            if e.revisable:
                store.refused(step_id)
            raise
        store.done(step_id, r)
        return r


class AsyncClient(_Base):
    """idemflow's client (asyncio). Use it as an async context manager, or
    aclose it. Cancelling a call stops its attempts; the intent may still
    take effect, so send it again with the same key."""

    def __init__(self, base_url: str, token: str | TokenProvider | AsyncTokenProvider, **kw: Any) -> None:
        super().__init__(base_url, token, **kw)
        self._http = httpx.AsyncClient(timeout=self._o.attempt_timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def do(self, intent: Intent, *, deadline: float = 300.0) -> Result:
        """As Client.do."""
        gen = _exchange(self._o, intent, deadline)
        reply: _Reply = None
        while True:
            try:
                step = gen.send(reply)
            except StopIteration as done:
                result: Result = done.value
                return result
            if isinstance(step, _Sleep):
                await asyncio.sleep(step.seconds)
                reply = None
                continue
            try:
                token = self._o.token() if callable(self._o.token) else self._o.token
                if inspect.isawaitable(token):
                    token = await token
                method, url, headers, content = self._request(step, str(token))
                r = await self._http.request(method, url, headers=headers, content=content, timeout=step.timeout)
                reply = _Answer(r.status_code, r.headers, r.text)
            except _TRANSPORT as e:
                reply = e

    async def run(self, store: Store, step_id: str, method: str, path: str, body: Any, *, deadline: float = 300.0) -> Result:
        """As Client.run. The store's file work is small and local, done in
        a thread so that the loop is not held."""
        stored = await asyncio.to_thread(store.open, step_id, method, path, body)
        if stored.result is not None:
            return Result.of(stored.result[0], stored.result[1], True)
        try:
            r = await self.do(Intent(stored.key, path, body, method), deadline=deadline)
        except ProblemError as e:
            if e.revisable:
                await asyncio.to_thread(store.refused, step_id)
            raise
        await asyncio.to_thread(store.done, step_id, r)
        return r
