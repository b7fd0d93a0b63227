"""The platform interface: everything Tether asks of the operating system about processes.

Theory of operation
-------------------
Supervision logic (``tether.supervise``) never touches ``/proc``, ``os.kill`` or the
cgroup filesystem itself. It talks to a :class:`ProcessTable`, a Protocol with one
real implementation per platform (``_linux.py``, chosen once when this module is
imported, as psutil does) and one recording fake (``_fake.py``) for tests. The
split buys two things:

* every ownership decision becomes a plain unit test against a fake table whose
  signals are recorded, so "we never signalled a foreign pid" is an assertion, and
* foreign errors (``OSError`` and friends) are translated in exactly one place, the
  real table, into the few outcomes policy code reasons about:

  - ``None`` from :meth:`ProcessTable.stat`: the process does not exist;
  - :class:`ProcUnreadable`: we cannot tell (``/proc`` unreadable, permission
    denied). Policy code must *fail closed* on it: never signal, mark ``lost``;
  - :data:`UNREADABLE` from :meth:`ProcessTable.environ_value`: the marker cannot be
    checked; again fail closed;
  - ``ProcessLookupError`` from the pidfd calls: the process is gone (``ESRCH``).

A process's identity is ``(boot_id, pid, starttime)`` (process-ownership.md §1.6):
a pid alone wraps within seconds at ``pid_max`` 32768, and starttime alone collides
at 10 ms resolution, so only the triple names one process. The pid namespace is
recorded beside it; if either side's namespace is unknown or differs, a pid number
means nothing to us and verification fails closed.
"""

from __future__ import annotations

import enum
import os
import sys
from dataclasses import dataclass
from typing import Final, Protocol

__all__ = [
    "UNREADABLE",
    "ProcStat",
    "ProcUnreadable",
    "ProcessIdentity",
    "ProcessTable",
    "Unreadable",
    "cgroup_writable",
    "current",
    "environ_lookup",
    "find_cgroup2_mount",
    "identity_of",
    "parse_stat",
]


class ProcUnreadable(OSError):
    """``/proc`` (or one process's entry in it) could not be read: ownership is unknown.

    It subclasses ``OSError`` so code that already guards OS calls keeps working, but
    policy code catches it by name: "unknown" must never be mistaken for "gone".
    """


class Unreadable(enum.Enum):
    """The type of the :data:`UNREADABLE` sentinel (an enum so mypy can narrow on ``is``)."""

    UNREADABLE = "unreadable"


