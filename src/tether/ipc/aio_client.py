"""The asyncio flavour of the IPC client (beside the blocking :mod:`tether.ipc.client`):
one connection to a session's owner, adopted from the operations layer's socket.

The blocking operations layer connects (or starts the owner) and checks the IPC version;
the socket then moves into asyncio streams, and the bounded line reader moves along with
any bytes it already holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

from tether import _fastjson
from tether.errors import (
    OwnerLost,
    OwnerUnavailable,
    RemoteProtocolError,
    TetherError,
    error_from_wire,
)
from tether.ipc import protocol
from tether.ipc.client import (
    OwnerConnection,
    check_hello,
    check_size,
    new_request_id,
    no_hello,
    no_owner,
)
from tether.ipc.lines import LineReader

__all__ = ["AsyncOwnerConnection"]
READ_CHUNK = 65536


class AsyncOwnerConnection:
    """One asyncio connection to an owner: hello (already read), then requests.

    Made from a connection the blocking operations layer opened (and version-checked):
    the socket moves into asyncio streams, and the line reader moves along with any
    bytes it already holds.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        lines: LineReader,
        hello: dict[str, Any],
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.lines = lines
        self.hello = hello

    @classmethod
    async def adopt(cls, conn: OwnerConnection) -> AsyncOwnerConnection:
        sock = socket.socket(fileno=conn.sock.detach())
        sock.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return cls(reader, writer, conn.lines, conn.hello)

    @classmethod
    async def connect(
        cls, path: str, *, timeout: float, limit: int = READ_CHUNK
    ) -> AsyncOwnerConnection:
        """Connect on the loop and read the owner's ``hello`` (what
        :meth:`OwnerConnection.connect` does, without a thread).

        Raises:
            OwnerUnavailable: nobody listens there, or it did not say a hello we speak.
            OwnerUnresponsive: it accepted us but said nothing within ``timeout``.
        """
        try:
            reader, writer = await asyncio.open_unix_connection(path, limit=limit)
        except OSError as exc:
            raise no_owner(path, exc) from exc
        conn = cls(reader, writer, LineReader(), {})
        try:
            conn.hello = check_hello(await asyncio.wait_for(conn.read(), timeout), path)
        except (OSError, TetherError) as exc:  # TimeoutError among them
            conn.close()
            raise no_hello(path, exc, timeout) from exc
        conn.lines.max_bytes = protocol.caller_line_bound(conn.hello, conn.lines.max_bytes)
        return conn

    async def fill(self, size: int = READ_CHUNK) -> None:
        """Wait for the owner and add what it sent (EOF, or a reset, as ``b""``) to
        ``lines`` (for :func:`tether.ipc.client.pump`)."""
        try:
            chunk = await self.reader.read(size)
        except ConnectionError:
            chunk = b""  # reset: the owner is gone, like EOF
        self.lines.feed(chunk)

    def close(self) -> None:
        """Close now, without waiting (a follower leaving on the loop's way out)."""
        with contextlib.suppress(RuntimeError):  # the loop closed under us: nothing to close on
            self.writer.close()

    async def read(self) -> dict[str, Any] | None:
        lines = self.lines
        while True:
            line = lines.next_line()  # FrameTooLarge: a RemoteProtocolError
            if line is not None:
                break
            if lines.at_eof:
                return None
            await self.fill()
        try:
            frame = _fastjson.loads(line.decode("utf-8"))
        except ValueError:
            raise RemoteProtocolError("the owner sent a malformed frame") from None
        return frame if isinstance(frame, dict) else None

    async def send(
        self,
        kind: str,
        payload: dict[str, Any],
        deadline_ms: int | None,
        *,
        request_id: str | None = None,
        max_bytes: int | None = None,
    ) -> str:
        """Send one request envelope; returns its requestId.

        Raises:
            UsageError: the encoded request is longer than ``max_bytes`` (nothing sent).
        """
        rid = request_id or new_request_id()
        generation = self.hello.get("generation")
        data = protocol.request_frame(
            rid,
            kind,
            payload,
            deadline_ms=deadline_ms,
            owner_generation=generation if isinstance(generation, int) else None,
        )
        check_size(kind, data, max_bytes)
        self.writer.write(data)
        await self.writer.drain()
        return rid

    async def frames(self, rid: str) -> AsyncIterator[dict[str, Any]]:
        """This request's frames through its terminal frame (which is yielded last)."""
        tracker = protocol.ResponseTracker(rid)
        while True:
            frame = await self.read()
            if frame is None:
                if tracker.acked:
                    raise OwnerLost("the owner went away mid-request; the outcome is unknown")
                raise OwnerUnavailable("the owner went away before acknowledging the request")
            try:
                mine = tracker.feed(frame)
            except ValueError as exc:
                raise RemoteProtocolError(f"the owner broke IPC ordering: {exc}") from None
            if mine is None or mine.get("type") == "hello":
                continue
            yield mine
            if tracker.finished:
                return

    async def request(
        self, kind: str, payload: dict[str, Any], deadline_ms: int | None = None
    ) -> dict[str, Any]:
        rid = await self.send(kind, payload, deadline_ms)
        async for frame in self.frames(rid):
            if frame.get("type") == "result":
                result = frame.get("result")
                return result if isinstance(result, dict) else {}
            if frame.get("type") == "error":
                raise error_from_wire(frame.get("error") or {})
        raise OwnerLost("no terminal frame")  # pragma: no cover - frames() raises first

    async def aclose(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
