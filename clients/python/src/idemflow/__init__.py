"""idemflow's Python client: exactly-once side effects for agents.

An intent (a ticket, an order, a team's declared operation, an HTTP tool)
is sent under one Idempotency-Key until it has a final answer; however
often it is sent, after timeouts, restarts or a resumed run, it takes
effect once, and a repeat returns the first answer, marked replayed.

The key is what must survive: Client.run keeps it in a store for plain
code; idemflow.langgraph derives it from a LangGraph run's checkpointed
tool call, idemflow.temporal from a Temporal activity's identity.
"""

from .answers import HEADER_REPLAYED, Result, backoff_ceiling, judge, judge_operation, prefer_wait
from .client import AsyncClient, AsyncTokenProvider, Client, Intent, TokenProvider
from .errors import (
    DOWNSTREAM_REJECTED,
    DeadlineError,
    IdemflowError,
    IntentMismatchError,
    InvalidRequestError,
    KeyReusedError,
    NoDurableIdentityError,
    NotFoundError,
    OutcomeUnknownError,
    ProblemError,
    RejectedError,
    TooLargeError,
    UnauthorizedError,
)
from .keys import derive_key
from .store import SQLiteStore, Store, StoredIntent

__all__ = [
    "DOWNSTREAM_REJECTED",
    "HEADER_REPLAYED",
    "AsyncClient",
    "AsyncTokenProvider",
    "Client",
    "DeadlineError",
    "IdemflowError",
    "Intent",
    "IntentMismatchError",
    "InvalidRequestError",
    "KeyReusedError",
    "NoDurableIdentityError",
    "NotFoundError",
    "OutcomeUnknownError",
    "ProblemError",
    "RejectedError",
    "Result",
    "SQLiteStore",
    "Store",
    "StoredIntent",
    "TokenProvider",
    "TooLargeError",
    "UnauthorizedError",
    "backoff_ceiling",
    "derive_key",
    "judge",
    "judge_operation",
    "prefer_wait",
]
