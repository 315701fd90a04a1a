"""A proxy between an agent and the gateway that faults the first call of
one operation, for the tests that kill an agent mid call, and idemflow's
MCP server over HTTP in front of such a proxy."""

from __future__ import annotations

import contextlib
import http.server
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

import httpx

Fault = Literal["answer-lost", "before-received"]


class Proxy:
    """Forwards every request to upstream, but the nth POST to path (the
    first by default):
    answer-lost forwards it and drops the answer (the connection is held
    until the caller dies or gives up), before-received never forwards it.
    hit is set once the fault happened; keys holds every POST's key.
    hold keeps the faulted connection open until the caller closes it (an
    agent to be killed waiting); without it, it is closed at once (the
    caller sees a broken connection and retries). While partitioned is
    true, every request is forwarded and its answer dropped, the connection
    closed: a partition that outlasts the caller's wait. prefers holds
    every request's Prefer header."""

    def __init__(self, upstream: str, fault: Fault, path: str = "/v1/tickets", hold: bool = False, nth: int = 1) -> None:
        self.keys: list[str | None] = []
        self.prefers: list[str | None] = []
        self.partitioned = False
        self.hit = threading.Event()
        lock = threading.Lock()
        seen = [0]
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.prefers.append(self.headers.get("Prefer"))
                if method == "POST":
                    outer.keys.append(self.headers.get("Idempotency-Key"))
                faulted = False
                if method == "POST" and self.path == path:
                    with lock:
                        seen[0] += 1
                        faulted = seen[0] == nth
                if faulted and fault == "before-received":
                    outer.hit.set()
                    self._hold()
                    return  # it goes no further
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
                r = httpx.request(method, upstream + self.path, content=body, headers=headers, timeout=60)
                if faulted or outer.partitioned:
                    outer.hit.set()
                    self._hold()
                    return  # the answer never leaves
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            def _hold(self) -> None:
                self.close_connection = True
                if hold:
                    self.connection.settimeout(120)
                    try:
                        self.rfile.read(1)  # b"" once the caller is gone
                    except OSError:
                        pass

            def do_POST(self) -> None:
                self._forward("POST")

            def do_GET(self) -> None:
                self._forward("GET")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


T = TypeVar("T")


def through_partition(url: str, seconds: float, run: Callable[[str], T]) -> tuple[T, set[str]]:
    """run(proxy URL)'s result, with the proxy to url partitioned (every
    request to it fails) for seconds from the first request it drops, and
    the keys its POSTs sent. Counted from that request, not from the run's
    start: an agent that takes long to start (a CLI, a loaded machine)
    still meets a partition longer than its wait."""
    proxy = Proxy(url, "answer-lost", path="/never")
    done = threading.Event()

    def heal() -> None:
        while not proxy.hit.wait(0.05):
            if done.is_set():
                return
        done.wait(seconds)
        proxy.partitioned = False

    try:
        proxy.partitioned = True
        healer = threading.Thread(target=heal, daemon=True)
        healer.start()
        try:
            out = run(proxy.url)
        finally:
            done.set()
            healer.join()
    finally:
        proxy.close()
    return out, {k for k in proxy.keys if k}


@contextlib.contextmanager
def mcp_http(gateway: str, *flags: str) -> Iterator[str]:
    """idemflow mcp --http (IDEMFLOW_BIN) on a free port, pointed at
    gateway, with flags; yields its URL once it answers its health path."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [os.environ["IDEMFLOW_BIN"], "mcp", "--http", f"127.0.0.1:{port}", "--url", gateway, *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        else:
            raise RuntimeError("idemflow mcp --http did not come up")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
