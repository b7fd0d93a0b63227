"""Reconciliation: carry out :func:`plan_reconcile`'s decisions against the real system.

Runs at every owner start (for its own session), and on demand (``tether reap``). It
starts from the open leases of *this* instance only -- never from a scan of the process
table -- and for each lease whose owner is dead:

* verified tree -> SIGTERM every identity (through a pidfd, re-verified after opening,
  marker checked) and the lease's cgroup members; wait one grace, returning early once
  all are gone; SIGKILL what is left (``cgroup.kill`` first); then the lease is
  ``closed`` if extinction is proven, ``lost`` if it is not;
* unverifiable -> ``lost``, nothing signalled (fail closed); a later sweep retries;
* closed or lost records older than the retention window are deleted.

A lease that was still ``open`` when it was reconciled belonged to a run whose owner
died without reporting its end: we record that run's ``agent_run_ended`` event here
(reason ``terminated``, by the daemon, ``owner-lost``) so every run's end is reported
exactly once.

Every decision is returned as a dict (``tether reap`` prints them) and logged.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

from tether import _log, _os, metrics
from tether.supervise.lease_state import LeaseState
from tether.supervise.reconcile_plan import (
    Expire,
    LeaseRecord,
    MarkClosed,
    MarkLost,
    Reap,
    Skip,
    plan_reconcile,
)
from tether.supervise.verify import marked_survivors, marker_for, signal_verified

RETENTION_S = 7 * 24 * 3600.0  # closed/lost lease records are kept a week for `reap` and audits
REAP_GRACE_S = 1.5
KILL_WAIT_S = 2.0


def _owner_alive(
    table: _os.ProcessTable, pid: int | None, starttime: int | None, boot_id: str
) -> bool:
    """Is the lease's owner (the process that wrote it) still the same live process?"""
    if pid is None or starttime is None:
        return False
    if pid == os.getpid():
        return True  # we are that owner
    if table.boot_id() != boot_id:
        return False
    st = table.stat(pid)
    return st is not None and not st.is_zombie and st.starttime == starttime


def _ancestry() -> list[int]:
    """Our own pid and ancestors: never part of any reap (openclaw#90946)."""
    out: list[int] = []
    table = _os.current()
    pid: int | None = os.getpid()
    while pid and pid not in out:
        out.append(pid)
        st = table.stat(pid)
        pid = st.ppid if st is not None else None
    return out


def _records(registry: Any, session_key: str | None, table: _os.ProcessTable) -> list[LeaseRecord]:
    records: list[LeaseRecord] = []
    for lease in registry.leases(session_key=session_key, all_instances=True):
        root = lease.root_pid if lease.root_pid is not None else lease.keeper_pid
        start = lease.starttime if lease.root_pid is not None else lease.keeper_starttime
        records.append(
            LeaseRecord(
                lease_id=lease.lease_id,
                instance_id=lease.instance_id,
                session_key=lease.session_key or "",
                root_pid=root or 0,
                pgid=lease.pgid,
                boot_id=lease.boot_id,
                starttime=start or 0,
                cgroup_path=lease.cgroup_path,
                command_hash=lease.command_hash if lease.root_pid is not None else None,
                state=LeaseState(lease.state),
                owner_alive=_owner_alive(
                    table, lease.owner_pid, lease.owner_starttime, lease.boot_id
                ),
                updated_at=lease.updated_at,
                keeper_pid=lease.keeper_pid,
                keeper_starttime=lease.keeper_starttime,
                pid_namespace=lease.pid_namespace,
            )
        )
    return records


def _alive(table: _os.ProcessTable, ident: _os.ProcessIdentity) -> bool:
    st = table.stat(ident.pid)
    return st is not None and not st.is_zombie and st.starttime == ident.starttime


def _execute_reap(
    table: _os.ProcessTable, action: Reap, grace: float, exclude: list[int]
) -> tuple[bool, int]:
    """TERM -> grace -> KILL the planned identities; returns (extinct, signalled)."""
    marker = marker_for(action.lease_id)
    signalled = 0
    for ident in action.pids_children_first:
        if signal_verified(table, ident, signal.SIGTERM, marker=marker):
            signalled += 1
    if action.cgroup_path:
        with contextlib.suppress(OSError):
            for pid in table.cgroup_procs(action.cgroup_path):
                st = table.stat(pid)
                if st is not None and signal_verified(
                    table, _os.ProcessIdentity(table.boot_id(), pid, st.starttime), signal.SIGTERM
                ):
                    signalled += 1
    deadline = time.monotonic() + grace
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
    # Walk, kill, wait until nothing of the lease is left. The plan is a snapshot: a
    # member may have forked after it (a TERM-ignoring shell loop starts a new `sleep`
    # every turn), and that child carries the marker too, so scan for the marker again
    # and kill (verified, through pidfds) whatever the plan could not know about. And
    # wait for the cgroup to report `populated 0`: cgroup.kill only *sends* SIGKILL, so
    # reading populated right after it would make a clean reap look like a leak (lost).
    deadline = time.monotonic() + KILL_WAIT_S
    while True:
        remaining = [i for i in remaining if _alive(table, i)]
        with contextlib.suppress(_os.ProcUnreadable):
            boot = table.boot_id()
            for pid in marked_survivors(table, marker, exclude=exclude):
                st = table.stat(pid)
                if st is None:
                    continue
                found = _os.ProcessIdentity(boot, pid, st.starttime)
                if found not in remaining and signal_verified(
                    table, found, signal.SIGKILL, marker=marker
                ):
                    signalled += 1
                    remaining.append(found)
        populated = bool(action.cgroup_path and table.cgroup_populated(action.cgroup_path))
        if (not remaining and not populated) or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    populated = bool(action.cgroup_path and table.cgroup_populated(action.cgroup_path))
    if action.cgroup_path and not populated:
        with contextlib.suppress(OSError):
            os.rmdir(action.cgroup_path)
    return (not remaining and not populated), signalled


