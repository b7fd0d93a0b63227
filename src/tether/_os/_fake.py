"""A fake, recording process table for testing supervision logic without processes.

Theory of operation
-------------------
:class:`FakeProcessTable` models just enough of Linux for ownership decisions to be
tested honestly:

* Processes are objects, not pids. ``reuse(pid, ...)`` replaces the object at a pid,
  exactly as the kernel recycles a number for an unrelated process. A pidfd is bound
  to the *object* it was opened on, so signalling through it after ``remove`` or
  ``reuse`` raises ``ProcessLookupError`` (the kernel's ``ESRCH``) and never reaches
  the newcomer -- the guarantee real pidfds give us.
* Every delivered signal is recorded in :attr:`FakeProcessTable.signals` as
  ``("pidfd", pid, sig)``, ``("killpg", pgid, sig)`` or
  ``("cgroup_kill", path, 9)``, and the identities of the processes that received
  a pidfd signal in :attr:`FakeProcessTable.signalled`, so a test can assert "zero
  signals to unowned processes" in one line (Supervisor's ``DummyOptions.kills``).
  Attempts that fail (``ESRCH``) are not deliveries and are not recorded there;
  every call, failed or not, is in :attr:`FakeProcessTable.calls`.
* ``proc_readable = False`` makes ``/proc`` unreadable: reads raise
  :class:`~tether._os.ProcUnreadable` and environments read as
  :data:`~tether._os.UNREADABLE`, so fail-closed paths can be exercised.
* A process belongs to the boot it was added in. Changing :attr:`boot` simulates a
  reboot: processes of the old boot vanish from view (they cannot exist any more)
  until a test adds new ones.
* With ``kill_effect=True``, SIGKILL/SIGTERM delivered to a process turns it into a
  zombie (state ``Z``), so tests can check that a reap actually ended the tree.
"""

from __future__ import annotations

import contextlib
import errno
import signal
from dataclasses import dataclass, field
from typing import Any

from tether._os import (
    UNREADABLE,
    ProcessIdentity,
    ProcStat,
    ProcUnreadable,
    Unreadable,
)

__all__ = ["FakeProcess", "FakeProcessTable"]

# Signals that end a process in the fake when kill_effect is on; SIGTERM counts
# because the fake agents we model do not ignore it unless a test says so.
_LETHAL = frozenset({signal.SIGKILL, signal.SIGTERM})


