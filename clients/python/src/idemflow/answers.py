"""How an answer is read, by the table every client shares
(clients/testdata/answers.json): the Go, TypeScript and Python tests all
read it, so that the clients cannot drift."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .errors import OUTCOME_UNKNOWN, ProblemError, parse_problem, problem_error

__all__ = ["HEADER_REPLAYED", "Fail", "Judgement", "Poll", "Result", "Retry", "Success", "backoff_ceiling", "judge", "judge_operation", "prefer_wait"]

#: On every answer that is the intent's own, stored one (whatever its
#: status), and on no answer of idemflow's about the request.
HEADER_REPLAYED = "Idempotent-Replayed"


@dataclass(frozen=True)
class Result:
    """A final successful answer."""

    status: int
    #: The answer's body, parsed when it is JSON, else its text.
    body: Any
    #: The answer as it came.
    raw: str
    #: True when the answer was stored by an earlier call with the same key.
    replayed: bool
    #: On a replay of an intent keyed by its intent fields (Intent.by_intent):
    #: what this request sent that differs from the first answer
    #: (Idempotency-Differed), which holds what was made.
    differed: tuple[str, ...] = ()

    @classmethod
    def of(cls, status: int, raw: str, replayed: bool, differed: tuple[str, ...] = ()) -> Result:
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw  # an HTTP tool's downstream may answer with any body
        return cls(status, body, raw, replayed, differed)


@dataclass(frozen=True)
class Success:
    result: Result
    action: Literal["success"] = "success"


@dataclass(frozen=True)
class Poll:
    action: Literal["poll"] = "poll"


@dataclass(frozen=True)
class Retry:
    error: ProblemError
    #: Retry-After's, in seconds; 0 leaves the pause to the client's backoff.
    wait: float
    action: Literal["retry"] = "retry"


@dataclass(frozen=True)
class Fail:
    error: ProblemError
    action: Literal["fail"] = "fail"


Judgement = Success | Poll | Retry | Fail


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for k, v in headers.items():
        if k.lower() == name.lower():
            return v
    return None


def retry_after(v: str | None) -> float:
    """Retry-After in seconds (its date form is not sent by idemflow)."""
    try:
        s = float(v) if v else 0.0
    except ValueError:
        return 0.0
    return s if s >= 0 and s != float("inf") else 0.0


#: On a replay of an intent keyed by its intent fields: what differed.
HEADER_DIFFERED = "Idempotency-Differed"


def judge(status: int, headers: Mapping[str, str], raw: str) -> Judgement:
    """Reads one answer to an intent.

    An answer with Idempotent-Replayed is the intent's own, whatever its
    status: any 2xx is its success (a downstream's 202 too), a 4xx the
    operation's rejection (a downstream's too, never idemflow's refusal of
    the request), a 5xx one that ended without an answer, sent again (but
    outcome-unknown, which is final). Without it, the answer is idemflow's
    about the request: 202 still running, 409 in progress, 429 and 5xx
    retried, a 4xx a refusal.
    """
    replayed = _header(headers, HEADER_REPLAYED)
    settled = bool(replayed)
    if status == 202 and not settled:
        return Poll()
    if status < 300:
        differed = tuple(d.strip() for d in (_header(headers, HEADER_DIFFERED) or "").split(",") if d.strip())
        return Success(Result.of(status, raw, replayed == "true", differed))
    typ = parse_problem(raw).get("type")
    if settled and typ == OUTCOME_UNKNOWN:
        return Fail(problem_error(status, raw, True))
    if (not settled and status == 409 and typ == "/problems/request-in-progress") or status == 429 or status >= 500:
        return Retry(problem_error(status, raw, settled), retry_after(_header(headers, "Retry-After")))
    return Fail(problem_error(status, raw, settled))


def _raw_member(text: str, name: str) -> str | None:
    """The text of the top-level member name of the JSON object text, as
    the server wrote it: the replay's bytes (a re-serialisation would
    change escapes such as \\u0026, numbers and spacing)."""
    decoder = json.JSONDecoder()
    ws = " \t\n\r"
    i = len(text) - len(text.lstrip(ws)) + 1  # past "{"
    while i < len(text):
        while text[i] in ws + ",":
            i += 1
        if text[i] == "}":
            return None
        key, i = decoder.raw_decode(text, i)
        while text[i] in ws + ":":
            i += 1
        _, end = decoder.raw_decode(text, i)
        if key == name:
            return text[i:end]
        i = end
    return None


def judge_operation(text: str) -> Judgement:
    """Reads a polled operation (GET /v1/operations/{id}): still running
    (poll), or its stored answer, judged as a replay of it would be, with the
    replay's bytes (result_base64 when the view has it, else result)."""
    op = json.loads(text)
    if op.get("status") == "processing":
        return Poll()
    if op.get("result_base64") is not None:
        raw = base64.b64decode(op["result_base64"]).decode("utf-8", errors="replace")
    else:
        raw = _raw_member(text, "result") or "{}"
    return judge(int(op.get("result_status") or 500), {HEADER_REPLAYED: "true"}, raw)


def backoff_ceiling(initial: float, maximum: float, n: int) -> float:
    """The longest pause before attempt n+1: capped exponential, from which
    full jitter draws (as in every client)."""
    return float(min(maximum, initial * 2.0 ** min(n - 1, 20)))


def prefer_wait(configured: int, left: float) -> int:
    """What Prefer: wait=N asks for with left seconds before the deadline:
    the configured wait, but never more than leaves a second after it to
    read the server's 202 and poll, so that the server's answer comes
    inside the deadline (the same rule in every client)."""
    if left >= configured + 1:
        return configured  # an infinite deadline too
    return max(0, math.floor(left) - 1)
