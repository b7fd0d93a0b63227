"""Reconcile planning: what to do about leases whose owner may have died.

Theory of operation
-------------------
Reconcile starts from leases, never from a scan of the process table
(process-ownership.md §3): a lease is our own written claim, so the worst a bad
lease can do is make us *look* for a process; only verified evidence lets us signal
one. :func:`plan_reconcile` is sans-IO: it reads the live state through a
:class:`~tether._os.ProcessTable` and returns a list of actions for the executor
(the ``tether reap`` shell) to carry out, each with a human-readable ``why``.

Per lease, in input order:

* another instance's lease -> ``Skip`` (never evaluated, never touched);
* ``closed``/``lost`` older than ``retention_s`` -> ``Expire``;
* ``closed`` otherwise -> nothing;
* a live owner's lease (``owner_alive``) -> ``Skip``: it is that owner's business;
* ``open``/``closing``/``lost`` of a dead owner -> :func:`~tether.supervise.verify.verify`:

  - ``OWNED`` -> ``Reap`` (the marker-carrying tree, children first, as identities,
    plus the lease's cgroup if it is still populated) then ``MarkClosed``;
  - ``GONE`` because of a reboot -> ``MarkClosed`` (nothing of that boot exists);
  - other ``GONE`` -> ``Reap`` of any marker-carrying survivors found by a scan (the root
    may be gone while a ``setsid`` grandchild lives on; we never walk from a GONE
    root's pid, which may belong to someone else now), then ``MarkClosed``;
  - ``LOST`` -> ``MarkLost`` (nothing signalled; a later sweep retries). A lease
    that is already ``lost`` gets ``Skip`` instead: there is no lost->lost step.

Contract with the executor:

* ``Reap`` pids are :class:`~tether._os.ProcessIdentity` values, and each must be
  signalled only through :func:`~tether.supervise.verify.signal_verified` (pidfd,
  re-check, signal), with the lease's marker -- a plan may be stale by the time it
  runs. A ``cgroup_path`` means SIGTERM each of ``cgroup_procs`` then, after the
  grace, ``cgroup_kill``: the cgroup was created for this lease alone.
* ``MarkClosed`` right after a ``Reap`` of the same lease is conditional: write it
  only once extinction is proven (no identity left alive, ``populated 0``);
  otherwise mark the lease ``lost``. ``MarkClosed`` on an ``open`` lease steps
  ``open -> closing -> closed`` (:func:`~tether.supervise.lease_state.path_to`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tether._os import ProcessIdentity, ProcessTable, ProcUnreadable
from tether.supervise.lease_state import LeaseState
from tether.supervise.verify import (
    LeaseEvidence,
    Verdict,
    command_hash,
    marked_survivors,
    marker_for,
    plan_tree_kill,
    verify,
)

__all__ = [
    "Action",
    "Expire",
    "LeaseRecord",
    "MarkClosed",
    "MarkLost",
    "Reap",
    "Skip",
    "plan_reconcile",
]


@dataclass(frozen=True)
class LeaseRecord:
    """A lease as the registry stores it.

    ``pid_namespace`` must be recorded at spawn (``ProcessTable.pid_namespace()``):
    a lease without it can never verify as ``OWNED`` (fail closed). ``updated_at``
    is the time of the last state change, in the same clock as ``now``.
    """

    lease_id: str
    instance_id: str
    session_key: str
    root_pid: int
    pgid: int | None
    boot_id: str
    starttime: int
    cgroup_path: str | None
    command_hash: str | None
    state: LeaseState
    owner_alive: bool
    updated_at: float
    keeper_pid: int | None = None
    keeper_starttime: int | None = None
    pid_namespace: str | None = None

    def evidence(self) -> LeaseEvidence:
        """The verification evidence this record carries about its root process."""
        return LeaseEvidence(
            lease_id=self.lease_id,
            instance_id=self.instance_id,
            boot_id=self.boot_id,
            pid=self.root_pid,
            starttime=self.starttime,
            pgid=self.pgid,
            command_hash=self.command_hash,
            pid_namespace=self.pid_namespace,
        )


@dataclass(frozen=True)
class Reap:
    """Signal these verified identities (children first) and/or kill this cgroup."""

    lease_id: str
    pids_children_first: list[ProcessIdentity]
    cgroup_path: str | None
    why: str


@dataclass(frozen=True)
class MarkClosed:
    """Mark the lease ``closed`` (after a preceding ``Reap`` proved extinction)."""

    lease_id: str
    why: str


@dataclass(frozen=True)
class MarkLost:
    """Mark the lease ``lost``: ownership unverifiable, nothing signalled."""

    lease_id: str
    why: str


@dataclass(frozen=True)
class Expire:
    """Delete the finished lease's record: it is older than the retention period."""

    lease_id: str
    why: str


@dataclass(frozen=True)
class Skip:
    """Leave the lease alone (shown by ``tether reap`` so nothing is silent)."""

    lease_id: str
    why: str


Action = Reap | MarkClosed | MarkLost | Expire | Skip


def _identities(table: ProcessTable, boot_id: str, pids: Sequence[int]) -> list[ProcessIdentity]:
    # Pin each pid to its starttime now, so the executor can refuse a pid that was
    # reused between planning and signalling. Order is preserved (children first).
    out: list[ProcessIdentity] = []
    for pid in pids:
        st = table.stat(pid)
        # Vanished or exited since planning: nothing to signal, and no identity to pin.
        if st is not None and not st.is_zombie:
            out.append(ProcessIdentity(boot_id=boot_id, pid=pid, starttime=st.starttime))
    return out