# The states a lease may be ended from by reconcile. A compare-and-set on them makes
# ending a lease idempotent across reconcilers racing over it (two CLI invocations,
# an owner's periodic sweep and `tether reap`): each lease is ended once.
_ENDABLE = ("open", "closing")


def _end_lease(
    registry: Any,
    lease: Any,
    state: str,
    note: str,
    why: str,
    reason: str | None = None,
) -> tuple[bool, bool]:
    """Move an open/closing lease to ``state`` and report its run's end, exactly once.

    A lease still ``open``/``closing`` here belonged to a run whose owner died without
    reporting its end, so the ``agent_run_ended`` event is written in the same
    transaction as the state change, and only by the reconciler whose update won. A
    lease already ``lost`` may still be closed (a later sweep proved extinction); its
    end was reported when it was first marked lost.

    Returns ``(changed, reported)``: whether this call changed the lease, and whether
    it wrote the ``agent_run_ended`` event.
    """
    if lease is None:
        return False, False
    fields: dict[str, Any] = {"state": state, "note": note}
    if reason is not None:
        fields["reason"] = reason
    event = None
    if lease.session_key:
        ended = "its tree was reaped" if state == "closed" else "extinction is not proven"
        event = (
            lease.session_key,
            "agent_run_ended",  # the run ended; the session lives on (issue 9 item 8)
            {
                "reason": "terminated",
                "terminatedBy": "daemon",
                "message": f"owner-lost: the owner died; {ended} ({why})",
                "exitCode": lease.exit_code,
                "signal": lease.exit_signal,
                "stderrTail": "",
                "leaseId": lease.lease_id,
            },
        )
    if registry.transition_lease(lease.lease_id, _ENDABLE, event=event, **fields):
        return True, event is not None
    if state == "closed":
        # lost -> closed: nothing to report again, but the record should say closed.
        return bool(registry.transition_lease(lease.lease_id, ("lost",), **fields)), False
    return False, False


def reconcile(
    registry: Any,
    *,
    session_key: str | None = None,
    dry_run: bool = False,
    retention_s: float = RETENTION_S,
    grace: float = REAP_GRACE_S,
) -> list[dict[str, Any]]:
    """Reconcile this instance's leases (of one session, or all); return every decision."""
    table = _os.current()
    ancestry = _ancestry()
    before = {
        lease.lease_id: lease
        for lease in registry.leases(session_key=session_key, all_instances=True)
    }
    actions = plan_reconcile(
        _records(registry, session_key, table),
        table,
        our_instance_id=registry.instance_id,
        now=time.time(),
        retention_s=retention_s,
        exclude=ancestry,
    )
    decisions: list[dict[str, Any]] = []
    failed_reaps: set[str] = set()
    for action in actions:
        decision: dict[str, Any] = {
            "kind": type(action).__name__.lower(),
            "lease_id": action.lease_id,
            "why": action.why,
            "dry_run": dry_run,
        }
        lease = before.get(action.lease_id)
        if lease is not None:
            decision["session_key"] = lease.session_key
        if isinstance(action, Reap):
            decision["pids"] = [i.pid for i in action.pids_children_first]
            decision["cgroup"] = action.cgroup_path
            if not dry_run:
                extinct, signalled = _execute_reap(table, action, grace, ancestry)
                decision["extinct"] = extinct
                decision["signalled"] = signalled
                metrics.incr("run_reconcile_orphans_total", by=len(action.pids_children_first))
                if not extinct:
                    failed_reaps.add(action.lease_id)
        elif isinstance(action, MarkClosed) and not dry_run:
            if action.lease_id in failed_reaps:
                decision["kind"] = "marklost"
                note = "reap did not prove extinction"
                if _end_lease(registry, lease, "lost", note, action.why)[0]:
                    metrics.incr("run_lease_lost_total")
                else:
                    decision["raced"] = True
            else:
                reason = lease.reason if lease and lease.reason else "owner-lost"
                changed, reported = _end_lease(
                    registry, lease, "closed", action.why[:500], action.why, reason
                )
                if reported:
                    decision["session_ended"] = True
                if not changed:
                    # Another reconciler ended it first (or its owner did): it closed
                    # the lease and reported the run's end; we must not do either again.
                    decision["raced"] = True
        elif isinstance(action, MarkLost) and not dry_run:
            if _end_lease(registry, lease, "lost", action.why[:500], action.why)[0]:
                metrics.incr("run_lease_lost_total")
            else:
                decision["raced"] = True
        elif isinstance(action, Expire) and not dry_run:
            registry.delete_lease(action.lease_id)
        elif isinstance(action, Skip):
            pass
        _log.event(
            "reconcile",
            **{k: v for k, v in decision.items() if k != "kind"},
            decision=decision["kind"],
        )
        decisions.append(decision)
    return decisions
