"""The process at the other end of an owner connection: its pidfd, and its exit.

A ``close`` or ``terminate`` returns only once the session's owner process is gone
(its lock released, its tree reaped): the caller takes a pidfd of its peer before
asking, then waits on it. Light on purpose -- the CLI's close path imports it, and
nothing here needs more than ``os``, ``poll`` (:mod:`tether._fdwait`: a pidfd may be
numbered past select's 1024) and the socket's credentials.
"""

from __future__ import annotations

import os

from tether import _fdwait

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

__all__ = ["peer_pidfd", "wait_exit"]


def peer_pidfd(sock: Any) -> int | None:
    """A pidfd of the process at the other end of a Unix socket (the kernel's word for
    who it is: ``SO_PEERCRED``), or None where we cannot get one."""
    import _socket
    import struct

    try:
        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
        pid = struct.unpack("3i", creds)[0]
        return os.pidfd_open(pid) if pid > 0 else None
    except (OSError, AttributeError):  # no pidfd (old kernel): we cannot wait for it
        return None


def wait_exit(pidfd: int | None, timeout: float) -> bool | None:
    """Wait until the process behind ``pidfd`` exited (then closes it); None if unknown."""
    if pidfd is None:
        return None
    try:
        return _fdwait.readable(pidfd, timeout)
    finally:
        os.close(pidfd)