@dataclass
class FakeProcess:
    """One fake process; ``serial`` tells apart two processes that shared a pid."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    starttime: int
    boot_id: str
    env: dict[bytes, bytes] | None
    env_readable: bool
    cmdline: list[bytes]
    state: str
    comm: bytes
    serial: int
    ignores: frozenset[int] = field(default_factory=frozenset)


class FakeProcessTable:
    """A :class:`~tether._os.ProcessTable` over in-memory processes; records every signal.

    Args:
        boot: the current fake boot id.
        pid_ns: the pid namespace we report (``None`` simulates "unknown").
        kill_effect: whether lethal signals turn their target into a zombie.
    """

    def __init__(
        self,
        *,
        boot: str = "boot-A",
        pid_ns: str | None = "pid:[4026531836]",
        kill_effect: bool = False,
    ) -> None:
        self.boot = boot
        self.pid_ns = pid_ns
        self.kill_effect = kill_effect
        #: Flip to False to make /proc unreadable (listing, stat, environ, children).
        self.proc_readable = True
        #: Delivered signals: ("pidfd", pid, sig), ("killpg", pgid, sig), ("cgroup_kill", path, 9).
        self.signals: list[tuple[str, int | str, int]] = []
        #: The identity of every process that received a pidfd signal, in order.
        self.signalled: list[ProcessIdentity] = []
        #: Every call made through the interface, with its arguments, failed or not.
        self.calls: list[tuple[object, ...]] = []
        self.cgroups: dict[str, list[int]] = {}
        #: Flip to False to make cgroup creation fail (no delegation).
        self.cgroups_writable = True
        #: Held exclusive locks: descriptor -> path.
        self.locks: dict[int, str] = {}
        #: Children reaped through reap_child(), in order.
        self.reaped: list[int] = []
        self._procs: dict[int, FakeProcess] = {}
        self._fds: dict[int, FakeProcess] = {}
        self._next_fd = 100
        self._serial = 0

    # -- building the world ------------------------------------------------------

    def add(
        self,
        pid: int,
        *,
        ppid: int = 1,
        pgid: int | None = None,
        sid: int | None = None,
        starttime: int,
        boot_id: str | None = None,
        env: dict[bytes, bytes] | None = None,
        env_readable: bool = True,
        cmdline: list[bytes] | None = None,
        state: str = "S",
        comm: bytes = b"fake",
        ignores: frozenset[int] = frozenset(),
    ) -> FakeProcess:
        """Create a process at ``pid`` (which must be free); ``pgid``/``sid`` default to ``pid``."""
        if pid in self._procs:
            raise ValueError(f"pid {pid} is taken; use reuse()")
        self._serial += 1
        proc = FakeProcess(
            pid=pid,
            ppid=ppid,
            pgid=pid if pgid is None else pgid,
            sid=pid if sid is None else sid,
            starttime=starttime,
            boot_id=self.boot if boot_id is None else boot_id,
            env=dict(env) if env is not None else {},
            env_readable=env_readable,
            cmdline=list(cmdline) if cmdline is not None else [comm],
            state=state,
            comm=comm,
            serial=self._serial,
            ignores=ignores,
        )
        self._procs[pid] = proc
        return proc

    def remove(self, pid: int) -> None:
        """The process exits and is reaped: its pid is free and its pidfds go stale."""
        del self._procs[pid]

    def reuse(self, pid: int, **kwargs: Any) -> FakeProcess:
        """Replace whatever runs at ``pid`` with an unrelated process (kwargs as for ``add``)."""
        self._procs.pop(pid, None)
        return self.add(pid, **kwargs)

    def set_state(self, pid: int, state: str) -> None:
        """Change a process's state letter, e.g. ``"Z"`` for an unreaped exit."""
        self._procs[pid].state = state

    def process(self, pid: int) -> FakeProcess | None:
        """The visible process at ``pid`` (test helper; not part of the interface)."""
        proc = self._procs.get(pid)
        if proc is None or proc.boot_id != self.boot:
            return None
        return proc

    def identity(self, pid: int) -> ProcessIdentity:
        """The identity of the visible process at ``pid`` (test helper)."""
        proc = self.process(pid)
        if proc is None:
            raise KeyError(pid)
        return ProcessIdentity(self.boot, pid, proc.starttime)

    def alive(self) -> list[ProcessIdentity]:
        """Identities of every visible, non-zombie process (test helper)."""
        return [
            ProcessIdentity(self.boot, p.pid, p.starttime)
            for p in self._procs.values()
            if p.boot_id == self.boot and p.state not in ("Z", "X")
        ]

    def _require_readable(self, what: str) -> None:
        if not self.proc_readable:
            raise ProcUnreadable(errno.EACCES, f"cannot read {what}")

    # -- the ProcessTable interface ------------------------------------------------

    def boot_id(self) -> str:
        self.calls.append(("boot_id",))
        return self.boot

    def pid_namespace(self) -> str | None:
        self.calls.append(("pid_namespace",))
        return self.pid_ns

    def stat(self, pid: int) -> ProcStat | None:
        self.calls.append(("stat", pid))
        self._require_readable(f"/proc/{pid}/stat")
        proc = self.process(pid)
        if proc is None:
            return None
        return ProcStat(
            pid=pid,
            ppid=proc.ppid,
            pgid=proc.pgid,
            sid=proc.sid,
            state=proc.state,
            starttime=proc.starttime,
            comm=proc.comm,
        )

    def environ_value(self, pid: int, key: bytes) -> bytes | Unreadable | None:
        self.calls.append(("environ_value", pid, key))
        proc = self.process(pid)
        if not self.proc_readable or proc is None or not proc.env_readable:
            return UNREADABLE
        if proc.state in ("Z", "X"):
            # Linux: a zombie has no mm, so its environ reads as empty.
            return None
        assert proc.env is not None
        return proc.env.get(key)

    def cmdline(self, pid: int) -> list[bytes] | None:
        self.calls.append(("cmdline", pid))
        self._require_readable(f"/proc/{pid}/cmdline")
        proc = self.process(pid)
        if proc is None:
            return None
        return [] if proc.state in ("Z", "X") else list(proc.cmdline)

    def children(self, pid: int) -> list[int]:
        self.calls.append(("children", pid))
        self._require_readable(f"/proc/{pid}/task")
        if self.process(pid) is None:
            return []
        return [p.pid for p in self._procs.values() if p.ppid == pid and p.boot_id == self.boot]

    def pids(self) -> list[int]:
        self.calls.append(("pids",))
        self._require_readable("/proc")
        return sorted(p.pid for p in self._procs.values() if p.boot_id == self.boot)

    def pidfd_open(self, pid: int) -> int:
        self.calls.append(("pidfd_open", pid))
        proc = self.process(pid)
        if proc is None:
            raise ProcessLookupError(errno.ESRCH, f"no process {pid}")
        fd = self._next_fd
        self._next_fd += 1
        # Bound to this object: a later reuse() of the pid does not redirect it.
        self._fds[fd] = proc
        return fd

    def pidfd_send_signal(self, pidfd: int, sig: int) -> None:
        self.calls.append(("pidfd_send_signal", pidfd, sig))
        proc = self._fds.get(pidfd)
        if proc is None:
            raise OSError(errno.EBADF, f"bad pidfd {pidfd}")
        if self._procs.get(proc.pid) is not proc or proc.boot_id != self.boot:
            # The process we opened has been reaped (and maybe its pid reused).
            raise ProcessLookupError(errno.ESRCH, f"pidfd {pidfd}: process {proc.pid} is gone")
        self._deliver(proc, sig)
        self.signals.append(("pidfd", proc.pid, sig))
        self.signalled.append(ProcessIdentity(proc.boot_id, proc.pid, proc.starttime))

    def close_fd(self, fd: int) -> None:
        self.calls.append(("close_fd", fd))
        if self._fds.pop(fd, None) is None:
            raise OSError(errno.EBADF, f"bad fd {fd}")

    @property
    def open_fds(self) -> list[int]:
        """pidfds opened and not yet closed (a test asserts none leak)."""
        return sorted(self._fds)

    def killpg(self, pgid: int, sig: int) -> None:
        self.calls.append(("killpg", pgid, sig))
        members = [
            p
            for p in self._procs.values()
            if p.pgid == pgid and p.boot_id == self.boot and p.state not in ("Z", "X")
        ]
        if not members:
            raise ProcessLookupError(errno.ESRCH, f"no process group {pgid}")
        for proc in members:
            self._deliver(proc, sig)
        self.signals.append(("killpg", pgid, sig))

    def cgroup_kill(self, path: str) -> None:
        self.calls.append(("cgroup_kill", path))
        if path not in self.cgroups:
            raise FileNotFoundError(errno.ENOENT, f"no cgroup {path}")
        for pid in self.cgroups[path]:
            proc = self.process(pid)
            if proc is not None:
                self._deliver(proc, signal.SIGKILL)
        self.signals.append(("cgroup_kill", path, int(signal.SIGKILL)))

    def cgroup_procs(self, path: str) -> list[int]:
        self.calls.append(("cgroup_procs", path))
        return [
            pid
            for pid in self.cgroups.get(path, [])
            if (p := self.process(pid)) is not None and p.state not in ("Z", "X")
        ]

    def cgroup_populated(self, path: str) -> bool | None:
        self.calls.append(("cgroup_populated", path))
        if path not in self.cgroups:
            return None
        return bool(self.cgroup_procs(path))

    def cgroup_create(self, parent: str, name: str) -> str:
        self.calls.append(("cgroup_create", parent, name))
        if not self.cgroups_writable:
            raise PermissionError(errno.EPERM, f"cannot create a cgroup under {parent}")
        path = f"{parent}/{name}"
        if path in self.cgroups:
            raise FileExistsError(errno.EEXIST, path)
        self.cgroups[path] = []
        return path

    def cgroup_remove(self, path: str) -> bool:
        self.calls.append(("cgroup_remove", path))
        if path not in self.cgroups:
            return True
        if self.cgroup_procs(path):
            return False  # EBUSY: still populated
        del self.cgroups[path]
        return True

    def child_handle(self, pid: int) -> int:
        self.calls.append(("child_handle", pid))
        return self.pidfd_open(pid)

    def reap_child(self, handle: int) -> int | None:
        self.calls.append(("reap_child", handle))
        proc = self._fds.pop(handle, None)
        if proc is None:
            raise OSError(errno.EBADF, f"bad handle {handle}")
        if self._procs.get(proc.pid) is not proc:
            return None  # reaped by someone else
        del self._procs[proc.pid]
        self.reaped.append(proc.pid)
        return 0 if proc.state in ("Z", "X") else None

    def signal_child(self, handle: int, sig: int) -> None:
        self.calls.append(("signal_child", handle, sig))
        with contextlib.suppress(ProcessLookupError):
            self.pidfd_send_signal(handle, sig)

    def try_lock_exclusive(self, path: str) -> int | None:
        self.calls.append(("try_lock_exclusive", path))
        if path in self.locks.values():
            return None
        fd = self._next_fd
        self._next_fd += 1
        self.locks[fd] = path
        return fd

    def release_lock(self, fd: int) -> None:
        """Close a lock descriptor (test helper: the real one is ``os.close``)."""
        del self.locks[fd]

    def _deliver(self, proc: FakeProcess, sig: int) -> None:
        if self.kill_effect and sig in _LETHAL and sig not in proc.ignores:
            proc.state = "Z"
