"""Reconciliation's lease writes: the steal and the end of a stolen lease, with the
events they carry (``lease_stolen``, ``agent_run_ended``) in the same transaction.

Split out of :mod:`tether.supervise.reconcile` by concept: that module plans and carries
out the decisions; this one is every write it makes to a lease, each a compare-and-set
through the lease state table (``Registry.advance_lease``, ``Registry.steal_lease``)
with us as the holder.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tether import _os, metrics
from tether.supervise.lease_renewal import LEASE_TTL_S, SUPERVISOR_ID
from tether.supervise.lease_state import LeaseInput, LeaseState
from tether.supervise.reconcile_plan import Steal

__all__ = ["end_lease", "run_ended", "steal"]


def run_ended(
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


def end_lease(
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
        record = run_ended(lease, kind, why, owner_alive=owner_alive)
    new = registry.advance_lease(
        lease.lease_id,
        kind,
        expect=LeaseState.CLOSING,
        owner=SUPERVISOR_ID,
        record=record,
        **fields,
    )
    return new is not None, new is not None and record is not None


def steal(registry: Any, action: Steal, lease: Any, table: _os.ProcessTable) -> bool:
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
