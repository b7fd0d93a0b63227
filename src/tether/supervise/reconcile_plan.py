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
* a *healthy* lease -> ``Skip``: its holder is alive and its ``lease_expires_at`` has
  not passed (seed 003: "a healthy lease owned by another instance: do not touch").
  A lease without an expiry (written before leases had one) is healthy while its
  holder lives;
* a stale lease -- expired, or its holder proven dead (a dead holder renews nothing;
  waiting out its expiry would only leave its orphans running) -- is first *stolen*
  (``Steal``: one compare-and-set on state and holder, committed before anything is
  signalled; the loser of a race does nothing more for that lease), then judged by
  :func:`~tether.supervise.verify.verify`:

  - ``OWNED`` -> ``Reap`` (the marker-carrying tree, children first, as identities,
    plus the lease's cgroup if it is still populated) then ``MarkClosed``;
  - ``GONE`` because of a reboot -> ``MarkLost(gone=True)``: nothing of that boot
    exists, and it went before any cleanup of ours (seed 000: ``lost``);
  - other ``GONE`` -> ``Reap`` of any marker-carrying survivors found by a scan (the root
    may be gone while a ``setsid`` grandchild lives on; we never walk from a GONE
    root's pid, which may belong to someone else now), then ``MarkClosed``; with no
    survivors at all, ``MarkLost(gone=True)``;
  - ``LOST`` -> ``MarkLost`` (nothing signalled; a later sweep retries).

  A marker carrier is reaped only when it is proven a member of the run
  (:mod:`~tether.supervise.proof`: below the verified root or the verified live keeper,
  or in the run's cgroup); the others get ``Unproven`` (reported, never signalled),
  and a lease with nothing proven left but unproven claimants is ``MarkLost``: its
  extinction cannot be shown. With the keeper alive (its supervisor is only stopped),
  the ``Reap`` names it, and the executor asks it to end its own tree.

  A lease that is already ``lost`` is stolen only when there is something to reap;
  otherwise it gets ``Skip`` while still unverifiable, and nothing once its tree is
  gone (there is no lost->lost step).

Contract with the executor:

* ``Reap`` pids are :class:`~tether._os.ProcessIdentity` values, and each must be
  signalled only through :func:`~tether.supervise.verify.signal_verified` (pidfd,
  re-check, signal), with the lease's marker -- a plan may be stale by the time it
  runs. A ``cgroup_path`` means SIGTERM each of ``cgroup_procs`` then, after the
  grace, ``cgroup_kill``: the cgroup was created for this lease alone.
* ``MarkClosed`` right after a ``Reap`` of the same lease is conditional: write it
  only once extinction is proven (no identity left alive, ``populated 0``);
  otherwise mark the lease ``lost``.
* Every action after a ``Steal`` is carried out only if the steal won; every state
  write goes through the lease table as a compare-and-set with us as the holder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tether._os import ProcessIdentity, ProcessTable, ProcUnreadable
from tether.supervise.lease_state import LeaseState
from tether.supervise.proof import UNPROVEN_WHY, split_lease_claims, verified_keeper
from tether.supervise.reconcile_actions import (
    Action,
    Expire,
    MarkClosed,
    MarkLost,
    Reap,
    Skip,
    Steal,
    Unproven,
)
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
    "Steal",
    "Unproven",
    "lease_is_healthy",
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
    owner_instance_id: str | None = None
    lease_expires_at: float | None = None
    held_by_us: bool = False  # owner_instance_id is this very supervisor

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
            keeper_pid=self.keeper_pid,
            keeper_starttime=self.keeper_starttime,
        )


def lease_is_healthy(lease: LeaseRecord, now: float) -> bool:
    """Whether the lease's holder is alive and its lease has not expired at ``now``."""
    if not lease.owner_alive:
        return False
    return lease.lease_expires_at is None or now < lease.lease_expires_at


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


@dataclass(frozen=True)
class _Planner:
    """One planning pass: what every lease is judged against."""

    table: ProcessTable
    our_instance_id: str
    our_boot_id: str
    now: float
    retention_s: float
    command_hash_of: Callable[[list[bytes]], str]
    exclude: Sequence[int]

    def plan(self, lease: LeaseRecord) -> list[Action]:
        """The actions for one lease (see the module docstring)."""
        early = self._untouched(lease)
        if early is not None:
            return early
        lid, now = lease.lease_id, self.now
        if lease.owner_alive:
            assert lease.lease_expires_at is not None
            stale = (
                f"lease expired {now - lease.lease_expires_at:.1f}s ago (holder alive but silent)"
            )
        else:
            stale = "its holder is dead"
        steal = Steal(lid, lease.state, lease.owner_instance_id, not lease.owner_alive, stale)
        # A lost lease is taken over only to reap something; otherwise it stays as it is.
        take: list[Action] = [] if lease.state is LeaseState.LOST else [steal]
        if not self.our_boot_id:
            why = "cannot read this boot's id: nothing verified, nothing signalled"
            if lease.state is LeaseState.LOST:
                return [Skip(lid, why)]
            return [*take, MarkLost(lid, why)]
        if lease.boot_id != self.our_boot_id:
            # Nothing of another boot can be running: no verification, and no marker scan
            # either (a marker match in this boot would be a coincidence, not a survivor).
            why = f"from boot {lease.boot_id}, now boot {self.our_boot_id}: gone before cleanup"
            if lease.state is LeaseState.LOST:
                return [Skip(lid, why)]
            return [*take, MarkLost(lid, why, gone=True)]
        return self._judged(lease, steal, take)

    def _untouched(self, lease: LeaseRecord) -> list[Action] | None:
        """The actions for a lease that is not stale (or not ours); None if it is."""
        lid, now, retention_s = lease.lease_id, self.now, self.retention_s
        # Another instance's leases are not ours to judge, even if its owner looks dead:
        # it may run in another namespace or container where our /proc view lies.
        if lease.instance_id != self.our_instance_id:
            return [Skip(lid, f"belongs to instance {lease.instance_id}, not ours: never touched")]
        if (
            lease.state in (LeaseState.CLOSED, LeaseState.LOST)
            and now - lease.updated_at >= retention_s
        ):
            age = now - lease.updated_at
            return [
                Expire(lid, f"{lease.state.value} for {age:.0f}s (retention {retention_s:.0f}s)")
            ]
        if lease.state is LeaseState.CLOSED:
            return []
        # A live holder with a current lease is tearing down or running its own tree; two
        # reapers racing on one tree is how foreign pids get signalled.
        if lease_is_healthy(lease, now):
            # (It is this instance's, often the operator's own warm session: "in use", not
            # "not ours".)
            return [Skip(lid, "in use: its live owner holds it and its lease is current")]
        if lease.held_by_us and lease.state in (LeaseState.OPEN, LeaseState.CLOSING):
            # Our own run (a late heartbeat is no reason to reap ourselves): the runner
            # that holds it ends it.
            return [Skip(lid, "held by this supervisor: its runner ends it")]
        return None

    def _judged(self, lease: LeaseRecord, steal: Steal, take: list[Action]) -> list[Action]:
        """Verify the lease's root and find what is left of its tree; decide."""
        lid = lease.lease_id
        verification = verify(
            lease.evidence(),
            self.table,
            our_instance_id=self.our_instance_id,
            our_boot_id=self.our_boot_id,
            command_hash_of=self.command_hash_of,
        )
        because = "; ".join(verification.reasons)
        # LOST signals nothing. A lost lease stays lost (no lost->lost step) and is
        # re-verified by the next sweep, which may close it.
        if verification.verdict is Verdict.LOST:
            if lease.state is LeaseState.LOST:
                return [Skip(lid, f"still unverifiable, left lost: {because}")]
            return [*take, MarkLost(lid, f"cannot verify ownership, nothing signalled: {because}")]
        # OWNED or GONE: find what to reap. A listing failure at this point leaves us
        # unable to prove the tree is gone, so the lease is lost (fail closed).
        try:
            found = self._left(lease, verification.verdict is Verdict.OWNED)
        except ProcUnreadable as exc:
            why = (
                f"verdict {verification.verdict.value} but the process listing is unreadable: {exc}"
            )
            if lease.state is LeaseState.LOST:
                return [Skip(lid, why)]
            return [*take, MarkLost(lid, why)]
        return _decide(lease, steal, take, verification.verdict, because, found)

    def _left(self, lease: LeaseRecord, owned: bool) -> _Left:
        """What is left of the tree: proven members, unproven claimants, the cgroup.

        Raises:
            ProcUnreadable: the listing or a stat could not be read.
        """
        table, marker = self.table, marker_for(lease.lease_id)
        if owned:
            pids = plan_tree_kill(lease.root_pid, table, marker, exclude=self.exclude)
        else:
            pids = marked_survivors(table, marker, exclude=self.exclude)
        # The cgroup was created for this lease alone, so its members are ours even
        # when the root is GONE; an empty or missing one needs no kill.
        cgroup = None
        if lease.cgroup_path is not None and table.cgroup_populated(lease.cgroup_path):
            cgroup = lease.cgroup_path
        # The marker only nominates: signal a carrier only if it is proven a member.
        keeper = verified_keeper(
            table, self.our_boot_id, lease.keeper_pid, lease.keeper_starttime, marker
        )
        pids, unproven = split_lease_claims(
            table,
            pids,
            root_pid=lease.root_pid if owned else None,
            keeper=keeper,
            cgroup_path=cgroup,
        )
        return _Left(_identities(table, self.our_boot_id, pids), unproven, cgroup, keeper)


@dataclass(frozen=True)
class _Left:
    """What is left of a lease's tree once its root was judged OWNED or GONE."""

    idents: list[ProcessIdentity]
    unproven: list[int]
    cgroup: str | None
    keeper: ProcessIdentity | None


def _decide(
    lease: LeaseRecord,
    steal: Steal,
    take: list[Action],
    verdict: Verdict,
    because: str,
    left: _Left,
) -> list[Action]:
    """The actions for an OWNED or GONE lease, from what is left of its tree."""
    lid, stale = lease.lease_id, steal.why
    idents, unproven, cgroup, keeper = left.idents, left.unproven, left.cgroup, left.keeper
    actions: list[Action] = [steal]
    claims = [Unproven(lid, unproven, UNPROVEN_WHY)] if unproven else []
    if idents or cgroup is not None:
        what = ", ".join(str(i.pid) for i in idents) or "none by pid"
        where = f" and cgroup {cgroup}" if cgroup is not None else ""
        if verdict is Verdict.OWNED:
            why = f"{stale}, tree verified ({because}); reaping pids {what}{where}"
        else:
            why = f"root gone ({because}); reaping marked survivors {what}{where}"
        keeper_alive = keeper if keeper is not None and keeper in idents else None
        actions.append(Reap(lid, idents, cgroup, why, keeper=keeper_alive))
        actions.append(MarkClosed(lid, f"reaped because {stale} (once extinction is proven)"))
        return [*actions, *claims]
    elif unproven:
        # Nothing proven is left, but processes claim the run: we cannot say its tree
        # is extinct, and we must not signal them either.
        why = f"only unproven claimants are left ({because}): nothing signalled"
        if lease.state is LeaseState.LOST:
            return [Skip(lid, why), *claims]
        return [*take, MarkLost(lid, why), *claims]
    elif lease.state is LeaseState.LOST:
        # Gone, and already recorded as lost: nothing to do, nothing to say again
        # (like a closed lease) until retention expires the record.
        return []
    else:
        # Seed 000: the process was gone before cleanup reached it -> lost, not closed.
        actions.append(
            MarkLost(lid, f"nothing of the tree was left to clean up: {because}", gone=True)
        )
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
    planner = _Planner(
        table,
        our_instance_id=our_instance_id,
        our_boot_id=our_boot_id,
        now=now,
        retention_s=retention_s,
        command_hash_of=command_hash_of,
        exclude=exclude,
    )
    actions: list[Action] = []
    for lease in leases:
        actions.extend(planner.plan(lease))
    return actions
