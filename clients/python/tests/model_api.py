"""A local stand-in for Anthropic's Messages API (ANTHROPIC_BASE_URL, or a
provider's base_url): a scripted model for the agents whose model is
reached over HTTP (Strands Agents' Anthropic provider, the Claude Agent
SDK's CLI, Agno's Claude model), and of OpenAI's Chat Completions API
for Microsoft Agent Framework's client. No network.

It asks for create_ticket, one call at a time (a new tool_use ID each
time it writes a call), until it has read as many answers (tool results
with http_status) since the turn's prompt as it has titles, then says it
is done; with together, it asks for all of them in one message; with
ids, it writes those tool_use IDs, in turn, instead of new ones; with
model_key, each call carries an idempotency_key of the model's, new each
time it writes the call (an MCP tool's). After a
crash or a pending answer, what it reads is no answer (the call was
interrupted, or is pending), and it writes the call again, as models do,
up to three times in a row.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedModel:
    """The stand-in, serving on 127.0.0.1 from a thread of this process."""

    def __init__(
        self,
        customer: str,
        titles: Sequence[str] = ("Printer on fire",),
        together: bool = False,
        ids: Sequence[str] = (),
        model_key: bool = False,
        reword: bool = False,
    ) -> None:
        self.customer, self.titles, self.together, self.ids = customer, list(titles), together, list(ids)
        #: reword: every call after the first is worded otherwise, as a
        #: model at its usual temperature writes it again.
        self.model_key, self.reword = model_key, reword
        #: The tool_use IDs the model wrote, in order.
        self.calls: list[str] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path.endswith("/chat/completions"):
                    self._send("application/json", json.dumps(model.completion(json.loads(body or b"{}"))).encode())
                    return
                if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                    self._send("application/json", b'{"input_tokens":10}' if "count_tokens" in self.path else b"{}")
                    return
                kind, text = model.reply(json.loads(body or b"{}"))
                self._send(kind, text.encode())

            def _send(self, kind: str, data: bytes) -> None:
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reply(self, request: dict[str, Any]) -> tuple[str, str]:
        """The answer to one request of the Messages API, with its content
        type: streamed, or one JSON message when the request does not ask
        for a stream (Agno's Claude model)."""
        message, blocks, stop = self.message(request)
        if not request.get("stream"):
            usage = {"input_tokens": 10, "output_tokens": 20}
            return "application/json", json.dumps({**message, "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage})
        out: list[str] = []

        def ev(kind: str, **data: Any) -> None:
            out.append(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n")

        ev("message_start", message={**message, "content": [], "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}})
        for i, b in enumerate(blocks):
            if b["type"] == "tool_use":
                ev("content_block_start", index=i, content_block={**b, "input": {}})
                ev("content_block_delta", index=i, delta={"type": "input_json_delta", "partial_json": json.dumps(b["input"])})
            else:
                ev("content_block_start", index=i, content_block={"type": "text", "text": ""})
                ev("content_block_delta", index=i, delta={"type": "text_delta", "text": b["text"]})
            ev("content_block_stop", index=i)
        ev("message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage={"output_tokens": 20})
        ev("message_stop")
        return "text/event-stream", "".join(out)

    def completion(self, request: dict[str, Any]) -> dict[str, Any]:
        """The answer to one request of OpenAI's Chat Completions API (its
        OpenAI-compatible base_url: Microsoft Agent Framework's client), in
        one message: the same script, its calls as tool_calls."""
        tools = [{"name": t.get("function", {}).get("name", "")} for t in request.get("tools") or []]
        _, blocks, stop = self.message({"tools": tools, "messages": completions_as_messages(request.get("messages") or [])})
        uses = [b for b in blocks if b["type"] == "tool_use"]
        calls = [{"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": json.dumps(b["input"])}} for b in uses]
        text = "".join(b.get("text", "") for b in blocks if b["type"] == "text") or None
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex,
            "object": "chat.completion",
            "created": 0,
            "model": request.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if stop == "tool_use" else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
        }

    def message(self, request: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
        """The model's next message: its envelope, its content blocks and
        its stop reason."""
        tool = next((t["name"] for t in request.get("tools") or [] if t["name"].endswith("create_ticket")), None)
        answered, results = answers_since_prompt(request.get("messages") or [])
        message = {"id": "msg_" + uuid.uuid4().hex, "type": "message", "role": "assistant", "model": request.get("model", "scripted")}
        # Three results that are no answer in a row, and it gives up.
        if not (tool and answered < len(self.titles) and results - answered < 3):
            return message, [{"type": "text", "text": "The ticket is open."}], "end_turn"
        blocks: list[dict[str, Any]] = []
        for title in self.titles[answered:] if self.together else [self.titles[answered]]:
            call = self.ids[len(self.calls) % len(self.ids)] if self.ids else "toolu_" + uuid.uuid4().hex[:24]
            self.calls.append(call)
            if self.reword and len(self.calls) > 1:
                title = f"{title}, written again ({len(self.calls)})"
            call_args: dict[str, Any] = {"customer_id": self.customer, "title": title}
            if self.model_key:
                call_args = {"idempotency_key": str(uuid.uuid4()), **call_args}
            blocks.append({"type": "tool_use", "id": call, "name": tool, "input": call_args})
        return message, blocks, "tool_use"


def completions_as_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI Chat Completions messages as the Messages API's, as far as
    the script reads them: a tool's message is a user's tool_result."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") == "tool":
            out.append({"role": "user", "content": [{"type": "tool_result", "content": m.get("content")}]})
        elif m.get("role") == "user":
            out.append({"role": "user", "content": m.get("content") or ""})
    return out


def answers_since_prompt(messages: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """The answers (tool results with http_status), and all the tool
    results, the model read since the turn's last prompt (the last message
    of the user's with text)."""
    n = results = 0
    for m in reversed(messages):
        if m.get("role") != "user":
            continue
        parts = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        tool_results = [p for p in parts if p.get("type") == "tool_result"]
        results += len(tool_results)
        n += sum(1 for p in tool_results if "http_status" in json.dumps(p.get("content")))
        if any(p.get("type") == "text" for p in parts):
            break
    return n, results
