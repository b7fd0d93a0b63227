"""A loopback fake of the Anthropic Messages API, enough to drive claude-agent-acp offline.

Usage::

    with FakeAnthropic() as api:
        env["ANTHROPIC_BASE_URL"] = api.base_url
        ...
        assert api.requests_to("/v1/messages")

Behaviour (all canned, deterministic):

- ``HEAD /`` (and any ``GET /``) -> 200: the agent's connectivity probe.
- ``POST /v1/messages[?beta=true]``:
  - when the last user message carries a ``tool_result`` block (and no text typed after
    it): a text answer
    ``fake-claude: tool result <error|ok>: <first 200 chars of the result>``;
  - else when the last user text contains ``TOOL:<Name>:<json-args>`` (the JSON object
    runs to the end of that line): a ``tool_use`` block for ``<Name>`` with those args,
    ``stop_reason: tool_use``;
  - else when it contains ``HANG``: the response headers go out and the stream then
    stalls until the client goes away or the server stops (for cancel-mid-stream tests);
  - else a text answer ``fake-claude: <last user text>``, streamed in a few deltas.
  ``stream: true`` gets SSE (``event: <type>\\ndata: <json>\\n\\n``), otherwise one JSON
  message.
- ``POST /v1/messages/count_tokens`` -> ``{"input_tokens": <bytes/4>}``.
- ``GET /v1/models`` -> a one-model list; ``GET /v1/models/<id>`` -> that model.
- anything else -> 404 with an Anthropic-shaped error, and the path lands in
  ``unknown_paths`` so a test (or a human) can see what else the agent calls.

Every request is recorded in ``requests`` (method, path, query, headers, parsed JSON body).
The server binds 127.0.0.1:0, runs in a daemon thread, and stops by itself after
``max_lifetime_s`` even if nobody exits the context manager.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

FAKE_MODEL = "claude-fake-1"
TOOL_RE = re.compile(r"TOOL:([A-Za-z_][\w-]*):(\{.*\})")


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)
    reply_kind: str = ""  # "text" | "tool_use" | "tool_result_text" | "hang" | ... set on reply


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def last_user_message(body: Any) -> list[dict[str, Any]]:
    msgs = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(msgs, list):
        return []
    for m in reversed(msgs):
        if isinstance(m, dict) and m.get("role") == "user":
            return _blocks(m.get("content"))
    return []


def _is_plain_text(block: dict[str, Any]) -> bool:
    """A text block the user typed, not one the agent injected."""
    text = block.get("text")
    if block.get("type") != "text" or not isinstance(text, str):
        return False
    t = text.lstrip()
    return not (t.startswith(("<system-reminder>", "[Request interrupted")))


def last_user_text(body: Any) -> str:
    """The last text block of the last user message that the user (not the agent) wrote."""
    blocks = last_user_message(body)
    plain = [b["text"] for b in blocks if _is_plain_text(b)]
    texts = [
        b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    return (plain or texts or [""])[-1]


def _tool_result_text(block: dict[str, Any]) -> str:
    c = block.get("content")
    if isinstance(c, str):
        return c
    return " ".join(b.get("text", "") for b in _blocks(c) if b.get("type") == "text")


class FakeAnthropic:
    def __init__(self, max_lifetime_s: float = 300.0, hang_limit_s: float = 60.0) -> None:
        self.max_lifetime_s = max_lifetime_s
        self.hang_limit_s = hang_limit_s
        self.requests: list[RecordedRequest] = []
        self.unknown_paths: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._counter = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "FakeAnthropic is not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeAnthropic:
        fake = self

        class Handler(_Handler):
            api = fake

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        self._timer = threading.Timer(self.max_lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- assertions helpers ----------------------------------------------------------------

    def requests_to(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def message_requests(self) -> list[RecordedRequest]:
        return self.requests_to("/v1/messages")

    # -- internals -------------------------------------------------------------------------

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(req)

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._counter += 1
            return f"{prefix}_fake{self._counter:04d}"


def _sse(event: str, data: dict[str, Any]) -> bytes:
    data = {"type": event, **data}
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def plan_reply(body: Any) -> tuple[str, list[dict[str, Any]], str]:
    """Decide the reply: (kind, content blocks, stop_reason)."""
    last = last_user_message(body)
    results = [b for b in last if b.get("type") == "tool_result"]
    # After a cancelled tool use claude-agent-acp sends the *next* prompt in one user message
    # with a synthetic "rejected" tool_result, "[Request interrupted by user for tool use]"
    # and the new text: a typed text after the results makes it a new prompt.
    typed_after = bool(results) and any(
        _is_plain_text(b) for b in last[last.index(results[-1]) + 1 :]
    )
    if results and not typed_after:
        r = results[-1]
        status = "error" if r.get("is_error") else "ok"
        text = f"fake-claude: tool result {status}: {_tool_result_text(r)[:200]}"
        return "tool_result_text", [{"type": "text", "text": text}], "end_turn"
    text = last_user_text(body)
    m = TOOL_RE.search(text)
    if m:
        try:
            args = json.loads(m[2])
        except ValueError:
            args = None
        if isinstance(args, dict):
            block = {"type": "tool_use", "id": "", "name": m[1], "input": args}
            return "tool_use", [block], "tool_use"
    if "HANG" in text:
        return "hang", [], ""
    return "text", [{"type": "text", "text": f"fake-claude: {text}"}], "end_turn"


class _Handler(BaseHTTPRequestHandler):
    api: FakeAnthropic
    protocol_version = "HTTP/1.1"
    timeout = 30  # an idle keep-alive connection cannot pin a thread forever

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr
        pass

    # -- plumbing --------------------------------------------------------------------------

    def _read_body(self) -> Any:
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def _record(self, body: Any) -> RecordedRequest:
        u = urlsplit(self.path)
        req = RecordedRequest(
            method=self.command,
            path=u.path,
            query=parse_qs(u.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        self.api._record(req)
        return req

    def _send(self, status: int, payload: Any, ctype: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", self.api._next_id("req"))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _not_found(self, req: RecordedRequest) -> None:
        self.api.unknown_paths.append(f"{req.method} {req.path}")
        self._send(
            404,
            {
                "type": "error",
                "error": {"type": "not_found_error", "message": f"fake: no {req.path}"},
            },
        )

    # -- verbs -----------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self._record(None)
        self._send(200, b"", "text/plain")

    def do_GET(self) -> None:
        req = self._record(None)
        if req.path in ("/", ""):
            self._send(200, b"ok", "text/plain")
        elif req.path == "/v1/models":
            self._send(
                200,
                {"data": [_model()], "has_more": False, "first_id": FAKE_MODEL},
            )
        elif req.path.startswith("/v1/models/"):
            self._send(200, _model(req.path.rsplit("/", 1)[1]))
        else:
            self._not_found(req)

    def do_POST(self) -> None:
        req = self._record(self._read_body())
        if req.path == "/v1/messages":
            self._messages(req)
        elif req.path == "/v1/messages/count_tokens":
            size = len(json.dumps(req.body)) if req.body is not None else 0
            self._send(200, {"input_tokens": max(1, size // 4)})
        else:
            self._not_found(req)

    # -- /v1/messages ----------------------------------------------------------------------

    def _messages(self, req: RecordedRequest) -> None:
        body = req.body if isinstance(req.body, dict) else {}
        kind, blocks, stop_reason = plan_reply(body)
        req.reply_kind = kind
        for b in blocks:
            if b["type"] == "tool_use":
                b["id"] = self.api._next_id("toolu")
        model = body.get("model") if isinstance(body.get("model"), str) else FAKE_MODEL
        msg_id = self.api._next_id("msg")
        in_tokens = max(1, len(json.dumps(body)) // 4)
        out_tokens = sum(len(json.dumps(b)) // 4 for b in blocks) + 1
        if not body.get("stream"):
            if kind == "hang":
                self._hang_then_close()
                return
            self._send(
                200,
                {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": blocks,
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": {"input_tokens": in_tokens, "output_tokens": out_tokens},
                },
            )
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("request-id", self.api._next_id("req"))
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        out = [
            _sse(
                "message_start",
                {
                    "message": {
                        "id": msg_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": in_tokens, "output_tokens": 1},
                    }
                },
            )
        ]
        if kind == "hang":
            self.wfile.write(out[0])
            self.wfile.flush()
            self._hang_then_close()
            return
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                out.append(
                    _sse(
                        "content_block_start",
                        {"index": i, "content_block": {"type": "text", "text": ""}},
                    )
                )
                text = b["text"]
                step = max(1, len(text) // 3)
                for j in range(0, len(text), step):
                    out.append(
                        _sse(
                            "content_block_delta",
                            {
                                "index": i,
                                "delta": {"type": "text_delta", "text": text[j : j + step]},
                            },
                        )
                    )
            else:
                start = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
                out.append(_sse("content_block_start", {"index": i, "content_block": start}))
                out.append(
                    _sse(
                        "content_block_delta",
                        {
                            "index": i,
                            "delta": {
                                "type": "input_json_delta",
                                "partial_json": json.dumps(b["input"]),
                            },
                        },
                    )
                )
            out.append(_sse("content_block_stop", {"index": i}))
        out.append(
            _sse(
                "message_delta",
                {
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": out_tokens},
                },
            )
        )
        out.append(_sse("message_stop", {}))
        for chunk in out:
            self.wfile.write(chunk)
            self.wfile.flush()

    def _hang_then_close(self) -> None:
        """Stall, bounded, until the server stops or the hang limit passes."""
        self.api._stop.wait(self.api.hang_limit_s)
        self.close_connection = True


def _model(model_id: str = FAKE_MODEL) -> dict[str, Any]:
    return {
        "type": "model",
        "id": model_id,
        "display_name": "Fake Claude",
        "created_at": "2026-01-01T00:00:00Z",
    }


if __name__ == "__main__":  # manual poking: python tests/realagents/fake_anthropic.py
    with FakeAnthropic(max_lifetime_s=600) as api:
        print(api.base_url, flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
