"""The bytes of HTTP/1.1 the router writes itself (no I/O).

The router relays a host's answers byte for byte; what it writes of its own is small:
request heads with the fleet credential in place of the user's token, problem documents
(RFC 9457) for the answers it gives itself, and SSE events it adds to a relayed stream
(``host_lost``), framed as chunks when the stream is chunked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

Header = tuple[bytes, bytes]

# Request headers never forwarded: hop-by-hop ones (RFC 9110 7.6.1), the caller's
# credential -- a host (or, from a host's agents' door, a router) gets the fleet's own --
# and a requester assertion, which only a door writes and only a router reads
# (tether.fleet.delegation).
HOP_BY_HOP = frozenset(
    {
        b"x-tether-requester",
        b"expect",  # answered by the router itself (tether.fleet.requests)
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
        b"authorization",
        b"host",
    }
)

REASONS = {
    200: b"OK",
    201: b"Created",
    400: b"Bad Request",
    401: b"Unauthorized",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    409: b"Conflict",
    410: b"Gone",
    422: b"Unprocessable Content",
    413: b"Content Too Large",
    431: b"Request Header Fields Too Large",
    501: b"Not Implemented",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
    504: b"Gateway Timeout",
}


@dataclass(slots=True)
class RequestHead:
    method: bytes
    target: bytes
    headers: list[Header] = field(default_factory=list)
    keep_alive: bool = True

    @property
    def path(self) -> str:
        return self.target.split(b"?", 1)[0].decode("latin-1")

    def header(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    @property
    def chunked(self) -> bool:
        """Whether the body comes chunked (the head sent on to a host says so too)."""
        return b"chunked" in (self.header(b"transfer-encoding") or b"").lower()


def encode_request_head(head: RequestHead, host: bytes, extra: Iterable[Header] = ()) -> bytes:
    """The head to send a host: the user's headers less hop-by-hop ones, then ours."""
    parts = [head.method, b" ", head.target, b" HTTP/1.1\r\nhost: ", host, b"\r\n"]
    for name, value in head.headers:
        if name not in HOP_BY_HOP:
            parts += [name, b": ", value, b"\r\n"]
    for name, value in extra:
        parts += [name, b": ", value, b"\r\n"]
    parts.append(b"\r\n")
    return b"".join(parts)


def response(
    status: int,
    body: bytes,
    content_type: bytes = b"application/json",
    headers: Sequence[Header] = (),
    *,
    keep_alive: bool = True,
) -> bytes:
    parts = [
        b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b"Status")),
        b"content-type: " + content_type + b"\r\n",
        b"content-length: %d\r\n" % len(body),
    ]
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    for name, value in headers:
        parts += [name, b": ", value, b"\r\n"]
    parts += [b"\r\n", body]
    return b"".join(parts)


def json_response(status: int, payload: Any, *, keep_alive: bool = True) -> bytes:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return response(status, body, keep_alive=keep_alive)


def problem(
    status: int,
    title: str,
    detail: str,
    *,
    code: str,
    retryable: bool,
    keep_alive: bool = True,
    **extra: Any,
) -> bytes:
    """A problem document as Tether's gateway writes them (``code``, ``retryable``)."""
    doc = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        "retryable": retryable,
        **extra,
    }
    headers: list[Header] = [(b"retry-after", b"1")] if retryable else []
    return response(
        status,
        json.dumps(doc, separators=(",", ":")).encode(),
        b"application/problem+json",
        headers,
        keep_alive=keep_alive,
    )


def sse_event(event: str, data: Any) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (
        event.encode(),
        json.dumps(data, separators=(",", ":")).encode(),
    )


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


def last_event_id(body: bytes) -> int | None:
    """The last complete ``id:`` line of the SSE events in ``body`` (journal seqs).

    ``body`` may be cut anywhere by the network: an id line without its newline yet is
    not counted (the caller searches again with more bytes).
    """
    end = len(body)
    while True:
        at = body.rfind(b"id:", 0, end)
        if at < 0:
            return None
        if at == 0 or body[at - 1 : at] == b"\n":
            eol = body.find(b"\n", at)
            raw = body[at + 3 : eol].strip() if eol >= 0 else b""
            if raw.isdigit():
                return int(raw)
        end = at


def session_id_of(path: str) -> str | None:
    """The session id of a ``/v1/sessions/{id}[/...]`` path."""
    if not path.startswith("/v1/sessions/"):
        return None
    rest = path[len("/v1/sessions/") :]
    sid = rest.split("/", 1)[0]
    return sid or None
