"""asyncio protocols for an agent's pipes: output straight to a callback, input with
flow control."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["PipeReader", "PipeWriter"]


class PipeReader(asyncio.Protocol):
    """Read side: each chunk goes to ``on_data`` from ``data_received``, with no queue."""

    def __init__(self, on_data: Callable[[bytes], None], on_eof: Callable[[], None]) -> None:
        self._on_data = on_data
        self._on_eof = on_eof

    def data_received(self, data: bytes) -> None:
        self._on_data(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_eof()


class PipeWriter(asyncio.Protocol):
    """Write side with flow control: ``drain`` waits while the pipe is full."""

    def __init__(self) -> None:
        self._paused = False
        self._resume: asyncio.Future[None] | None = None
        self.closed = False

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._resume is not None and not self._resume.done():
            self._resume.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.resume_writing()

    async def drain(self) -> None:
        while self._paused and not self.closed:
            self._resume = asyncio.get_running_loop().create_future()
            await self._resume
