"""NDJSON line framing with a hard bound on frame size.

Theory of operation
-------------------

ACP frames are single lines of UTF-8 JSON terminated by ``\\n`` (acp-protocol.md section 1).
``LineFramer`` turns an arbitrary chunking of the agent's stdout into those lines and nothing
else: it does not decode UTF-8 or JSON, so it can be reasoned about (and fuzzed) on its own.

The buffer always starts at the beginning of the *current* line. ``next_frame`` looks for the
next ``\\n`` with ``bytearray.find`` starting where the previous search stopped (``_scan``),
so feeding a long line one byte at a time stays linear rather than quadratic. Deleting a
consumed prefix of a ``bytearray`` is cheap in CPython (it moves the start pointer instead
of the bytes), which is what lets this path carry tens of thousands of frames per second.

Bounding memory: if the current line grows past ``max_frame_bytes`` without a newline, we
report it *once* as ``Oversized`` right away (we need not wait for its end to know it is
bad), drop what we have, and enter discard mode, in which ``feed`` throws bytes away up to
the next ``\\n``. The stream resynchronises there. So the buffer never holds more than
``max_frame_bytes`` plus whatever one ``feed`` brought, provided the caller drains
``next_frame`` after each ``feed``, which is the h11 contract our async shell follows.

Leniency, because real agents do these things:

* blank lines (and whitespace-only lines) are skipped, not reported;
* a trailing ``\\r`` is stripped (CRLF from Windows-flavoured writers);
* at EOF a final line with no ``\\n`` is still delivered: some agents omit the last newline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from tether.errors import LocalProtocolError
from tether.jsonrpc.messages import EOF, EXCERPT_BYTES, _Sentinel

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "LineFramer", "Oversized"]

# 16 MiB: large enough for a session/load replay or a big file read inlined in a tool call,
# small enough that one runaway line cannot exhaust the owner's memory.
DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than ``max_frame_bytes``, reported once and discarded.

    Attributes:
        excerpt: the first 200 bytes of the line.
        length: how many bytes of the line we had seen when we gave up on it; a lower bound
            when the line was still unterminated at that point.
    """

    excerpt: bytes
    length: int


class LineFramer:
    """Split a byte stream into lines, with a bound on line length.

    Args:
        max_frame_bytes: the longest line accepted, not counting its ``\\n``.
    """

    __slots__ = ("_buf", "_discarding", "_eof", "_max", "_scan")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 1:
            raise ValueError("max_frame_bytes must be positive")
        self._max = max_frame_bytes
        self._buf = bytearray()
        # Where the next search for b"\n" starts: everything in _buf before it is known
        # not to contain one.
        self._scan = 0
        # True while we are throwing away the rest of an oversized line.
        self._discarding = False
        self._eof = False

    @property
    def max_frame_bytes(self) -> int:
        """The longest line accepted."""
        return self._max

    @property
    def buffered(self) -> int:
        """How many bytes are held, waiting for a newline or for ``next_frame``."""
        return len(self._buf)

    @property
    def at_eof(self) -> bool:
        """Whether ``feed(b"")`` has been called."""
        return self._eof

    def feed(self, data: bytes) -> None:
        """Add bytes read from the peer; ``b""`` marks EOF.

        Raises:
            LocalProtocolError: data fed after EOF (a bug in the caller's read loop).
        """
        if self._eof:
            if data:
                raise LocalProtocolError("LineFramer.feed() called with data after EOF")
            return
        if not data:
            self._eof = True
            return
        if self._discarding:
            # Still inside an oversized line: keep nothing until it ends.
            nl = data.find(b"\n")
            if nl < 0:
                return
            self._discarding = False
            data = data[nl + 1 :]
        self._buf += data

    def next_frame(self) -> bytes | Oversized | Literal[_Sentinel.EOF] | None:
        """The next complete line without its terminator, an ``Oversized`` report, ``None``
        if more data is needed, or ``EOF`` once the stream ended and everything was delivered.
        """
        buf = self._buf
        while True:
            nl = buf.find(b"\n", self._scan)
            if nl < 0:
                size = len(buf)
                if size > self._max:
                    # Too long already and still unterminated: report now, keep nothing.
                    report = Oversized(bytes(buf[:EXCERPT_BYTES]), size)
                    buf.clear()
                    self._scan = 0
                    # At EOF there is nothing left to discard up to.
                    self._discarding = not self._eof
                    return report
                if not self._eof:
                    self._scan = size
                    return None
                if not size:
                    return EOF
                # EOF with an unterminated final line: deliver it as if it had a "\n".
                nl = size
            line = bytes(buf[:nl])
            del buf[: nl + 1]
            self._scan = 0
            if nl > self._max:
                return Oversized(line[:EXCERPT_BYTES], nl)
            if line.endswith(b"\r"):
                line = line[:-1]
            # isspace() on a JSON line stops at its first byte ("{"), so this costs nothing
            # on the hot path; an empty line is not isspace(), hence the first test.
            if line and not line.isspace():
                return line
