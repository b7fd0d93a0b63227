"""The common part of the loopback fakes of model APIs (``fake_anthropic``, ``fake_openai``).

A :class:`LoopbackAPI` binds 127.0.0.1:0, serves in a daemon thread, records every request
(method, path, query, headers, parsed JSON body), lists the paths it does not serve in
``unknown_paths``, and stops by itself after ``max_lifetime_s`` even if nobody exits the
context manager. A subclass names its request handler class in ``handler``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self
from urllib.parse import parse_qs, urlsplit


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)
    reply_kind: str = ""  # what the fake answered ("text", "tool_use", "hang", ...)


class LoopbackAPI:
    handler: ClassVar[type[LoopbackHandler]]

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
        assert self._server is not None, f"{type(self).__name__} is not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        fake = self

        class Handler(self.handler):  # bound to this fake
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

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- assertion helpers ----------------------------------------------------------------

    def requests_to(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    # -- internals -------------------------------------------------------------------------

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(req)

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._counter += 1
            return f"{prefix}_fake{self._counter:04d}"


class LoopbackHandler(BaseHTTPRequestHandler):
    api: LoopbackAPI
    protocol_version = "HTTP/1.1"
    timeout = 30  # an idle keep-alive connection cannot pin a thread forever

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr
        pass

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

    def _not_found(self, req: RecordedRequest, error: dict[str, Any]) -> None:
        self.api.unknown_paths.append(f"{req.method} {req.path}")
        self._send(404, error)

    def _start_sse(self, extra_headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("request-id", self.api._next_id("req"))
        for key, value in (extra_headers or {}).items():
            self.send_header(key, value)
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def _hang_then_close(self) -> None:
        """Stall, bounded, until the server stops or the hang limit passes."""
        self.api._stop.wait(self.api.hang_limit_s)
        self.close_connection = True
