"""Reconciliation: carry out :func:`plan_reconcile`'s decisions against the real system.

Runs at every owner start (for its own session), and on demand (``tether reap``). It
starts from the open leases of *this* instance only -- never from a scan of the process
table -- and for each *stale* lease (its holder dead, or its ``lease_expires_at``
passed; a healthy lease held by another supervisor is never touched):

* first the steal: one compare-and-set on the lease's state and holder, committed
  (with a ``lease_stolen`` event and ``run_lease_steal_total``) before anything is
  signalled. A reconciler that loses the steal to another does nothing more for that
  lease -- no signal, no write -- so two racing supervisors kill once;
* verified tree -> SIGTERM every identity (through a pidfd, re-verified after opening,
  marker checked) and the lease's cgroup members; wait one grace, returning early once
  all are gone; SIGKILL what is left (``cgroup.kill`` first); then the lease is
  ``closed`` if extinction is proven, ``lost`` if it is not;
* unverifiable -> ``lost``, nothing signalled (fail closed); a later sweep retries;
* nothing of the tree left to clean up -> ``lost`` (seed 000: the process was gone
  before cleanup);
* closed or lost records older than the retention window are deleted.

A lease that was still ``open`` when it was reconciled belonged to a run whose owner
died without reporting its end: we record that run's ``agent_run_ended`` event here
(reason ``terminated``, by the daemon, ``owner-lost``) so every run's end is reported
exactly once.

Every lease write goes through the lease state table (``Registry.advance_lease``), as
a compare-and-set with us as the holder. Every decision is returned as a dict
(``tether reap`` prints them) and logged with its ``runId`` (the lease id) and reason.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from tether import _log, _os, metrics
from tether.supervise.lease_renewal import LEASE_TTL_S, SUPERVISOR_ID
from tether.supervise.lease_state import LeaseInput, LeaseState
from tether.supervise.reconcile_plan import (
    Action,
    Expire,
    LeaseRecord,
    MarkClosed,
    MarkLost,
    Reap,
    Steal,
    Unproven,
    plan_reconcile,
)
from tether.supervise.reconcile_reap import execute_reap

RETENTION_S = 7 * 24 * 3600.0  # closed/lost lease records are kept a week for `reap` and audits
REAP_GRACE_S = 1.5


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


def _ancestry(table: _os.ProcessTable) -> list[int]:
    """Our own pid and ancestors: never part of any reap (openclaw#90946)."""
    out: list[int] = []
    pid: int | None = os.getpid()
    while pid and pid not in out:
        out.append(pid)
        st = table.stat(pid)
        pid = st.ppid if st is not None else None
    return out


def _records(leases: list[Any], table: _os.ProcessTable) -> list[LeaseRecord]:
    records: list[LeaseRecord] = []
    for lease in leases:
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
                owner_instance_id=lease.owner_instance_id,
                lease_expires_at=lease.lease_expires_at,
                held_by_us=lease.owner_instance_id == SUPERVISOR_ID,
            )
        )
    return records


def _run_ended(
    lease: Any, kind: LeaseInput, why: str, *, owner_alive: bool = False
) -> tuple[str, str, dict[str, Any]]:
    if kind is LeaseInput.EXTINCTION_PROVEN:
        ended = "its tree was reaped"
    elif kind is LeaseInput.GONE_BEFORE_CLEANUP:
        ended = "its tree was gone before cleanup"
    else:
        ended = "extinction is not proven"
    # An agent's terminal (tether.process_terminals) is a run of the session too: same record,
    # saying which kind of run it was.
    terminal = getattr(lease, "backend_id", None) == "terminal"
    return (
        lease.session_key,
        "agent_run_ended",
        {
            "reason": "terminated",
            "terminatedBy": "daemon",
            "message": f"owner-lost: {_owner_lost(owner_alive)}; "
            f"{'a terminal: ' if terminal else ''}{ended} ({why})",
            "exitCode": lease.exit_code,
            "signal": lease.exit_signal,
            "stderrTail": "",
            "leaseId": lease.lease_id,
            **({"run": "terminal"} if terminal else {}),
        },
    )


