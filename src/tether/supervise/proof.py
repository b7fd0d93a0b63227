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


def split_lease_claims(
    table: ProcessTable,
    candidates: Iterable[int],
    *,
    root_pid: int | None,
    keeper: ProcessIdentity | None,
    cgroup_path: str | None,
) -> tuple[list[int], list[int]]:
    """:func:`split_claims` for a lease: the anchors are its root (pass it only when it
    verified ``OWNED``) and its verified live keeper; the cgroup is the lease's own."""
    anchors = [p for p in (root_pid, keeper.pid if keeper else None) if p is not None]
    members: list[int] = []
    if cgroup_path is not None:
        with contextlib.suppress(OSError):
            members = table.cgroup_procs(cgroup_path)
    return split_claims(table, candidates, anchors=anchors, cgroup_members=members)
