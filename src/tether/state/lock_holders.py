"""Who holds the state database's write lock, when a write waited out its busy timeout.

SQLite says only "database is locked". On a host that is rarely a collision (writes
are short and ``busy_timeout`` absorbs them); it is a process that took the write lock
and then stopped moving -- a ``SIGSTOP``, a frozen cgroup, a debugger -- and every
writer on the host waits for it. The operator needs its pid and whether it is stopped.

SQLite locks with POSIX advisory locks (in WAL mode on bytes of ``state.db-shm``, the
writer's being exclusive), and the kernel lists every held lock in ``/proc/locks`` with
the holder's pid and the file's device and inode. :func:`write_holders` is the parse,
with no I/O; :func:`describe_holders` reads the files and names each holder.

A name found here is a report, never a reason to signal anything: a pid in
``/proc/locks`` proves nothing about which process it is by the time we act.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["describe_holders", "holder_pids", "write_holders"]

PROC_LOCKS = "/proc/locks"

FileKey = tuple[int, int, int]  # (device major, device minor, inode)


def write_holders(proc_locks: str, files: Iterable[FileKey], *, exclude: int) -> list[int]:
    """The pids holding a write (exclusive) lock on any of ``files``, per ``/proc/locks``.

    A line reads ``1: POSIX  ADVISORY  WRITE 1234 00:2f:5678 120 120``; the device is
    ``major:minor`` in hex. Lines with ``->`` are processes *waiting* for a lock, not
    holding one; open file description locks show pid ``-1`` (no one process holds
    them) and are skipped, as is ``exclude`` (a process never blocks itself).
    """
    wanted = set(files)
    holders: list[int] = []
    for line in proc_locks.splitlines():
        fields = line.split()
        if len(fields) < 6 or "->" in fields:
            continue
        _, kind, _, mode, pid_text, where = fields[:6]
        if kind not in ("POSIX", "FLOCK") or mode != "WRITE":
            continue
        try:
            major, minor, inode = where.split(":")
            key = (int(major, 16), int(minor, 16), int(inode))
            pid = int(pid_text)
        except ValueError:
            continue
        if key in wanted and pid > 0 and pid != exclude and pid not in holders:
            holders.append(pid)
    return holders


def _file_key(path: str) -> FileKey | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)


def _describe(pid: int) -> tuple[str, bool]:
    """``(how to name pid, whether it is stopped)``."""
    from tether import _os  # only on this rare path

    try:
        stat = _os.current().stat(pid)
    except (OSError, NotImplementedError):
        stat = None
    if stat is None:
        return f"pid {pid}", False
    name = stat.comm.decode(errors="replace")
    if stat.state in ("T", "t"):
        # Stopped: it keeps the lock until it is continued (SIGCONT) or ends.
        return f"pid {pid} ({name}, stopped: it holds the lock until it continues or ends)", True
    return f"pid {pid} ({name}, state {stat.state})", False


def holder_pids(db_path: str) -> list[int]:
    """The other processes holding a write lock on the database or its ``-shm``
    (``[]`` if none is listed, or ``/proc/locks`` cannot be read)."""
    keys = [key for key in map(_file_key, (db_path, db_path + "-shm")) if key is not None]
    if not keys:
        return []
    try:
        with open(PROC_LOCKS, encoding="ascii", errors="replace") as file:
            text = file.read()
    except OSError:
        return []
    return write_holders(text, keys, exclude=os.getpid())


def describe_holders(db_path: str, *, stopped_only: bool = False) -> str | None:
    """``"pid 1234 (python3, stopped: …)"`` for each other process holding a write lock
    on the database or its ``-shm`` (``stopped_only``: each stopped one -- a running
    holder is a writer at work); ``None`` if none is listed."""
    named = [_describe(pid) for pid in holder_pids(db_path)]
    return ", ".join(name for name, stopped in named if stopped or not stopped_only) or None