#: Returned by :meth:`ProcessTable.environ_value` when the environment cannot be read
#: (permission denied, or the process vanished mid-read). Distinct from ``None``,
#: which means "readable, and the key is absent".
UNREADABLE: Final = Unreadable.UNREADABLE


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` that supervision needs.

    ``state`` is the one-letter state (``R``, ``S``, ``D``, ``Z``...), ``starttime`` is
    field 22 in clock ticks since boot, and ``comm`` is the raw command name (at most
    15 bytes, not necessarily UTF-8, possibly containing spaces and parentheses).
    """

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    starttime: int
    comm: bytes

    @property
    def is_zombie(self) -> bool:
        """Whether the process has exited and only its unreaped entry pins the pid."""
        # X (dead) is transient but equally "not alive"; it can show up mid-reap.
        return self.state in ("Z", "X")


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """One process, named unambiguously: ``(boot_id, pid, starttime)``."""

    boot_id: str
    pid: int
    starttime: int


class ProcessTable(Protocol):
    """What supervision may ask of the OS. Implementations: ``_linux``, ``_fake``."""

    def boot_id(self) -> str:
        """The current boot's id (``/proc/sys/kernel/random/boot_id``)."""
        ...

    def pid_namespace(self) -> str | None:
        """Our pid namespace (``readlink /proc/self/ns/pid``), or ``None`` if unknown."""
        ...

    def stat(self, pid: int) -> ProcStat | None:
        """The process's stat, or ``None`` if there is no such process.

        Raises:
            ProcUnreadable: ``/proc`` cannot be read, so existence is unknown.
        """
        ...

    def environ_value(self, pid: int, key: bytes) -> bytes | Unreadable | None:
        """The value of one environment key as of the process's exec.

        Only that key is ever returned: the environment holds secrets, so the whole
        block is never returned or logged. ``None`` means readable and absent;
        :data:`UNREADABLE` means permission denied or the process vanished mid-read.
        """
        ...

    def cmdline(self, pid: int) -> list[bytes] | None:
        """The argv (``[]`` for kernel threads and zombies), or ``None`` if gone.

        Raises:
            ProcUnreadable: the entry exists but cannot be read.
        """
        ...

    def children(self, pid: int) -> list[int]:
        """Direct children, from ``/proc/<pid>/task/*/children`` (``[]`` if gone).

        Raises:
            ProcUnreadable: ``/proc`` cannot be read.
        """
        ...

    def pids(self) -> list[int]:
        """Every pid visible in our namespace.

        Raises:
            ProcUnreadable: the listing cannot be read.
        """
        ...

    def pidfd_open(self, pid: int) -> int:
        """A pidfd for ``pid``. Raises ``ProcessLookupError`` if it is gone."""
        ...

    def pidfd_send_signal(self, pidfd: int, sig: int) -> None:
        """Signal through a pidfd. Raises ``ProcessLookupError`` if that process is gone."""
        ...

    def close_fd(self, fd: int) -> None:
        """Close a pidfd."""
        ...

    def killpg(self, pgid: int, sig: int) -> None:
        """Signal a process group. Raises ``ProcessLookupError`` if the group is empty."""
        ...

    def cgroup_kill(self, path: str) -> None:
        """SIGKILL every member of the cgroup at ``path`` (write ``1`` to ``cgroup.kill``)."""
        ...

    def cgroup_procs(self, path: str) -> list[int]:
        """The pids in ``<path>/cgroup.procs`` (``[]`` if the cgroup is gone)."""
        ...

    def cgroup_populated(self, path: str) -> bool | None:
        """``populated`` from ``<path>/cgroup.events``; ``None`` if it cannot be read."""
        ...

    def cgroup_create(self, parent: str, name: str) -> str:
        """Create the run's cgroup ``<parent>/<name>`` (and ``parent``); return its path.

        Raises:
            OSError: it cannot be created (no delegation, no such hierarchy).
        """
        ...

    def cgroup_remove(self, path: str) -> bool:
        """Remove an empty cgroup; ``True`` if it is gone (or was), ``False`` if still busy."""
        ...

    # -- our own children (the keeper) ---------------------------------------------

    def child_handle(self, pid: int) -> int:
        """A pollable handle on our own unreaped child ``pid`` (Linux: a pidfd).

        It becomes readable when the child exits, so an event loop can watch it
        (``add_reader``) without a child-watcher thread; exact because an unreaped
        child's pid cannot be recycled.
        """
        ...

    def reap_child(self, handle: int) -> int | None:
        """Reap the exited child behind ``handle`` and close it; its status, ``None`` if
        someone else reaped it first."""
        ...

    def signal_child(self, handle: int, sig: int) -> None:
        """Signal our child through its handle (no-op if it is already gone)."""
        ...

    # -- locks -----------------------------------------------------------------------

    def try_lock_exclusive(self, path: str) -> int | None:
        """Open ``path`` (0600, created) and take an exclusive lock that dies with us.

        Returns the open descriptor holding the lock (close it to release), or
        ``None`` if another process holds it. Linux: ``flock(LOCK_EX | LOCK_NB)``,
        released by the kernel when the holder exits, however it exits.
        """
        ...


def parse_stat(pid: int, raw: bytes) -> ProcStat:
    """Parse the bytes of ``/proc/<pid>/stat``.

    ``comm`` is wrapped in parentheses but may itself contain spaces, ``(``, ``)``
    and even ``) (``, so we split after the *last* ``)``: everything after it is
    space-separated numbers and the state letter. Raises ``ValueError`` on bytes that
    do not look like a stat line.
    """
    # The first "(" is safe (the pid before it is digits); the last ")" is the only
    # reliable end of comm, since comm may contain ")" itself (measured: "we) ird (x").
    open_paren = raw.find(b"(")
    close_paren = raw.rfind(b")")
    if open_paren < 0 or close_paren < open_paren:
        raise ValueError(f"malformed /proc/{pid}/stat: no (comm)")
    comm = raw[open_paren + 1 : close_paren]
    # fields[0] is field 3 (state); field N of proc(5) is fields[N - 3].
    fields = raw[close_paren + 1 :].split()
    if len(fields) < 20:
        raise ValueError(f"malformed /proc/{pid}/stat: {len(fields)} fields after comm")
    return ProcStat(
        pid=pid,
        ppid=int(fields[1]),
        pgid=int(fields[2]),
        sid=int(fields[3]),
        state=fields[0].decode("ascii", "replace"),
        starttime=int(fields[19]),
        comm=comm,
    )


def environ_lookup(raw: bytes, key: bytes) -> bytes | None:
    """The value of ``key`` in the bytes of ``/proc/<pid>/environ``, or None if absent.

    getenv's rule: the first ``key=`` entry wins, and only a whole entry's name counts
    (``XKEY=`` is not ``KEY=``). Found with two ``find`` calls rather than a split into
    every entry: the close's marker scan reads the environment of every process on the
    host, and a split made that scan's Python work grow with every entry of every
    process (issue 23).
    """
    prefix = key + b"="
    if raw.startswith(prefix):
        start = len(prefix)
    else:
        at = raw.find(b"\0" + prefix)
        if at < 0:
            return None
        start = at + 1 + len(prefix)
    end = raw.find(b"\0", start)
    return raw[start:] if end < 0 else raw[start:end]


def identity_of(
    table: ProcessTable, pid: int, *, include_zombies: bool = False
) -> ProcessIdentity | None:
    """The identity of a live ``pid``, or ``None`` if there is no such live process.

    Zombies count as gone unless ``include_zombies``: an exited process pins its pid
    but can no longer be owned in any useful sense.

    Raises:
        ProcUnreadable: existence cannot be determined.
    """
    st = table.stat(pid)
    if st is None or (st.is_zombie and not include_zombies):
        return None
    return ProcessIdentity(boot_id=table.boot_id(), pid=pid, starttime=st.starttime)


def _unescape_mountinfo(field: bytes) -> bytes:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal (proc(5)).
    out = bytearray()
    i = 0
    while i < len(field):
        if field[i : i + 1] == b"\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(int(field[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return bytes(out)


def find_cgroup2_mount(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """Where the cgroup v2 hierarchy is mounted, or ``None`` if it is not (or unreadable).

    Hybrid hosts (ours) mount it at ``/sys/fs/cgroup/unified``; pure v2 hosts at
    ``/sys/fs/cgroup``. We look for fstype ``cgroup2`` rather than guessing paths.
    """
    try:
        with open(mountinfo, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        # "<id> <parent> <maj:min> <root> <mount point> <opts> [optional...] - <fstype> ..."
        head, sep, tail = line.partition(b" - ")
        if not sep:
            continue
        fstype = tail.split(b" ", 1)[0]
        parts = head.split(b" ")
        if fstype == b"cgroup2" and len(parts) >= 5:
            return os.fsdecode(_unescape_mountinfo(parts[4]))
    return None


def cgroup_writable(mount: str) -> tuple[bool, str]:
    """Probe whether we can create per-session cgroups under ``mount``; never raises.

    Returns ``(ok, reason)``. The probe creates a uniquely named child, checks that
    it has ``cgroup.kill`` (Linux 5.14; without it a cgroup cannot be our atomic
    sweep), and removes it. Capabilities are probed, never inferred from the uid.
    """
    # A unique name so two probing processes never rmdir each other's probe.
    probe = os.path.join(mount, f"tether-probe-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.mkdir(probe)
    except OSError as exc:
        return False, f"cannot create a cgroup under {mount}: {exc.strerror or exc}"
    try:
        if not os.path.exists(os.path.join(probe, "cgroup.kill")):
            return False, f"{mount} is not a cgroup v2 hierarchy with cgroup.kill"
        return True, f"cgroup v2 at {mount} is writable"
    finally:
        try:
            os.rmdir(probe)
        except OSError:
            # An empty probe cgroup should always be removable; if not, report nothing
            # more: the verdict above already stands and we promised never to raise.
            pass


def current() -> ProcessTable:
    """The real process table for this platform (chosen once, at import).

    Raises:
        NotImplementedError: Tether's process ownership is Linux-only.
    """
    if _CURRENT is None:
        raise NotImplementedError(f"process ownership is not implemented on {sys.platform}")
    return _CURRENT


# Chosen once at import, psutil style: the Linux module needs the types above, so it
# is imported only after they exist.
_CURRENT: ProcessTable | None
if sys.platform.startswith("linux"):
    from tether._os._linux import LinuxProcessTable

    _CURRENT = LinuxProcessTable()
else:  # pragma: no cover - CI is Linux
    _CURRENT = None
