"""The one bounded NDJSON line reader of the IPC: bytes in, lines out, never unbounded.

Theory of operation
-------------------
Every IPC reader -- the owner's server, the blocking client of the thin CLI path, the
asyncio library client, the owner launcher's readiness pipe -- splits a byte stream
into ``\\n``-terminated lines. They all do it here, so they all share one bound: a line
longer than ``max_bytes`` (not counting its ``\\n``) is refused with
:class:`~tether.errors.FrameTooLarge`, which names the limit, as soon as we know it is
too long -- we never wait for its end, so the buffer holds at most ``max_bytes`` plus
one chunk of whatever the transport delivered.

The core has no I/O: the shell calls :meth:`LineReader.feed` with what it read
(``b""`` at EOF) and drains :meth:`LineReader.next_line` until it returns ``None``.
After an oversized line the stream cannot be resynchronised safely (the rest of that
line cannot be told from the next frame), so the reader stays broken and every reader
drops its connection.

Performance matters on the caller's side (10,000 streamed updates per turn): the buffer
is immutable ``bytes`` with a read position, so a chunk holding hundreds of lines is
sliced, never copied per line; bytes are joined only when a line spans chunks.

Standard library only, no ``dataclasses`` or ``typing`` at run time: the thin CLI path
imports this module.
"""

from __future__ import annotations

from tether.errors import FrameTooLarge

__all__ = ["DEFAULT_MAX_LINE_BYTES", "LineReader"]

# 64 MiB: acpx accepts 64 MiB messages, and users pipe logs and diffs into prompts.
# Memory stays bounded by this plus one transport chunk per connection.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024


class LineReader:
    """Split a byte stream into lines (without their ``\\n``), with a bound on length.

    Args:
        max_bytes: the longest line accepted, not counting its ``\\n``.
        what: how the lines are named in the error (``"IPC frame"``...).
    """

    __slots__ = ("_broken", "_buf", "_eof", "_pos", "_scan", "max_bytes", "what")

    def __init__(self, max_bytes: int = DEFAULT_MAX_LINE_BYTES, what: str = "IPC frame") -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self.what = what
        self._buf = b""  # received bytes; everything before _pos was returned
        self._pos = 0
        self._scan = 0  # where the next search for b"\n" starts (no newline before it)
        self._eof = False
        self._broken = False

    @property
    def at_eof(self) -> bool:
        """True once ``feed(b"")`` was called."""
        return self._eof

    @property
    def buffered(self) -> int:
        """How many received bytes are not yet returned as lines."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        """Add bytes read from the peer; ``b""`` marks EOF."""
        if not data:
            self._eof = True
            return
        if self._eof or self._broken:
            return  # nothing after EOF or after an oversized line is ever a frame
        if self._pos >= len(self._buf):
            self._buf, self._pos, self._scan = data, 0, 0
        else:
            scan = self._scan - self._pos
            self._buf = self._buf[self._pos :] + data
            self._pos, self._scan = 0, scan

    def next_line(self) -> bytes | None:
        """The next complete line, or ``None`` when more data is needed (or at EOF).

        At EOF an unterminated final line is returned as it is (a truncated frame, which
        the caller's parser then refuses), then ``None``.

        Raises:
            FrameTooLarge: the current line is longer than ``max_bytes`` (the reader is
                broken from then on: drop the connection).
        """
        if self._broken:
            raise self._too_large(None)
        buf, pos = self._buf, self._pos
        nl = buf.find(b"\n", self._scan)
        if nl >= 0:
            if nl - pos > self.max_bytes:
                self._break()
                raise self._too_large(nl - pos)
            self._pos = self._scan = nl + 1
            return buf[pos:nl]
        size = len(buf) - pos
        if size > self.max_bytes:
            self._break()
            raise self._too_large(None)
        self._scan = len(buf)
        if self._eof and size:
            self._buf, self._pos, self._scan = b"", 0, 0
            return buf[pos:]
        return None

    def _break(self) -> None:
        self._broken = True
        self._buf, self._pos, self._scan = b"", 0, 0

    def _too_large(self, size: int | None) -> FrameTooLarge:
        seen = f"of {size} bytes " if size is not None else ""
        return FrameTooLarge(
            f"{self.what} {seen}exceeds the limit of {self.max_bytes} bytes",
            limit=self.max_bytes,
        )
