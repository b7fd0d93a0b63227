"""The witnesses the finalizer checks after the keeper has done -- or failed to do -- its job.

Used by :class:`tether.supervise.finalizer.Finalizer` (issue 20, items 1 and 2); plain
functions over the run's lease, the process table and the stop policy, no state:

* **a keeper that died before the run ended** is an escape attempt. Its tree was
  re-parented to us, the subreaper of last resort (:mod:`.adoption`): each adopted
  process is recorded as a member, ended (TERM, grace, KILL) and reaped, and the run
  ends ``ownership-escape`` even if nothing was left to end;
* **the third witness**: live processes that carry the run's lease marker. A marker
  carrier is only a candidate: one that is not a proven member (:mod:`.proof`) is
  reported as ``unproven`` and never signalled. The supervisor's sweep kills only the
  proven ones, by verified identity, through pidfds;
* **a recorded member still alive** after the keeper's proof (it moved out of the
  keeper's reach while the keeper lived: impossible by the kernel's rules for a
  subreaper, but a record is cheap to check) is reported, ended by its identity
  (:mod:`.members`) and counted; one that cannot be ended is a survivor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from typing import Any

from tether import _os
from tether.supervise import adoption, members
from tether.supervise.proof import split_run_claims
from tether.supervise.run_lease import RunLease
from tether.supervise.verify import marked_survivors, marker_for, signal_verified

__all__ = ["end_after_keeper_loss", "end_recorded_members", "marker_claims", "sweep_marker"]

_SWEEP_ROUNDS = 50  # x 10 ms: how long the supervisor's sweep keeps killing carriers


async def end_after_keeper_loss(
    lease: RunLease,
    table: _os.ProcessTable,
    grace: float,
    keeper_report: dict[str, Any] | None,
    *,
    keeper_gone_first: bool,
    root_pid: int | None,
    keeper_pid: int | None,
) -> tuple[list[int], bool]:
    """``(adopted pids ended, whether the keeper died before the run ended)``."""
    if keeper_report is not None:
        return [], False
    keeper_lost = keeper_gone_first and root_pid is not None
    if keeper_lost:
        lease.log(
            "keeper_lost",
            logging.WARNING,
            reason="ownership-escape",
            why="the keeper died before its run ended",
            keeper_pid=keeper_pid,
        )
    found = await adoption.end_adopted(
        table, lambda new: lease.record_members(list(new), "adopted", table.boot_id), grace
    )
    return found, keeper_lost


async def end_recorded_members(
    lease: RunLease, table: _os.ProcessTable, grace: float
) -> tuple[list[int], list[int]]:
    """``(members found alive and ended, members still alive)`` of this run."""
    registry = lease.registry
    try:
        recorded = registry.members(lease_id=lease.lease_id)
    except Exception:
        return [], []
    live, gone = members.split_alive(table, recorded)
    with contextlib.suppress(Exception):
        registry.forget_members(gone)
    if not live:
        return [], []
    left = await asyncio.to_thread(members.end_blocking, table, live, grace)
    with contextlib.suppress(Exception):
        registry.forget_members([m for m in live if m not in left])
    return [m.pid for m in live if m not in left], [m.pid for m in left]


def marker_claims(
    table: _os.ProcessTable, lease_id: str, cgroup: str | None
) -> tuple[list[int], list[int]]:
    """Live processes that carry this run's lease marker (the third witness), split
    into (proven members, unproven claimants) -- see :mod:`.proof`.

    The anchor is this supervisor: the keeper is its child, so every member lives
    below it while the keeper does (and after, when we are the subreaper that
    adopted the keeper's orphans); the run's cgroup proves the rest.
    """
    try:
        pids = marked_survivors(table, marker_for(lease_id), exclude=[os.getpid()])
        return split_run_claims(table, pids, anchors=[os.getpid()], cgroup_path=cgroup or None)
    except _os.ProcUnreadable:
        return [], []  # /proc unreadable: the keeper's ECHILD and the cgroup still stand


async def sweep_marker(table: _os.ProcessTable, lease_id: str, cgroup: str | None) -> None:
    """Supervisor-side sweep: the keeper is gone, so kill verified marker carriers."""
    if cgroup:
        with contextlib.suppress(OSError):
            table.cgroup_kill(cgroup)
    boot_id = table.boot_id()
    marker = marker_for(lease_id)
    for _ in range(_SWEEP_ROUNDS):
        pids, _unproven = marker_claims(table, lease_id, cgroup)  # never the unproven ones
        if not pids:
            return
        for pid in pids:
            st = table.stat(pid)
            if st is None:
                continue
            ident = _os.ProcessIdentity(boot_id, pid, st.starttime)
            signal_verified(table, ident, signal.SIGKILL, marker=marker)
        await asyncio.sleep(0.01)
