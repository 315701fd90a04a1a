"""Agent processes the kill tests start, SIGKILL and read line by line."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading

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
