"""Agent processes the kill tests start, SIGKILL and read line by line."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    from .wire import Fault

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(module: str, *args: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], queue.Queue[str | None]]:
    """Runs python -m module from clients/python, with its output (stdout
    and stderr) as lines on the queue; None once it ended."""
    p = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=HERE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return p, lines


def lines_of(lines: queue.Queue[str | None]) -> list[str]:
    """The lines a process printed so far (all of them, once it ended)."""
    out: list[str] = []
    while True:
        try:
            line = lines.get_nowait()
        except queue.Empty:
            return out
        if line is None:
            return out
        out.append(line)


def wait_for(lines: queue.Queue[str | None], prefix: str) -> str:
    """The first line a process prints that starts with prefix; the test
    fails if the process ends, or says nothing for 90 s, before it."""
    import pytest

    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=90)
        except queue.Empty:
            pytest.fail(f"the process never printed {prefix!r}: {seen}")
        if line is None:
            pytest.fail(f"the process ended before {prefix!r}: {seen}")
        seen.append(line)
        if line.startswith(prefix):
            return line


def kill_mid_call_and_rerun(
    module: str, args: list[str], env: dict[str, str], hit: threading.Event, rerun: tuple[str, ...] = ()
) -> tuple[list[str], subprocess.Popen[str], list[str]]:
    """Runs python -m module, SIGKILLs it once hit is set (the proxy saw
    its tool call), and runs it again as the app would (with rerun's
    arguments added), to its end: what the killed run printed, and the
    rerun with what it printed."""
    import pytest

    p, lines = start(module, *args, env=env)
    if not hit.wait(90):
        p.kill()
        pytest.fail(f"the agent never called the tool: {lines_of(lines)}")
    p.kill()  # SIGKILL
    p.wait(30)
    seen = lines_of(lines)
    assert not any(s.startswith("DONE") for s in seen), seen
    p, lines = start(module, *args, *rerun, env=env)
    p.wait(120)
    return seen, p, lines_of(lines)


def agent_env(url: str) -> dict[str, str]:
    """The environment of an agent process a kill test starts, idemflow at url."""
    return {**os.environ, "IDEMFLOW_URL": url, "PYTHONUNBUFFERED": "1"}


def kill_case(
    module: str,
    name: str,
    thread: str,
    args: list[str],
    url: str,
    db: psycopg.Connection,
    *,
    tickets: int,
    replayed: bool,
    fault: Fault = "answer-lost",
    resumed: str | None = None,
) -> None:
    """One case of a framework's kill test: python -m module (with
    --thread thread and args) behind a proxy that faults its first call
    (the answer dropped after idemflow executed it, or the request held
    before it arrived), SIGKILLed while the call waits, then run again as
    the app resumes it, to its end. The rerun must end (DONE), the thread
    hold tickets tickets, and the tool's answer the agent printed be a
    replay or not as replayed says; where resumed is given, the rerun
    must say it resumed (a line starting with it)."""
    from .conftest import count
    from .wire import Proxy

    proxy = Proxy(url, fault, hold=True)
    try:
        seen, p, out = kill_mid_call_and_rerun(module, ["--thread", thread, *args], agent_env(proxy.url), proxy.hit)
    finally:
        proxy.close()
    assert p.returncode == 0 and any(s.startswith("DONE") for s in out), out
    n = count(db, "ticket", thread)
    print(f"{name}: {n} tickets after the kill and the rerun; keys {[k for k in proxy.keys if k]}; {seen} then {out}")
    assert n == tickets, out
    answer = json.loads(next(s for s in out if s.startswith("tool create_ticket ")).split(" ", 2)[2])
    assert answer["replayed"] is replayed, out
    if resumed is not None:
        assert any(s.startswith(resumed) for s in out), out


def with_worker_snippet(code: str, module: str, folder: Path, customer: str, run: Callable[[], Coroutine[Any, Any, str]]) -> tuple[str, str]:
    """Runs a documented worker program (code, saved as module in folder)
    as a process, with IDEMFLOW_AGENT_CUSTOMER set to customer, while
    run() drives it (starts a workflow, waits for its result); then kills
    it. Returns run()'s result and the worker's output."""
    (folder / f"{module}.py").write_text(code)
    env = {**os.environ, "IDEMFLOW_AGENT_CUSTOMER": customer, "PYTHONUNBUFFERED": "1", "PYTHONPATH": f"{HERE}:{folder}"}
    w = subprocess.Popen([sys.executable, "-m", module], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = asyncio.run(run())
    finally:
        w.kill()
        logs, _ = w.communicate(timeout=30)
        print(f"the worker's output: {logs}")
    return out, logs


def kill_snippet_mid_call_and_rerun(code: str, folder: Path, url: str, tickets: Callable[[], int]) -> subprocess.CompletedProcess[str]:
    """Runs a documented program (code, saved as folder/agent.py, with
    clients/python importable for its scripted model) against url through
    a proxy that drops the answer of its first call; SIGKILLs it while the
    call waits, checks that the call made its ticket (tickets() counts
    them, one more than before), and runs it again to its end, which must
    exit 0 and make no second ticket. Returns the rerun, for what else its
    test reads of it."""
    from .wire import Proxy

    (folder / "agent.py").write_text(code)
    before = tickets()
    proxy = Proxy(url, "answer-lost", hold=True)
    env = {**agent_env(proxy.url), "PYTHONPATH": HERE}
    try:
        first = subprocess.Popen([sys.executable, "agent.py"], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proxy.hit.wait(90), "the program never called the tool"
        first.kill()  # SIGKILL, while the call waits for its answer
        first.communicate(timeout=30)
        assert tickets() == before + 1, "the killed call made no ticket"
        again = subprocess.run([sys.executable, "agent.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=180)
    finally:
        proxy.close()
    print(f"the docs' program, killed and run again: {again.stdout[-300:]!r}")
    assert again.returncode == 0, again.stdout + again.stderr
    assert tickets() == before + 1, "run again after the kill, the program made a second ticket"
    return again
