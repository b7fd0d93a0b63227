"""Membership proof: which processes that *claim* a run are proven members of it.

Theory of operation
-------------------
Every process of a run carries ``TETHER_LEASE_ID=<lease>`` in its environment, and a
``/proc`` scan for that marker is how survivors are found. But the environment is only
a claim: anyone can start ``env TETHER_LEASE_ID=<lease> setsid sleep 3600`` next to a
session, and a scan alone cannot tell that process from an escaped member (issue 20,
item 2). So the marker only nominates candidates; a candidate is signalled only when
one of the existing proofs holds:

* it is, or descends (along ``ppid`` links) from, an *anchor*: a live process whose
  identity was verified -- the run's keeper (a child subreaper: whatever the agent
  starts stays below it), the run's root, or the supervisor itself (the keeper's
  parent; when it is a subreaper it adopts the keeper's orphans);
* it is in the run's cgroup, which was created for this run alone.

A candidate with neither is *unproven*: it is reported (the close result, the log,
``tether reap``) and never signalled. Once recorded run membership exists (the pid and
starttime of a process observed inside a run), it becomes one more proof here.

Sans-IO: reads the live state through a :class:`~tether._os.ProcessTable` only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable

from tether._os import UNREADABLE, ProcessIdentity, ProcessTable

__all__ = [
    "UNPROVEN_WHY",
    "descends_from",
    "split_claims",
    "split_lease_claims",
    "split_run_claims",
    "verified_keeper",
]

UNPROVEN_WHY = "carry the lease's marker but are not proven members of its run: never signalled"

_MAX_DEPTH = 4096  # a ppid chain longer than this is not a real process tree


def descends_from(table: ProcessTable, pid: int, anchors: Collection[int]) -> bool:
    """Whether ``pid`` is one of ``anchors`` or below one of them along ``ppid`` links.

    A pid that vanishes mid-walk proves nothing (``False``). Raises ``ProcUnreadable``
    like ``table.stat``.
    """
    seen: set[int] = set()
    cur = pid
    for _ in range(_MAX_DEPTH):
        if cur in anchors:
            return True
        if cur <= 1 or cur in seen:
            return False
        seen.add(cur)
        st = table.stat(cur)
        if st is None:
            return False
        cur = st.ppid
    return False


def split_claims(
    table: ProcessTable,
    candidates: Iterable[int],
    *,
    anchors: Collection[int],
    cgroup_members: Collection[int] = (),
) -> tuple[list[int], list[int]]:
    """Split marker carriers into ``(proven, unproven)``, each in the input order.

    Proven: in ``cgroup_members``, or :func:`descends_from` one of ``anchors`` (verified
    live processes of the run, see the module docstring). Everything else is unproven.
    """
    proven: list[int] = []
    unproven: list[int] = []
    for pid in candidates:
        if pid in cgroup_members or descends_from(table, pid, anchors):
            proven.append(pid)
        else:
            unproven.append(pid)
    return proven, unproven


def verified_keeper(
    table: ProcessTable,
    boot_id: str,
    pid: int | None,
    starttime: int | None,
    marker: tuple[bytes, bytes],
) -> ProcessIdentity | None:
    """The run's keeper as a verified identity, if that very process still runs.

    Same pid and starttime as the lease recorded, not a zombie, and its environment
    carries the lease's marker (the keeper is started with it). ``None`` otherwise.
    """
    if pid is None or starttime is None or pid <= 1:
        return None
    st = table.stat(pid)
    if st is None or st.is_zombie or st.starttime != starttime:
        return None
    have = table.environ_value(pid, marker[0])
    if have is UNREADABLE or have != marker[1]:
        return None
    return ProcessIdentity(boot_id=boot_id, pid=pid, starttime=starttime)


def split_run_claims(
    table: ProcessTable,
    candidates: Iterable[int],
    *,
    anchors: Collection[int],
    cgroup_path: str | None,
) -> tuple[list[int], list[int]]:
    """:func:`split_claims` against the run's cgroup as it is *after* the candidates were
    pinned, leaving out every candidate that exited meanwhile.

    A marker scan and a ``cgroup.procs`` read are two moments: a member that exits
    between them (a ``bash`` loop's ``sleep 0.1``, a double fork's intermediate) is in
    the scan but no longer in the cgroup, and read as an *unproven claimant* although it
    is simply gone -- which turned a reaped-and-closed lease into a report of unproven
    pids, and a lease with nothing else left into ``lost``. So we pin each candidate's
    starttime first (a dead one is dropped: nothing to signal, nothing claiming), read
    the cgroup after that (a live process leaves a cgroup only by an explicit migration,
    so a member still alive at the read is listed), and drop an unproven candidate that
    is no longer that very live process. Neither list gains a pid the scan did not name.
    Both keep the input order.
    """
    pinned: dict[int, int] = {}
    for pid in candidates:
        st = table.stat(pid)
        if st is not None and not st.is_zombie:
            pinned[pid] = st.starttime
    members: list[int] = []
    if cgroup_path is not None:
        with contextlib.suppress(OSError):
            members = table.cgroup_procs(cgroup_path)
    proven, unproven = split_claims(table, pinned, anchors=anchors, cgroup_members=members)
    gone = {pid for pid in unproven if not _still_running(table, pid, pinned[pid])}
    # A walk is broken when an ancestor is reaped under it (a double fork's intermediate);
    # its orphan was reparented before that (to a subreaper anchor, or to init), so one
    # more walk from a still-running claimant settles it.
    late = {pid for pid in unproven if pid not in gone and descends_from(table, pid, anchors)}
    if late:
        proven = [pid for pid in pinned if pid in late or pid in proven]
    return proven, [pid for pid in unproven if pid not in gone and pid not in late]


def _still_running(table: ProcessTable, pid: int, starttime: int) -> bool:
    st = table.stat(pid)
    return st is not None and not st.is_zombie and st.starttime == starttime


def split_lease_claims(
    table: ProcessTable,
    candidates: Iterable[int],
    *,
    root_pid: int | None,
    keeper: ProcessIdentity | None,
    cgroup_path: str | None,
) -> tuple[list[int], list[int]]:
    """:func:`split_run_claims` for a lease: the anchors are its root (pass it only when it
    verified ``OWNED``) and its verified live keeper; the cgroup is the lease's own."""
    anchors = [p for p in (root_pid, keeper.pid if keeper else None) if p is not None]
    return split_run_claims(table, candidates, anchors=anchors, cgroup_path=cgroup_path)
