"""A client's requests as the router reads them: heads, then body parts, parsed by
``httptools`` as the bytes arrive (no I/O here: the router feeds the parser)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httptools

from tether.fleet import http1


class RequestWatch:
    """httptools callbacks for a client's requests: heads, then body parts."""

    def __init__(self, queue: asyncio.Queue[tuple[str, Any]]) -> None:
        self._queue = queue
        self._url = b""
        self._headers: list[http1.Header] = []
        self.parser: httptools.HttpRequestParser | None = None

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        head = http1.RequestHead(
            method=self.parser.get_method(),
            target=self._url,
            headers=self._headers,
            keep_alive=self.parser.should_keep_alive(),
        )
        self._queue.put_nowait(("head", head))
        self._url, self._headers = b"", []

    def on_body(self, body: bytes) -> None:
        self._queue.put_nowait(("body", body))

    def on_message_complete(self) -> None:
        self._queue.put_nowait(("end", None))


async def once(parts: Iterable[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


class RequestBody:
    """One request's body parts as they arrive; drained whole whatever its reader did,
    so the next request on the connection starts at its head."""

    def __init__(self, queue: asyncio.Queue[tuple[str, Any]]) -> None:
        self._queue = queue
        self.done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self.done:
            kind, part = await self._queue.get()
            if kind == "body":
                yield part
            elif kind == "end":
                self.done = True
            else:
                raise ConnectionError("the client went away mid-request")

    async def drain(self) -> None:
        async for _ in self:
            pass