def _plan_one(
    lease: LeaseRecord,
    table: ProcessTable,
    *,
    our_instance_id: str,
    our_boot_id: str,
    now: float,
    retention_s: float,
    command_hash_of: Callable[[list[bytes]], str],
    exclude: Sequence[int],
) -> list[Action]:
    lid = lease.lease_id
    # Another instance's leases are not ours to judge, even if its owner looks dead:
    # it may run in another namespace or container where our /proc view lies.
    if lease.instance_id != our_instance_id:
        return [Skip(lid, f"belongs to instance {lease.instance_id}, not ours: never touched")]
    if (
        lease.state in (LeaseState.CLOSED, LeaseState.LOST)
        and now - lease.updated_at >= retention_s
    ):
        age = now - lease.updated_at
        return [Expire(lid, f"{lease.state.value} for {age:.0f}s (retention {retention_s:.0f}s)")]
    if lease.state is LeaseState.CLOSED:
        return []
    # A live owner is tearing down or running its own tree; two reapers racing on
    # one tree is how foreign pids get signalled.
    if lease.owner_alive:
        return [Skip(lid, "owner is alive: its leases are its own business")]

    if not our_boot_id:
        why = "cannot read this boot's id: nothing verified, nothing signalled"
        if lease.state is LeaseState.LOST:
            return [Skip(lid, why)]
        return [MarkLost(lid, why)]
    if lease.boot_id != our_boot_id:
        # Nothing of another boot can be running: no verification, and no marker scan
        # either (a marker match in this boot would be a coincidence, not a survivor).
        return [MarkClosed(lid, f"from boot {lease.boot_id}, now boot {our_boot_id}: gone")]

    verification = verify(
        lease.evidence(),
        table,
        our_instance_id=our_instance_id,
        our_boot_id=our_boot_id,
        command_hash_of=command_hash_of,
    )
    because = "; ".join(verification.reasons)
    marker = marker_for(lid)

    # LOST signals nothing. A lost lease stays lost (no lost->lost step) and is
    # re-verified by the next sweep, which may close it.
    if verification.verdict is Verdict.LOST:
        if lease.state is LeaseState.LOST:
            return [Skip(lid, f"still unverifiable, left lost: {because}")]
        return [MarkLost(lid, f"cannot verify ownership, nothing signalled: {because}")]

    # OWNED or GONE: find what to reap. A listing failure at this point leaves us
    # unable to prove the tree is gone, so the lease is lost (fail closed).
    try:
        if verification.verdict is Verdict.OWNED:
            pids = plan_tree_kill(lease.root_pid, table, marker, exclude=exclude)
        else:
            pids = marked_survivors(table, marker, exclude=exclude)
        idents = _identities(table, our_boot_id, pids)
        # The cgroup was created for this lease alone, so its members are ours even
        # when the root is GONE; an empty or missing one needs no kill.
        cgroup = None
        if lease.cgroup_path is not None and table.cgroup_populated(lease.cgroup_path):
            cgroup = lease.cgroup_path
    except ProcUnreadable as exc:
        why = f"verdict {verification.verdict.value} but the process listing is unreadable: {exc}"
        if lease.state is LeaseState.LOST:
            return [Skip(lid, why)]
        return [MarkLost(lid, why)]

    actions: list[Action] = []
    if idents or cgroup is not None:
        what = ", ".join(str(i.pid) for i in idents) or "none by pid"
        where = f" and cgroup {cgroup}" if cgroup is not None else ""
        if verification.verdict is Verdict.OWNED:
            why = f"owner dead, tree verified ({because}); reaping pids {what}{where}"
        else:
            why = f"root gone ({because}); reaping marked survivors {what}{where}"
        actions.append(Reap(lid, idents, cgroup, why))
        actions.append(MarkClosed(lid, "reaped after its owner died (once extinction is proven)"))
    else:
        actions.append(MarkClosed(lid, f"owner dead and nothing of the tree is left: {because}"))
    return actions


def plan_reconcile(
    leases: Sequence[LeaseRecord],
    table: ProcessTable,
    *,
    our_instance_id: str,
    now: float,
    retention_s: float,
    command_hash_of: Callable[[list[bytes]], str] = command_hash,
    exclude: Sequence[int] = (),
) -> list[Action]:
    """Plan what reconcile should do about ``leases`` (see the module docstring).

    Args:
        leases: every lease the registry holds (other instances' included; they
            are skipped here so the printout can show them).
        table: the live process table.
        our_instance_id: this Tether instance's id.
        now: the current time, in the clock of ``LeaseRecord.updated_at``.
        retention_s: how long finished (``closed``/``lost``) records are kept.
        command_hash_of: how to hash a live argv (``command_hash`` by default).
        exclude: pids never to include in a reap: pass our own pid and ancestry.

    Returns:
        Actions in lease order; a lease's ``Reap`` always precedes its ``MarkClosed``.
        If the boot id cannot be read, every lease of ours that would need
        verification gets ``MarkLost``/``Skip`` via the fail-closed path.
    """
    try:
        our_boot_id = table.boot_id()
    except ProcUnreadable:
        # Without the boot id a mismatch would read as "another boot: GONE", which is
        # exactly wrong; the empty value routes every lease to the fail-closed path.
        our_boot_id = ""
    actions: list[Action] = []
    for lease in leases:
        actions.extend(
            _plan_one(
                lease,
                table,
                our_instance_id=our_instance_id,
                our_boot_id=our_boot_id,
                now=now,
                retention_s=retention_s,
                command_hash_of=command_hash_of,
                exclude=exclude,
            )
        )
    return actions
