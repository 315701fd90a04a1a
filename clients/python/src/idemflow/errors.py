"""The typed errors of idemflow's answers: each is a final answer that
retrying cannot change, or the client's own end of trying."""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "DOWNSTREAM_REJECTED",
    "DeadlineError",
    "IdemflowError",
    "IntentMismatchError",
    "InvalidRequestError",
    "KeyReusedError",
    "NoDurableIdentityError",
    "NotFoundError",
    "OutcomeUnknownError",
    "ProblemError",
    "RejectedError",
    "TooLargeError",
    "UnauthorizedError",
]

#: RejectedError.code of an HTTP tool's call that its downstream rejected.
DOWNSTREAM_REJECTED = "downstream-rejected"
OUTCOME_UNKNOWN = "/problems/outcome-unknown"


class IdemflowError(Exception):
    """The root of every error this package raises."""


class ProblemError(IdemflowError):
    """A final answer that is not a success (an RFC 9457 problem, or a
    downstream's body as it came).

    ``settled`` says the answer is the intent's own, stored under its key
    (it carried ``Idempotent-Replayed``): the operation's or its
    downstream's rejection, not idemflow's refusal of the request. The key
    is spent on this request; other parameters need a new key.
    """

    def __init__(self, status: int, problem: dict[str, Any], body: str, settled: bool = False) -> None:
        self.status = status
        self.problem = problem
        #: The answer as it came (a downstream may answer with any body).
        self.body = body
        self.settled = settled
        if problem.get("detail"):
            msg = f"{status} {problem.get('type')}: {problem['detail']}"
        else:
            msg = f"HTTP {status}"
        super().__init__(msg)

    @property
    def type(self) -> str | None:
        t = self.problem.get("type")
        return t if isinstance(t, str) else None

    @property
    def revisable(self) -> bool:
        """Nothing was recorded (idemflow refused the request as sent: 400,
        413, 415), so the same key may carry a corrected body."""
        return isinstance(self, InvalidRequestError) and not self.settled

    def to_dict(self) -> dict[str, Any]:
        """What a model reads of it: the status, the error's name, the
        problem and the body as it came."""
        return {
            "http_status": self.status,
            "error": type(self).__name__,
            "settled": self.settled,
            "problem": self.problem,
            "body": self.body,
        }


class KeyReusedError(ProblemError):
    """The key was used before with other parameters (422): nothing was done."""


class RejectedError(ProblemError):
    """The operation said no, and its answer is stored under the key: a
    business rule (out of stock, an invalid transition), or an HTTP tool's
    downstream with a 4xx of its own (code ``downstream-rejected``)."""

    @property
    def code(self) -> str:
        p = self.problem
        code, typ = p.get("code"), p.get("type") or ""
        if not self.settled:
            return code if isinstance(code, str) and code else str(typ).removeprefix("/problems/")
        if isinstance(code, str) and code and typ == f"/problems/{code}":
            return code
        return DOWNSTREAM_REJECTED


class InvalidRequestError(ProblemError):
    """idemflow refused the request as sent (400, 415): nothing was
    recorded, so the same key may carry a corrected body."""


class TooLargeError(InvalidRequestError):
    """The body was over the server's limit (413): nothing was recorded."""


class UnauthorizedError(ProblemError):
    """The token is missing, unknown or revoked (401)."""


class NotFoundError(ProblemError):
    """No such resource for this tenant (404)."""


class OutcomeUnknownError(ProblemError):
    """An at_most_once HTTP tool's call got no answer that says whether it
    took effect (502, /problems/outcome-unknown). Final when it is the
    intent's own answer (.settled: never sent again); one not marked so is
    retried, and typed this way too."""


class DeadlineError(IdemflowError):
    """The intent had no final answer before its deadline. It may still take
    effect: send it again later with the same key."""


class IntentMismatchError(IdemflowError):
    """A store holds another request under this intent's ID, and the server
    may have recorded it: its key cannot carry the new one."""


class NoDurableIdentityError(IdemflowError):
    """The run has no durable identity to derive a key from; a random key
    would protect nothing across a resume, so none is made."""


def parse_problem(body: str) -> dict[str, Any]:
    try:
        p = json.loads(body)
    except ValueError:
        return {}  # a downstream's answer need not be JSON
    return p if isinstance(p, dict) else {}


def problem_error(status: int, body: str, settled: bool) -> ProblemError:
    """Types an error answer; settled says it is the intent's own."""
    p = parse_problem(body)
    if settled:
        if p.get("type") == OUTCOME_UNKNOWN:
            return OutcomeUnknownError(status, p, body, True)
        if 400 <= status < 500:
            return RejectedError(status, p, body, True)
        return ProblemError(status, p, body, True)
    if p.get("type") == "/problems/idempotency-key-reused":
        return KeyReusedError(status, p, body)
    if p.get("type") == OUTCOME_UNKNOWN:
        # Not the intent's own answer (a retry follows), typed as Go's is.
        return OutcomeUnknownError(status, p, body)
    if status == 413:
        return TooLargeError(status, p, body)
    if status in (400, 415):
        return InvalidRequestError(status, p, body)
    if status == 401:
        return UnauthorizedError(status, p, body)
    if status == 404:
        return NotFoundError(status, p, body)
    if status == 422 or (status == 409 and p.get("type") == "/problems/invalid-transition"):
        return RejectedError(status, p, body)
    return ProblemError(status, p, body)
