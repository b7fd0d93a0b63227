"""The Linux process table: ``/proc``, pidfds and the cgroup v2 filesystem.

Theory of operation
-------------------
Every method here is a thin read or syscall, and every ``OSError`` is translated at
this boundary (psutil's ``wrap_exceptions`` habit) into the outcomes policy code
reasons about: ``None`` (no such process), :class:`~tether._os.ProcUnreadable`
(cannot tell), :data:`~tether._os.UNREADABLE` (environment not readable) or
``ProcessLookupError`` (``ESRCH`` from a signal). The subtle case is
``FileNotFoundError`` on ``/proc/<pid>/stat``: it means "gone" only if ``/proc``
itself is mounted and readable; in a sandbox without ``/proc`` every pid would look
gone and a reconcile would close leases of live trees, so we check ``/proc/self``
before believing it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal

from tether._os import (
    UNREADABLE,
    ProcStat,
    ProcUnreadable,
    Unreadable,
    environ_lookup,
    parse_stat,
)

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"

# "Gone" errnos: the entry vanished (ENOENT), or the task exited between our open
# and read (ESRCH, seen on /proc/<pid>/environ of a dying process).
_GONE = frozenset({errno.ENOENT, errno.ESRCH})


def _proc_mounted() -> bool:
    # /proc/self always exists on a mounted, readable procfs; if it does not, a
    # missing /proc/<pid> proves nothing.
    return os.path.exists("/proc/self/stat")


def _read(path: str) -> bytes:
    # os.open/os.read, not open(): no file object per read, which a /proc scan of
    # hundreds of processes would build and drop hundreds of times.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = []
        while chunk := os.read(fd, 65536):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


class LinuxProcessTable:
    """The real :class:`~tether._os.ProcessTable` on Linux (pidfd needs 5.3+)."""

    def __init__(self) -> None:
        # boot_id cannot change while we run; reading it once saves a syscall per
        # verification and makes a mid-run /proc failure impossible to misread.
        self._boot_id: str | None = None

    def boot_id(self) -> str:
        if self._boot_id is None:
            try:
                self._boot_id = _read(_BOOT_ID_PATH).decode("ascii").strip()
            except OSError as exc:
                raise ProcUnreadable(exc.errno, f"cannot read {_BOOT_ID_PATH}") from exc
        return self._boot_id

    def pid_namespace(self) -> str | None:
        try:
            return os.readlink("/proc/self/ns/pid")
        except OSError:
            return None

    def stat(self, pid: int) -> ProcStat | None:
        if pid <= 0:
            return None
        try:
            raw = _read(f"/proc/{pid}/stat")
        except OSError as exc:
            if exc.errno in _GONE and _proc_mounted():
                return None
            raise ProcUnreadable(exc.errno, f"cannot read /proc/{pid}/stat") from exc
        try:
            return parse_stat(pid, raw)
        except ValueError as exc:
            raise ProcUnreadable(errno.EIO, str(exc)) from exc

    def environ_value(self, pid: int, key: bytes) -> bytes | Unreadable | None:
        try:
            raw = _read(f"/proc/{pid}/environ")
        except OSError:
            # EACCES (another uid without ptrace access), ENOENT/ESRCH (gone mid-read):
            # all mean "cannot confirm", which callers treat as fail-closed.
            return UNREADABLE
        # One key only; the rest of the block (it holds secrets) is dropped at once.
        return environ_lookup(raw, key)

    def cmdline(self, pid: int) -> list[bytes] | None:
        try:
            raw = _read(f"/proc/{pid}/cmdline")
        except OSError as exc:
            if exc.errno in _GONE and _proc_mounted():
                return None
            raise ProcUnreadable(exc.errno, f"cannot read /proc/{pid}/cmdline") from exc
        if not raw:
            return []
        # argv is NUL-terminated; a process that rewrote its argv may drop the final
        # NUL, so strip at most one trailing empty element.
        parts = raw.split(b"\0")
        if parts and parts[-1] == b"":
            parts.pop()
        return parts

    def children(self, pid: int) -> list[int]:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError as exc:
            if exc.errno in _GONE and _proc_mounted():
                return []
            raise ProcUnreadable(exc.errno, f"cannot list /proc/{pid}/task") from exc
        out: list[int] = []
        seen: set[int] = set()
        for tid in tids:
            try:
                data = _read(f"/proc/{pid}/task/{tid}/children")
            except OSError:
                # A thread exited between listdir and open: its children (if any)
                # were reparented to a sibling thread we also read.
                continue
            for field in data.split():
                child = int(field)
                if child not in seen:
                    seen.add(child)
                    out.append(child)
        return out

    def pids(self) -> list[int]:
        try:
            names = os.listdir("/proc")
        except OSError as exc:
            raise ProcUnreadable(exc.errno, "cannot list /proc") from exc
        if "self" not in names:
            raise ProcUnreadable(errno.ENOENT, "/proc is not a mounted procfs")
        return sorted(int(n) for n in names if n.isdigit())

    def pidfd_open(self, pid: int) -> int:
        try:
            return os.pidfd_open(pid)
        except OSError as exc:
            # EINVAL: pid <= 0 or a non-leader thread id; neither names a process we
            # could own, so report it like ESRCH.
            if exc.errno in (errno.ESRCH, errno.EINVAL):
                raise ProcessLookupError(errno.ESRCH, f"no process {pid}") from exc
            raise

    def pidfd_send_signal(self, pidfd: int, sig: int) -> None:
        # ESRCH surfaces as ProcessLookupError already; a pidfd never reaches a
        # recycled pid, which is the whole point of signalling through one.
        signal.pidfd_send_signal(pidfd, sig)

    def close_fd(self, fd: int) -> None:
        os.close(fd)

    def killpg(self, pgid: int, sig: int) -> None:
        if pgid <= 1:
            # killpg(0) is our own group and killpg(1) init's: never what a caller meant.
            raise ValueError(f"refusing to signal process group {pgid}")
        os.killpg(pgid, sig)

    def cgroup_kill(self, path: str) -> None:
        # Raises FileNotFoundError if the cgroup is gone (nothing left to kill) and
        # PermissionError without write access; both are the caller's to interpret.
        with open(os.path.join(path, "cgroup.kill"), "w") as f:
            f.write("1")

    def cgroup_procs(self, path: str) -> list[int]:
        try:
            raw = _read(os.path.join(path, "cgroup.procs"))
        except FileNotFoundError:
            return []
        return [int(x) for x in raw.split()]

    def cgroup_populated(self, path: str) -> bool | None:
        try:
            raw = _read(os.path.join(path, "cgroup.events"))
        except OSError:
            return None
        for line in raw.splitlines():
            name, _, value = line.partition(b" ")
            if name == b"populated":
                return value.strip() == b"1"
        return None

    def cgroup_create(self, parent: str, name: str) -> str:
        path = os.path.join(parent, name)
        os.makedirs(path, mode=0o755)
        return path

    def cgroup_remove(self, path: str) -> bool:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                return False  # the kernel frees it just after the last member's exit
            raise
        return True

    def child_handle(self, pid: int) -> int:
        return os.pidfd_open(pid)

    def reap_child(self, handle: int) -> int | None:
        try:
            info = os.waitid(os.P_PIDFD, handle, os.WEXITED)
            status = info.si_status if info is not None else None
        except ChildProcessError:
            status = None
        finally:
            os.close(handle)
        return status

    def signal_child(self, handle: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(handle, sig)

    def try_lock_exclusive(self, path: str) -> int | None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return fd