def _owner_lost(owner_alive: bool) -> str:
    """How the lease's holder was lost: it died, or it lives but let its lease lapse (a
    stopped or hung owner -- issue 20, item 6: it was reported as dead)."""
    if owner_alive:
        return "the owner stopped renewing its lease (alive but silent; the lease expired)"
    return "the owner died"


def _end_lease(
    registry: Any,
    lease: Any,
    kind: LeaseInput,
    note: str,
    why: str,
    reason: str | None = None,
    *,
    owner_alive: bool = False,
) -> tuple[bool, bool]:
    """Move a lease we hold (we stole it) from ``closing`` through the table, once.

    A lease that was still ``open``/``closing`` before our steal belonged to a run
    whose owner died without reporting its end, so the ``agent_run_ended`` event is
    written in the same transaction as the state change (the run ended; the session
    lives on -- issue 9 item 8). A lease that was ``lost``
    before (a later sweep reaped what was left) had its end reported when it was
    first marked lost.

    Returns ``(changed, reported)``.
    """
    if lease is None:
        return False, False
    fields: dict[str, Any] = {"note": note, "lease_expires_at": time.time()}  # released
    if reason is not None:
        fields["reason"] = reason
    record = None
    if lease.session_key and lease.state in (LeaseState.OPEN.value, LeaseState.CLOSING.value):
        record = _run_ended(lease, kind, why, owner_alive=owner_alive)
    new = registry.advance_lease(
        lease.lease_id,
        kind,
        expect=LeaseState.CLOSING,
        owner=SUPERVISOR_ID,
        record=record,
        **fields,
    )
    return new is not None, new is not None and record is not None


def _steal(registry: Any, action: Steal, lease: Any, table: _os.ProcessTable) -> bool:
    """Take the lease over, committed -- with its ``lease_stolen`` event, in the same
    transaction -- before anything is signalled (seed 003)."""
    record = (
        lease.session_key if lease is not None else None,
        "lease_stolen",
        {"leaseId": action.lease_id, "from": action.holder, "to": SUPERVISOR_ID, "why": action.why},
    )
    won = bool(
        registry.steal_lease(
            action.lease_id,
            expect=action.expect,
            holder=action.holder,
            now=time.time(),
            holder_dead=action.holder_dead,
            new_owner=SUPERVISOR_ID,
            ttl=LEASE_TTL_S,
            record=record,
            owner_pid=os.getpid(),
            owner_starttime=_own_starttime(table),
        )
    )
    if won:
        metrics.incr("run_lease_steal_total")
    return won


def _own_starttime(table: _os.ProcessTable) -> int | None:
    try:
        st = table.stat(os.getpid())
    except _os.ProcUnreadable:
        return None
    return st.starttime if st is not None else None


@dataclass(frozen=True)
class Plan:
    """A reconcile plan with what its executor needs: the lease rows it was made from."""

    actions: list[Action]
    before: dict[str, Any]
    ancestry: list[int]
    table: _os.ProcessTable


def plan(
    registry: Any,
    *,
    session_key: str | None = None,
    retention_s: float = RETENTION_S,
    table: _os.ProcessTable | None = None,
) -> Plan:
    """Read the leases and plan what to do (nothing is signalled or written yet)."""
    table = table if table is not None else _os.current()
    ancestry = _ancestry(table)
    before = {
        lease.lease_id: lease
        for lease in registry.leases(session_key=session_key, all_instances=True)
    }
    actions = plan_reconcile(
        _records(list(before.values()), table),
        table,
        our_instance_id=registry.instance_id,
        now=time.time(),
        retention_s=retention_s,
        exclude=ancestry,
    )
    return Plan(actions, before, ancestry, table)


def unproven_of(decisions: list[dict[str, Any]]) -> list[int]:
    """Every pid the decisions report as unproven (a claimant: never signalled)."""
    pids: set[int] = set()
    for d in decisions:
        if d.get("kind") == "unproven":
            pids.update(d.get("pids") or [])
        pids.update(d.get("unproven") or [])
    return sorted(pids)


