"""The keeper's platform layer on Linux: prctl, pidfds, waitid and /proc, nothing else.

Why the keeper has its own: it starts before every agent, so its imports are on the
cold path of every run, and :mod:`tether._os` (dataclasses, enum, typing) costs more
to import than the whole keeper. This module is the same kind of boundary -- every
Linux call the keeper makes is here, under a name that says what it is *for* -- with
only the standard library modules the keeper already loads. A port of the keeper is
one new module with these functions (``docs/platforms.md`` maps each one); the
keeper's policy (``keeper.py``) does not change.

/proc parsing follows the one rule of ``tether._os.parse_stat``: comm may hold ``)``,
so fields are split after the *last* ``)``.
"""

from __future__ import annotations

import errno
import os

from tether._libc import function

TYPE_CHECKING = False  # mypy reads the name
if TYPE_CHECKING:
    import signal
else:  # the C module: `signal` wraps it in enums (enum, functools, collections)
    import _signal as signal

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


_libc_prctl = function("prctl")


def _prctl(option: int, arg: int) -> None:
    if _libc_prctl is None:
        raise OSError(errno.ENOSYS, "prctl is not in this C library")
    if _libc_prctl(option, arg, 0, 0, 0) != 0:
        # _ctypes alone cannot read errno; the kernel refuses these two only for an
        # option it does not know (EINVAL).
        raise OSError(errno.EINVAL, f"prctl({option}) failed")


def become_subreaper() -> None:
    """Orphaned descendants are reparented to us, never to init (PR_SET_CHILD_SUBREAPER)."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int) -> None:
    """Receive ``sig`` when our parent (the forking *thread*) dies (PR_SET_PDEATHSIG)."""
    _prctl(PR_SET_PDEATHSIG, sig)


def watch_process(pid: int) -> int | None:
    """A pollable handle that becomes readable when ``pid`` exits (a pidfd), or None."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def read_stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, pgid, sid, starttime) of pid, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[2]), int(fields[3]), int(fields[19])


def children(pid: int) -> list[int]:
    """Direct children of pid, from /proc/<pid>/task/*/children."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except OSError:
            continue
    return out


def cgroup_of(pid: int) -> str | None:
    """The cgroup v2 path of pid (the ``0::`` line of /proc/<pid>/cgroup), or None."""
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(b"0::"):
            return line[3:].decode(errors="replace")
    return None


def signal_exact(pid: int, starttime: int, sig: int) -> bool:
    """Signal pid through a pidfd opened first and checked against ``starttime`` after.

    ``False`` if it is gone, or its pid moved on to another process in between.
    """
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        st = read_stat(pid)
        if st is None or st[3] != starttime:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def signal_group(pgid: int, sig: int) -> bool:
    """killpg; the caller holds the group leader unreaped, so the pgid cannot be recycled."""
    try:
        os.killpg(pgid, sig)
    except OSError:
        return False
    return True


def exit_status_keep_zombie(pid: int) -> tuple[int | None, int | None] | None:
    """(code, signal) if our child pid has exited, without reaping it (WNOWAIT keeps its
    pid, and so its process group, pinned); None while it runs."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None:
        return None
    if info.si_code == os.CLD_EXITED:
        return (info.si_status, None)
    return (None, info.si_status)


def enter_cgroup(path: str) -> None:
    """Move the calling process into the cgroup at ``path`` (between fork and exec)."""
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write("0")


def cgroup_members(path: str) -> list[int]:
    """The pids in the cgroup (``[]`` if it is gone or unreadable)."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def cgroup_kill(path: str) -> bool:
    """SIGKILL every member of the cgroup at once (``cgroup.kill``, Linux 5.14)."""
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as f:
            f.write("1")
    except OSError:
        return False
    return True


def cgroup_remove(path: str) -> str:
    """rmdir the cgroup: ``"gone"``, ``"busy"`` (retry: the kernel frees it just after
    the last exit) or ``"failed"``."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return "gone"
    except OSError as exc:
        return "busy" if exc.errno == errno.EBUSY else "failed"
    return "gone"
