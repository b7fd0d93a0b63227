"""The gateway's memory after a burst: given back once the relay has been quiet a moment.

Relaying a turn to many streams allocates per write (each client's window of events,
framed by the HTTP layer) and frees it as the clients read. Python frees those buffers,
but the C allocator keeps the pages mapped (and the freeing threads' arenas grow), so a
gateway that once relayed a big turn to a thousand streams would sit at that peak for
good. Once no entry has arrived and no stream has written or ended for ``SETTLE_S``, a
collection and glibc's ``malloc_trim`` return those pages. Nothing here runs per entry:
activity only sets a flag.
"""

from __future__ import annotations

import asyncio

from tether import _memory

__all__ = ["QuietTrim"]

SETTLE_S = 1.0  # quiet this long before trimming: a busy relay never pays for it


class QuietTrim:
    """Trim once per burst of activity, ``SETTLE_S`` after the last of it (on the loop)."""

    def __init__(self, settle: float = SETTLE_S) -> None:
        self.settle = settle
        self.trims = 0
        self._active = False
        self._handle: asyncio.TimerHandle | None = None

    def touch(self) -> None:
        """Something was relayed or released: trim once things have settled."""
        self._active = True
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(self.settle, self._run)

    def _run(self) -> None:
        if self._active:  # still busy: look again after another quiet moment
            self._active = False
            self._handle = asyncio.get_running_loop().call_later(self.settle, self._run)
            return
        self._handle = None
        _memory.give_back()
        self.trims += 1

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