def reconcile(
    registry: Any,
    *,
    session_key: str | None = None,
    dry_run: bool = False,
    retention_s: float = RETENTION_S,
    grace: float = REAP_GRACE_S,
    table: _os.ProcessTable | None = None,
) -> list[dict[str, Any]]:
    """Reconcile this instance's leases (of one session, or all); return every decision.

    ``table`` defaults to the platform's process table (tests pass a fake one).
    """
    made = plan(registry, session_key=session_key, retention_s=retention_s, table=table)
    decisions = carry_out(registry, made, dry_run=dry_run, grace=grace)
    # Issue 20: recorded members of runs that are over, still alive -- report, end, count.
    from tether.supervise.members import sweep_members

    decisions += sweep_members(
        registry,
        session_key=session_key,
        dry_run=dry_run,
        grace=grace,
        table=made.table,
        exclude=(*made.ancestry, os.getpid()),
        # The leases this reconcile ends (or, dry, would end): a skipped one is live.
        ending=frozenset(
            a.lease_id for a in made.actions if isinstance(a, Steal | MarkClosed | MarkLost)
        ),
    )
    return decisions


def carry_out(
    registry: Any, made: Plan, *, dry_run: bool = False, grace: float = REAP_GRACE_S
) -> list[dict[str, Any]]:
    """Execute a :class:`Plan`; return every decision (see the module docstring).

    Planning and execution are separate so that a test can make two supervisors plan
    over the same stale lease before either acts -- the race the steal settles.
    """
    table, before, ancestry, actions = made.table, made.before, made.ancestry, made.actions
    decisions: list[dict[str, Any]] = []
    failed_reaps: set[str] = set()
    raced: set[str] = set()
    silent: set[str] = set()  # leases stolen from a holder that is alive but let it lapse
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
        if action.lease_id in raced:
            # Another supervisor stole this lease first: it reaps and ends it, we must
            # not signal anything of it or write it (seed 003: one winner, no double kill).
            decision["raced"] = True
        elif isinstance(action, Steal):
            if not dry_run and not _steal(registry, action, lease, table):
                raced.add(action.lease_id)
                decision["raced"] = True
            elif not action.holder_dead:
                silent.add(action.lease_id)
        elif isinstance(action, Reap):
            decision["pids"] = [i.pid for i in action.pids_children_first]
            decision["cgroup"] = action.cgroup_path
            if not dry_run:
                extinct, signalled, unproven = execute_reap(table, action, grace, ancestry)
                decision["extinct"] = extinct
                decision["signalled"] = signalled
                if unproven:
                    decision["unproven"] = unproven
                metrics.incr("run_reconcile_orphans_total", by=len(action.pids_children_first))
                if not extinct:
                    failed_reaps.add(action.lease_id)
        elif isinstance(action, MarkClosed) and not dry_run:
            if action.lease_id in failed_reaps:
                decision["kind"] = "marklost"
                note = "reap did not prove extinction"
                alive = action.lease_id in silent
                if _end_lease(
                    registry, lease, LeaseInput.UNVERIFIABLE, note, action.why, owner_alive=alive
                )[0]:
                    metrics.incr("run_lease_lost_total")
                else:
                    decision["raced"] = True
            else:
                reason = lease.reason if lease and lease.reason else "owner-lost"
                changed, reported = _end_lease(
                    registry,
                    lease,
                    LeaseInput.EXTINCTION_PROVEN,
                    action.why[:500],
                    action.why,
                    reason,
                    owner_alive=action.lease_id in silent,
                )
                if reported:
                    decision["session_ended"] = True
                if not changed:
                    decision["raced"] = True
        elif isinstance(action, MarkLost) and not dry_run:
            kind = LeaseInput.GONE_BEFORE_CLEANUP if action.gone else LeaseInput.UNVERIFIABLE
            reason = "owner-lost" if action.gone else None
            changed, reported = _end_lease(
                registry,
                lease,
                kind,
                action.why[:500],
                action.why,
                reason,
                owner_alive=action.lease_id in silent,
            )
            if changed:
                metrics.incr("run_lease_lost_total")
                if reported:
                    decision["session_ended"] = True
            else:
                decision["raced"] = True
        elif isinstance(action, Expire) and not dry_run:
            registry.delete_lease(action.lease_id)
        elif isinstance(action, Unproven):
            decision["pids"] = list(action.pids)  # reported only: never signalled
        _log.event(
            "reconcile",
            runId=action.lease_id,
            reason=action.why,
            decision=decision["kind"],
            **{k: v for k, v in decision.items() if k not in ("kind", "lease_id", "why")},
        )
        decisions.append(decision)
    return decisions
