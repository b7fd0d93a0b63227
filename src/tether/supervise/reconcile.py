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
from tether.supervise.lease_renewal import SUPERVISOR_ID
from tether.supervise.lease_state import LeaseInput, LeaseState
from tether.supervise.reconcile_leases import end_lease, steal

# Imported from here by tests/unit/test_terminal_settings.py (it lived here before).
from tether.supervise.reconcile_leases import run_ended as _run_ended  # noqa: F401
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
    carry = _Carry(registry, made, dry_run=dry_run, grace=grace)
    decisions: list[dict[str, Any]] = []
    for action in made.actions:
        decision = carry.decide(action)
        _log.event(
            "reconcile",
            runId=action.lease_id,
            reason=action.why,
            decision=decision["kind"],
            **{k: v for k, v in decision.items() if k not in ("kind", "lease_id", "why")},
        )
        decisions.append(decision)
    return decisions


class _Carry:
    """One execution of a plan: what earlier actions decided for the later ones."""

    def __init__(self, registry: Any, made: Plan, *, dry_run: bool, grace: float) -> None:
        self.registry, self.made, self.dry_run, self.grace = registry, made, dry_run, grace
        self.failed_reaps: set[str] = set()
        self.raced: set[str] = set()
        self.silent: set[str] = set()  # stolen from a holder alive but letting it lapse

    def decide(self, action: Action) -> dict[str, Any]:
        """Carry out one action (unless dry or raced); its decision record."""
        decision: dict[str, Any] = {
            "kind": type(action).__name__.lower(),
            "lease_id": action.lease_id,
            "why": action.why,
            "dry_run": self.dry_run,
        }
        lease = self.made.before.get(action.lease_id)
        if lease is not None:
            decision["session_key"] = lease.session_key
        if action.lease_id in self.raced:
            # Another supervisor stole this lease first: it reaps and ends it, we must
            # not signal anything of it or write it (seed 003: one winner, no double kill).
            decision["raced"] = True
        elif isinstance(action, Steal):
            if not self.dry_run and not steal(self.registry, action, lease, self.made.table):
                self.raced.add(action.lease_id)
                decision["raced"] = True
            elif not action.holder_dead:
                self.silent.add(action.lease_id)
        elif isinstance(action, Reap):
            self._reap(action, decision)
        elif isinstance(action, MarkClosed) and not self.dry_run:
            self._mark_closed(action, lease, decision)
        elif isinstance(action, MarkLost) and not self.dry_run:
            self._mark_lost(action, lease, decision)
        elif isinstance(action, Expire) and not self.dry_run:
            self.registry.delete_lease(action.lease_id)
        elif isinstance(action, Unproven):
            decision["pids"] = list(action.pids)  # reported only: never signalled
        return decision

    def _reap(self, action: Reap, decision: dict[str, Any]) -> None:
        decision["pids"] = [i.pid for i in action.pids_children_first]
        decision["cgroup"] = action.cgroup_path
        if self.dry_run:
            return
        made = self.made
        extinct, signalled, unproven = execute_reap(made.table, action, self.grace, made.ancestry)
        decision["extinct"] = extinct
        decision["signalled"] = signalled
        if unproven:
            decision["unproven"] = unproven
        metrics.incr("run_reconcile_orphans_total", by=len(action.pids_children_first))
        if not extinct:
            self.failed_reaps.add(action.lease_id)

    def _mark_closed(self, action: MarkClosed, lease: Any, decision: dict[str, Any]) -> None:
        silent = action.lease_id in self.silent
        if action.lease_id in self.failed_reaps:
            decision["kind"] = "marklost"
            note = "reap did not prove extinction"
            if end_lease(
                self.registry, lease, LeaseInput.UNVERIFIABLE, note, action.why, owner_alive=silent
            )[0]:
                metrics.incr("run_lease_lost_total")
            else:
                decision["raced"] = True
            return
        reason = lease.reason if lease and lease.reason else "owner-lost"
        changed, reported = end_lease(
            self.registry,
            lease,
            LeaseInput.EXTINCTION_PROVEN,
            action.why[:500],
            action.why,
            reason,
            owner_alive=silent,
        )
        if reported:
            decision["session_ended"] = True
        if not changed:
            decision["raced"] = True

    def _mark_lost(self, action: MarkLost, lease: Any, decision: dict[str, Any]) -> None:
        kind = LeaseInput.GONE_BEFORE_CLEANUP if action.gone else LeaseInput.UNVERIFIABLE
        reason = "owner-lost" if action.gone else None
        changed, reported = end_lease(
            self.registry,
            lease,
            kind,
            action.why[:500],
            action.why,
            reason,
            owner_alive=action.lease_id in self.silent,
        )
        if changed:
            metrics.incr("run_lease_lost_total")
            if reported:
                decision["session_ended"] = True
        else:
            decision["raced"] = True
