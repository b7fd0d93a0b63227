"""Waiting for a file descriptor to become readable, whatever its number.

``select.select`` takes only descriptors below ``FD_SETSIZE`` (1024): a higher one
raises ``ValueError: filedescriptor out of range in select()``. A gateway serving a few
hundred sessions holds more descriptors than that (four or so per warm session), so a
pidfd or an owner's socket it opens late is numbered past 1024, and every select on it
failed -- a close answered ``500`` (docs/benchmarks.md, "How cost grows with
sessions"). ``poll`` has no such limit; we use it for every wait of a process that may
hold many descriptors (the gateway, a fleet host, the owner).
"""

from __future__ import annotations

import errno
import math
import select

TYPE_CHECKING = False  # typing costs the CLI's close path milliseconds; mypy reads it
if TYPE_CHECKING:
    from typing import Protocol

    class _HasFileno(Protocol):
        def fileno(self) -> int: ...


__all__ = ["readable"]


def readable(fd: int | _HasFileno, timeout: float | None) -> bool:
    """Whether ``fd`` became readable (or hung up: a pidfd whose process exited, a peer
    that closed) within ``timeout`` seconds (None: wait for ever). An interrupted wait
    (EINTR) is retried by Python itself (PEP 475).

    Raises:
        OSError: ``EBADF``, ``fd`` is not open (as ``select`` said it).
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    events = poller.poll(ms)
    if events and events[0][1] & select.POLLNVAL:
        raise OSError(errno.EBADF, "not an open file descriptor")
    return bool(events)
