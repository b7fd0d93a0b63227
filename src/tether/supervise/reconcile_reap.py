"""Carrying out one ``Reap`` of :mod:`tether.supervise.reconcile`: signal a stale
lease's proven members, TERM -> grace -> KILL, and wait for their extinction.

Every signal goes through :func:`~tether.supervise.verify.signal_verified` (pidfd,
re-check, marker). A process found on the way that carries the lease's marker is
signalled only if it is proven a member (:mod:`tether.supervise.proof`); the others
are returned as ``unproven``.
"""

from __future__ import annotations

import contextlib
import signal
import time

from tether import _os, metrics
from tether.supervise.proof import split_run_claims
from tether.supervise.reconcile_plan import Reap
from tether.supervise.verify import marked_survivors, marker_for, signal_verified

__all__ = ["KEEPER_SLACK_S", "KILL_WAIT_S", "execute_reap"]

KILL_WAIT_S = 2.0
KEEPER_SLACK_S = 2.0  # beyond the grace, how long a live keeper gets to end its own tree


def _alive(table: _os.ProcessTable, ident: _os.ProcessIdentity) -> bool:
    st = table.stat(ident.pid)
    return st is not None and not st.is_zombie and st.starttime == ident.starttime


def execute_reap(
    table: _os.ProcessTable, action: Reap, grace: float, exclude: list[int]
) -> tuple[bool, int, list[int]]:
    """TERM -> grace -> KILL the planned identities; returns (extinct, signalled, unproven).

    With the run's keeper alive (``action.keeper``), it alone is asked (one TERM): it
    gives its tree TERM -> grace -> KILL once per process and proves ECHILD, so every
    member gets one TERM, not ours and then the keeper's (issue 20, item 6). What is
    left after a grace and a slack is killed here as usual. ``unproven``: marker
    carriers found on the way that are not proven members; never signalled.
    """
    marker = marker_for(action.lease_id)
    signalled = 0
    delegated = action.keeper is not None and signal_verified(
        table, action.keeper, signal.SIGTERM, marker=marker
    )
    if delegated:
        signalled += 1
    else:
        signalled += _term_all(table, action, marker)
    deadline = time.monotonic() + grace + (KEEPER_SLACK_S if delegated else 0.0)
    remaining = list(action.pids_children_first)
    while remaining and time.monotonic() < deadline:
        remaining = [i for i in remaining if _alive(table, i)]
        if remaining:
            time.sleep(0.01)
    if remaining or (action.cgroup_path and table.cgroup_populated(action.cgroup_path)):
        metrics.incr("run_cleanup_kill_total", mode="cgroup" if action.cgroup_path else "pidfd")
        if action.cgroup_path:
            with contextlib.suppress(OSError):
                table.cgroup_kill(action.cgroup_path)
        for ident in remaining:
            if signal_verified(table, ident, signal.SIGKILL, marker=marker):
                signalled += 1
    left, killed, unproven = _kill_until_extinct(table, action, remaining, marker, exclude)
    signalled += killed
    populated = bool(action.cgroup_path and table.cgroup_populated(action.cgroup_path))
    if action.cgroup_path and not populated:
        with contextlib.suppress(OSError):
            table.cgroup_remove(action.cgroup_path)
    return (not left and not populated), signalled, sorted(unproven)


def _kill_until_extinct(
    table: _os.ProcessTable,
    action: Reap,
    remaining: list[_os.ProcessIdentity],
    marker: tuple[bytes, bytes],
    exclude: list[int],
) -> tuple[list[_os.ProcessIdentity], int, set[int]]:
    """Walk, kill, wait until nothing of the lease is left (bounded by KILL_WAIT_S).

    Returns ``(still alive, how many we signalled, unproven claimants seen)``.
    """
    # The plan is a snapshot: a member may have forked after it (a TERM-ignoring shell
    # loop starts a new `sleep` every turn), and that child carries the marker too, so
    # scan for the marker again
    # and kill (verified, through pidfds) whatever the plan could not know about -- if
    # it is proven a member (below a planned process still alive, or in the cgroup).
    # And wait for the cgroup to report `populated 0`: cgroup.kill only *sends*
    # SIGKILL, so reading populated right after it would make a clean reap look like a
    # leak (lost).
    signalled = 0
    unproven: set[int] = set()
    deadline = time.monotonic() + KILL_WAIT_S
    while True:
        remaining = [i for i in remaining if _alive(table, i)]
        with contextlib.suppress(_os.ProcUnreadable):
            found, claims = _rescan(table, action, remaining, marker, exclude)
            unproven.update(claims)
            for ident in found:
                if ident not in remaining and signal_verified(
                    table, ident, signal.SIGKILL, marker=marker
                ):
                    signalled += 1
                    remaining.append(ident)
        populated = bool(action.cgroup_path and table.cgroup_populated(action.cgroup_path))
        if (not remaining and not populated) or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    return remaining, signalled, unproven


def _term_all(table: _os.ProcessTable, action: Reap, marker: tuple[bytes, bytes]) -> int:
    """SIGTERM every planned identity and every cgroup member, once each."""
    signalled = 0
    for ident in action.pids_children_first:
        if signal_verified(table, ident, signal.SIGTERM, marker=marker):
            signalled += 1
    planned = {ident.pid for ident in action.pids_children_first}
    if action.cgroup_path:
        with contextlib.suppress(OSError):
            for pid in table.cgroup_procs(action.cgroup_path):
                if pid in planned:
                    continue  # already asked once, by identity: one TERM per process
                st = table.stat(pid)
                if st is not None and signal_verified(
                    table, _os.ProcessIdentity(table.boot_id(), pid, st.starttime), signal.SIGTERM
                ):
                    signalled += 1
    return signalled


def _rescan(
    table: _os.ProcessTable,
    action: Reap,
    alive: list[_os.ProcessIdentity],
    marker: tuple[bytes, bytes],
    exclude: list[int],
) -> tuple[list[_os.ProcessIdentity], list[int]]:
    """Marker carriers now live, split into proven identities and unproven pids."""
    boot = table.boot_id()
    anchors = [i.pid for i in alive]
    proven, unproven = split_run_claims(
        table,
        marked_survivors(table, marker, exclude=exclude),
        anchors=anchors,
        cgroup_path=action.cgroup_path or None,
    )
    found: list[_os.ProcessIdentity] = []
    for pid in proven:
        st = table.stat(pid)
        if st is not None:
            found.append(_os.ProcessIdentity(boot, pid, st.starttime))
    return found, unproven
