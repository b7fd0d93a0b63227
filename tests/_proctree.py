"""Test-side view of the processes a test started, read from /proc in-process.

The test session makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), so every
process any test starts -- detached owners, keepers, agents, `setsid` and
double-forked grandchildren -- stays our descendant even after its parent dies. A
walk of ``/proc/<pid>/task/*/children`` from our own pid therefore finds everything a
test left behind, without matching on names or command lines.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2 :].split()


def _stat(pid: int) -> tuple[str, int] | None:
    fields = _fields(pid)
    return None if fields is None else (fields[0].decode(), int(fields[19]))


def proc_stat(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, session id, start time) of ``pid``; None once it is gone or a zombie."""
    fields = _fields(pid)
    if fields is None or fields[0] == b"Z":
        return None
    return int(fields[1]), int(fields[3]), int(fields[19])


def cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


def _children(pid: int) -> list[int]:
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


def descendants(root: int | None = None) -> dict[int, tuple[str, int]]:
    """Every descendant of ``root`` (default: us): pid -> (state, starttime)."""
    root = os.getpid() if root is None else root
    seen: dict[int, tuple[str, int]] = {}
    stack = _children(root)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        st = _stat(pid)
        if st is None:
            continue
        seen[pid] = st
        stack.extend(_children(pid))
    return seen


def reap_zombie_children() -> None:
    """Reap our own exited children (never blocks, never touches live ones)."""
    for pid, (state, _) in descendants().items():
        if state == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def live_descendants() -> dict[int, tuple[str, int]]:
    return {p: s for p, s in descendants().items() if s[0] != "Z"}


def wait_for_no_new_descendants(
    before: set[tuple[int, int]], timeout: float
) -> dict[int, tuple[str, int]]:
    """Wait until no descendant born during the test is alive; return the survivors."""
    deadline = time.monotonic() + timeout
    while True:
        reap_zombie_children()
        alive = {p: s for p, s in live_descendants().items() if (p, s[1]) not in before}
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)


def kill_verified(survivors: dict[int, tuple[str, int]]) -> None:
    """SIGKILL survivors we proved are ours: still our descendant, same starttime."""
    current = descendants()
    for pid, (_, starttime) in survivors.items():
        st = current.get(pid)
        if st is None or st[1] != starttime:
            continue  # gone or a different process now: never signal it
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if _stat(pid) == st or (_stat(pid) or ("", -1))[1] == starttime:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)
    time.sleep(0.05)
    reap_zombie_children()


def marker_carriers(lease_id: str) -> list[int]:
    """Live processes whose environment carries ``TETHER_LEASE_ID=<lease_id>``.

    The product's own witness (:func:`tether.supervise.verify.marked_survivors`), so
    tests prove extinction with the same scan the supervisor trusts.
    """
    from tether import _os
    from tether.supervise.verify import marked_survivors, marker_for

    return marked_survivors(_os.current(), marker_for(lease_id), exclude=[os.getpid()])


def is_alive(pid: int, starttime: int) -> bool:
    """Is that very process (pid and starttime) still running? Zombies are dead."""
    st = _stat(pid)
    return st is not None and st[0] != "Z" and st[1] == starttime


def live_descendants_of(root: int) -> dict[int, tuple[str, int]]:
    """The live descendants of one process we started (not including it)."""
    return {p: s for p, s in descendants(root).items() if s[0] != "Z"}
