"""The stack the tests run against: python_test.go starts it (a real
PostgreSQL, the embedded Temporal server, the gateway) and passes its
addresses in the environment. A test that needs it fails, never skips,
when it is missing."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import idemflow

from .model_api import ScriptedModel

# tests/crewai/ and tests/strands/ run in their own environments
# (.venv-crewai, .venv-strands: neither framework can share this one),
# each from its own test in python_test.go, which names it; tests/oauth/
# runs in this one, against the stack with a real authorization server
# that its own test starts. The main suite leaves them to those tests,
# never silently: python_test.go's TestCrewAIAgainstTheStack,
# TestStrandsAgainstTheStack and TestOAuthWithThePythonSDKAndClient fail
# where they cannot run.
SUITE = os.environ.get("IDEMFLOW_PYTEST_SUITE", "main")
collect_ignore_glob = [f"{s}/*" for s in ("crewai", "strands", "oauth") if s != SUITE]


def need(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        pytest.fail(f"{name} is not set: run the suite through 'go test ./clients/python' (scripts/test.sh does), which starts the stack")
    return v


#: How late a DeadlineError may come after its deadline: the time an
#: aborted request takes to close, on a loaded machine (docs/agents/python.md
#: states it).
DEADLINE_SLACK = 0.5


@pytest.fixture
def url() -> str:
    return need("IDEMFLOW_URL")


@pytest.fixture
def token() -> str:
    return need("IDEMFLOW_TOKEN")


@pytest.fixture
def client(url: str, token: str) -> Iterator[idemflow.Client]:
    with idemflow.Client(url, token, attempt_timeout=3, initial_backoff=0.02, max_backoff=0.2) as c:
        yield c


@pytest.fixture
def db() -> Iterator[psycopg.Connection]:
    with psycopg.connect(need("DATABASE_URL"), autocommit=True) as conn:
        yield conn


def count(db: psycopg.Connection, table: str, customer_id: str) -> int:
    row = db.execute(f"SELECT count(*) FROM {table} WHERE customer_id = %s", (customer_id,)).fetchone()
    assert row is not None
    return int(row[0])


def count_like(db: psycopg.Connection, who: str) -> int:
    """The tickets of every customer whose ID starts with who (a test's
    customers, one per intent it makes)."""
    row = db.execute("SELECT count(*) FROM ticket WHERE customer_id LIKE %s", (who + "%",)).fetchone()
    assert row is not None
    return int(row[0])


def docs_text() -> str:
    """The project's documentation, README.md, docs/*.md and the pages under
    docs/agents/ (in the order docs/agents.md links them), one after
    another, as internal/tooling/docs reads it: a snippet's test finds its
    section wherever it lives."""
    root = Path(__file__).resolve().parents[3]
    docs = root / "docs"
    pages = sorted((docs / "agents").glob("*.md"))
    linked = [docs / "agents" / name for name in re.findall(r"\]\(agents/([a-z0-9-]+\.md)\)", (docs / "agents.md").read_text())]
    ordered = [p for p in dict.fromkeys(linked) if p in pages] + [p for p in pages if p not in linked]
    return "\n\n".join(f.read_text() for f in [root / "README.md", *sorted(docs.glob("*.md")), *ordered])


def docs_block(after: str) -> str:
    """The first python block of the documentation (docs_text) after the
    text after: a snippet its test runs as written."""
    return docs_text().split(after, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def model_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., ScriptedModel]]:
    """Starts scripted models behind a stand-in for the Messages API
    (tests/model_api.py): serve(customer, ...) starts one and points
    ANTHROPIC_BASE_URL at it, for this process and the agents it starts."""
    started: list[ScriptedModel] = []
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")

    def serve(customer: str, **kw: Any) -> ScriptedModel:
        m = ScriptedModel(customer, **kw)
        started.append(m)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", m.url)
        return m

    yield serve
    for m in started:
        m.close()
