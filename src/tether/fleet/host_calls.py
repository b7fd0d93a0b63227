"""Requests the router makes to a host on its own behalf (not relayed for a client):
creating a re-homed session, sending it its replayed context, closing a session's
children across hosts. Same pooled connections and timeouts as relayed requests."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httptools

from tether.fleet import http1
from tether.fleet.relay import ClientLink, Endpoint, exchange

if TYPE_CHECKING:
    from tether.fleet.router import Router
    from tether.fleet.rows import HostRow


class _Collect:
    """Stands in for a client connection: collects a host's answer to the router itself."""

    class _Transport:
        def get_write_buffer_size(self) -> int:
            return 0

    def __init__(self) -> None:
        self.data = bytearray()
        self.transport = self._Transport()

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None


def _parse(raw: bytes) -> tuple[int, Any]:
    """(status, JSON body) of an HTTP response the relay collected."""

    class Watch:
        body = bytearray()

        def on_body(self, part: bytes) -> None:
            self.body += part

    watch = Watch()
    parser = httptools.HttpResponseParser(watch)
    parser.feed_data(bytes(raw))
    try:
        return parser.get_status_code(), json.loads(bytes(watch.body) or b"null")
    except ValueError:
        return parser.get_status_code(), None


async def call_host(
    router: Router, host: HostRow, method: bytes, path: str, body: Any, extra: list[http1.Header]
) -> tuple[int, Any]:
    """One JSON request from the router itself to a host; (status, JSON answer)."""
    payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    at = Endpoint.of(host.url)
    head = http1.RequestHead(method, path.encode(), [(b"content-type", b"application/json")])
    headers: list[http1.Header] = [(b"content-length", str(len(payload)).encode()), *extra]
    if router.fleet_auth is not None:
        headers.append((b"authorization", router.fleet_auth))
    out = _Collect()

    async def once() -> Any:
        yield payload

    await exchange(
        router.pool,
        at.host,
        at.port,
        http1.encode_request_head(head, at.netloc, headers),
        once(),
        out,  # type: ignore[arg-type]
        first_byte_timeout=router.settings.first_byte_timeout_s,
        link=ClientLink(),
        tls=at.tls,
    )
    return _parse(bytes(out.data))
