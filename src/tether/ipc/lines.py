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

Performance matters on the caller's side (10,000 streamed updates per turn): a chunk
is kept as immutable ``bytes`` with a read position, so a chunk holding hundreds of
lines is sliced, never copied per line; only a line that spans chunks is gathered, in
a ``bytearray`` (a 64 MiB prompt is copied once, not once per chunk).

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

    __slots__ = ("_broken", "_buf", "_eof", "_head", "_pos", "max_bytes", "truncated", "what")

    def __init__(self, max_bytes: int = DEFAULT_MAX_LINE_BYTES, what: str = "IPC frame") -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self.what = what
        self._buf = b""  # the chunk being split; everything before _pos was returned
        self._pos = 0
        # The start of a line that spans chunks. A bytearray grows in amortised O(1), so
        # a 64 MiB prompt arriving in 64 KiB chunks is copied once, not once per chunk.
        self._head = bytearray()
        self._eof = False
        self._broken = False
        self.truncated = 0  # bytes of an unterminated line dropped at EOF

    @property
    def at_eof(self) -> bool:
        """True once ``feed(b"")`` was called."""
        return self._eof

    @property
    def buffered(self) -> int:
        """How many received bytes are not yet returned as lines."""
        return len(self._head) + len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        """Add bytes read from the peer; ``b""`` marks EOF.

        Call :meth:`next_line` until it returns ``None`` before feeding more (the h11
        contract); otherwise the unsplit rest is carried over, at the cost of a copy.
        """
        if not data:
            self._eof = True
            return
        if self._eof or self._broken:
            return  # nothing after EOF or after an oversized line is ever a frame
        if self._pos < len(self._buf):
            self._buf = self._buf[self._pos :] + data
        else:
            self._buf = data
        self._pos = 0

    def next_line(self) -> bytes | None:
        """The next complete line, or ``None`` when more data is needed (or at EOF).

        At EOF an unterminated final line is dropped (its length is kept in
        ``truncated``): it is a frame cut short, which no reader may act on.

        Raises:
            FrameTooLarge: the current line is longer than ``max_bytes`` (the reader is
                broken from then on: drop the connection).
        """
        if self._broken:
            raise self._too_large(None)
        buf, pos, head = self._buf, self._pos, self._head
        nl = buf.find(b"\n", pos)
        if nl >= 0:
            size = len(head) + nl - pos
            if size > self.max_bytes:
                self._break()
                raise self._too_large(size)
            self._pos = nl + 1
            if not head:
                return buf[pos:nl]
            head += buf[pos:nl]
            line = bytes(head)
            head.clear()
            return line
        # No newline in what is left of this chunk: it all belongs to the current line.
        if len(head) + len(buf) - pos > self.max_bytes:
            self._break()
            raise self._too_large(None)
        if pos < len(buf):
            head += buf[pos:]
        self._buf, self._pos = b"", 0
        if self._eof and head:
            # Every IPC frame ends with a newline: an unterminated rest at EOF is a frame
            # cut short (the peer died or dropped us mid-write), never a frame.
            self.truncated = len(head)
            head.clear()
        return None

    def peek_block(self) -> bytes | None:
        """Every complete line buffered in the current chunk, as one block (each line
        with its ``\\n``), without consuming it; None when there is none or a line spans
        chunks (:meth:`next_line` takes that one). :meth:`skip` consumes what the
        caller used. A block within ``max_bytes`` holds no oversized line.

        For a consumer of many small lines (a journal follower), which then handles
        them with bytes operations over the block instead of one call per line.
        """
        if self._head or self._broken:
            return None
        buf, pos = self._buf, self._pos
        end = buf.rfind(b"\n", pos) + 1
        if end <= pos or end - pos > self.max_bytes:
            return None
        return buf[pos:end]

    def skip(self, size: int) -> None:
        """Consume ``size`` bytes of what :meth:`peek_block` returned."""
        self._pos += size

    def _break(self) -> None:
        self._broken = True
        self._buf, self._pos = b"", 0
        self._head = bytearray()

    def _too_large(self, size: int | None) -> FrameTooLarge:
        seen = f"of {size} bytes " if size is not None else ""
        return FrameTooLarge(
            f"{self.what} {seen}exceeds the limit of {self.max_bytes} bytes",
            limit=self.max_bytes,
        )
