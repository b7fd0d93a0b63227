"""The process at the other end of an owner connection: its pidfd, and its exit.

A ``close`` or ``terminate`` returns only once the session's owner process is gone
(its lock released, its tree reaped): the caller takes a pidfd of its peer before
asking, then waits on it. An owner in a session host (:mod:`tether.sessionhost`; its
hello says ``hosted``) shares its process with other sessions' owners: it is gone when
its lock is released, which it does before it closes its connections, so the caller
waits for the end of its connection instead (:func:`wait_owner_gone`).

Light on purpose -- the CLI's close path imports it, and nothing here needs more than
``os``, ``poll`` (:mod:`tether._fdwait`: a pidfd may be numbered past select's 1024)
and the socket's credentials.
"""

from __future__ import annotations

import os

from tether import _fdwait

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

__all__ = ["peer_pidfd", "wait_exit", "wait_owner_gone"]


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


def wait_owner_gone(sock: Any, hosted: bool, pidfd: int | None, timeout: float) -> bool | None:
    """Wait until the owner at the other end of ``sock`` is gone: its process exited
    (``pidfd``), or -- ``hosted`` -- it closed our connection, its lock already let go
    (the host process lives on with its other sessions). Closes ``pidfd``."""
    if not hosted:
        return wait_exit(pidfd, timeout)
    if pidfd is not None:
        os.close(pidfd)
    import time

    deadline = time.monotonic() + timeout
    while True:  # whatever it still sends (its last broadcasts) is not ours to read
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not _fdwait.readable(sock.fileno(), remaining):
            return False
        try:
            if not sock.recv(65536):
                return True
        except BlockingIOError:
            continue
        except OSError:  # reset: gone as well
            return True
