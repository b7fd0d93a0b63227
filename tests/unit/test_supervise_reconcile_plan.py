"""Reconcile planning beyond the simulator rows: retention, exclusion, failures."""

from __future__ import annotations

from dataclasses import replace

from tether._os import ProcessIdentity, ProcUnreadable
from tether._os._fake import FakeProcessTable
from tether.supervise.lease_state import LeaseState
from tether.supervise.reconcile_plan import (
    Expire,
    LeaseRecord,
    MarkClosed,
    MarkLost,
    Reap,
    Skip,
    Steal,
    Unproven,
    plan_reconcile,
)
from tether.supervise.verify import command_hash

BOOT = "boot-A"
US = "I1"
ARGV = [b"agent"]
MARK = {b"TETHER_LEASE_ID": b"L1"}


def lease(**overrides: object) -> LeaseRecord:
    base = LeaseRecord(
        lease_id="L1",
        instance_id=US,
        session_key="k",
        root_pid=1000,
        pgid=None,
        boot_id=BOOT,
        starttime=50,
        cgroup_path=None,
        command_hash=command_hash(ARGV),
        state=LeaseState.OPEN,
        owner_alive=False,
        updated_at=100.0,
        keeper_pid=999,
        keeper_starttime=49,
        pid_namespace="pid:[1]",
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def table_with_root() -> FakeProcessTable:
    t = FakeProcessTable(pid_ns="pid:[1]")
    t.add(1000, starttime=50, env=MARK, cmdline=ARGV)
    return t


def plan(table: FakeProcessTable, *leases: LeaseRecord, now: float = 200.0) -> list[object]:
    return list(plan_reconcile(list(leases), table, our_instance_id=US, now=now, retention_s=50))


def test_finished_leases_expire_after_retention() -> None:
    """Finished leases older than retention_s are expired; younger closed ones are left alone."""
    t = table_with_root()
    out = plan(
        t,
        lease(lease_id="old-closed", state=LeaseState.CLOSED, updated_at=100.0),
        lease(lease_id="old-lost", state=LeaseState.LOST, updated_at=100.0),
        lease(lease_id="new-closed", state=LeaseState.CLOSED, updated_at=190.0),
    )
    assert [(type(a), a.lease_id) for a in out] == [  # type: ignore[attr-defined]
        (Expire, "old-closed"),
        (Expire, "old-lost"),
    ]
    assert t.signals == []


def test_owned_reap_carries_identities_children_first() -> None:
    """An owned tree is planned as identities with their starttimes, children before the root."""
    t = table_with_root()
    t.add(1001, ppid=1000, starttime=60, env=MARK)
    out = plan(t, lease())[1:]  # after the steal
    assert isinstance(out[0], Reap)
    assert out[0].pids_children_first == [
        ProcessIdentity(BOOT, 1001, 60),
        ProcessIdentity(BOOT, 1000, 50),
    ]
    assert isinstance(out[1], MarkClosed)


def test_keeper_carrying_the_marker_is_reaped_after_the_agent() -> None:
    """A surviving keeper that carries the marker is reaped, after the agent root it parents."""
    t = FakeProcessTable(pid_ns="pid:[1]")
    t.add(999, starttime=49, env=MARK)
    t.add(1000, ppid=999, starttime=50, env=MARK, cmdline=ARGV)
    out = plan(t, lease())[1:]  # after the steal
    assert isinstance(out[0], Reap)
    assert [i.pid for i in out[0].pids_children_first] == [1000, 999]


def test_exclude_keeps_ourselves_out_of_the_reap() -> None:
    """Pids passed in exclude are never part of a Reap even when they carry the marker."""
    t = table_with_root()
    t.add(1001, ppid=1000, starttime=60, env=MARK)
    out = plan_reconcile([lease()], t, our_instance_id=US, now=0, retention_s=50, exclude=[1001])
    out = out[1:]  # after the steal
    assert isinstance(out[0], Reap)
    assert [i.pid for i in out[0].pids_children_first] == [1000]


def test_unreadable_boot_id_fails_closed() -> None:
    """If the boot id cannot be read, dead owners' leases are marked lost rather than closed."""

    class NoBoot(FakeProcessTable):
        def boot_id(self) -> str:
            raise ProcUnreadable(13, "no boot id")

    t = NoBoot(pid_ns="pid:[1]")
    t.add(1000, starttime=50, env=MARK, cmdline=ARGV)
    out = plan(t, lease(), lease(lease_id="L2", state=LeaseState.LOST, updated_at=190.0))
    assert [type(a) for a in out] == [Steal, MarkLost, Skip]
    assert t.signals == []


def test_listing_unreadable_after_verification_fails_closed() -> None:
    """A root verified OWNED whose tree cannot be listed is marked lost, with nothing reaped."""

    class NoListing(FakeProcessTable):
        def pids(self) -> list[int]:
            raise ProcUnreadable(13, "no listing")

    t = NoListing(pid_ns="pid:[1]")
    t.add(1000, starttime=50, env=MARK, cmdline=ARGV)
    out = plan(t, lease())
    assert [type(a) for a in out] == [Steal, MarkLost]
    assert "unreadable" in out[1].why  # type: ignore[attr-defined]


def test_lost_lease_now_verifiable_is_reaped_and_closed() -> None:
    """A lost lease whose tree now verifies as ours is reaped and closed by a later sweep."""
    t = table_with_root()
    out = plan(t, lease(state=LeaseState.LOST, updated_at=190.0))
    assert [type(a) for a in out] == [Steal, Reap, MarkClosed]


def test_gone_lease_without_survivors_is_lost_with_reasons() -> None:
    """Seed 000: a lease whose process was gone before cleanup is marked lost, saying why.

    Regression (issue 9 item 14): this used to plan MarkClosed, i.e. ``closed``.
    """
    t = FakeProcessTable(pid_ns="pid:[1]")
    out = plan(t, lease(state=LeaseState.CLOSING))
    assert [type(a) for a in out] == [Steal, MarkLost]
    assert isinstance(out[1], MarkLost)
    assert out[1].gone
    assert "does not exist" in out[1].why


def test_healthy_lease_of_a_live_holder_is_never_touched() -> None:
    """Seed 003: a live holder whose lease has not expired gets Skip, nothing else."""
    t = table_with_root()
    out = plan(t, lease(owner_alive=True, lease_expires_at=201.0, owner_instance_id="S1"))
    assert [type(a) for a in out] == [Skip]
    assert t.signals == []


def test_expired_lease_of_a_live_holder_is_stolen_before_the_reap() -> None:
    """Seed 003: an expired lease is stolen (CAS on state and holder) before anything is reaped."""
    t = table_with_root()
    out = plan(t, lease(owner_alive=True, lease_expires_at=199.0, owner_instance_id="S1"))
    assert [type(a) for a in out] == [Steal, Reap, MarkClosed]
    steal = out[0]
    assert isinstance(steal, Steal)
    assert (steal.expect, steal.holder, steal.holder_dead) == (LeaseState.OPEN, "S1", False)
    assert "expired" in steal.why


def test_our_own_expired_lease_is_never_stolen_by_ourselves() -> None:
    """A supervisor never reaps its own live run, even if its heartbeat lapsed."""
    t = table_with_root()
    mine = lease(owner_alive=True, lease_expires_at=1.0, owner_instance_id="S1", held_by_us=True)
    assert [type(a) for a in plan(t, mine)] == [Skip]
    assert t.signals == []


def test_a_healthy_lease_of_ours_is_called_in_use_not_foreign() -> None:
    """Issue 21 item 16: `reap --dry-run` called the operator's own live sessions' leases
    "not ours"; they are this instance's, in use by their owner."""
    t = table_with_root()
    out = plan(t, lease(owner_alive=True, lease_expires_at=201.0, owner_instance_id="S1"))
    assert isinstance(out[0], Skip)
    assert "not ours" not in out[0].why
    assert "in use" in out[0].why


class _ExitsAtCgroupRead(FakeProcessTable):
    """A table where one marker carrier exits (and is reaped) just before cgroup.procs is
    read: the run's ``bash`` loop forks a ``sleep 0.1`` every 0.1 s, so on a slow machine
    one found by the /proc scan is gone by the time reconcile reads the cgroup."""

    exits: int | None = None

    def cgroup_procs(self, path: str) -> list[int]:
        if self.exits is not None:
            self.remove(self.exits)
            self.cgroups[path].remove(self.exits)
            self.exits = None
        return super().cgroup_procs(path)


def test_a_member_that_exits_during_planning_is_no_unproven_claimant() -> None:
    """Flaky `killed_reconcile_reaps[cgroup]`: a cgroup member found by the marker scan that
    exits before cgroup.procs is read was reported as an unproven claimant; it is gone,
    so it claims nothing -- the lease is reaped by its cgroup and closed, nothing else."""
    t = _ExitsAtCgroupRead(pid_ns="pid:[1]")
    cg = "/sys/fs/cgroup/tether/L1"
    t.add(1002, ppid=1, starttime=61, env=MARK)  # an escaped member (the loop's bash)
    t.add(1003, ppid=1002, starttime=62, env=MARK)  # its short-lived `sleep 0.1`
    t.cgroups[cg] = [1002, 1003]
    t.exits = 1003
    out = plan(t, lease(cgroup_path=cg, keeper_pid=None, keeper_starttime=None))
    assert [type(a) for a in out] == [Steal, Reap, MarkClosed], out
    reap = out[1]
    assert isinstance(reap, Reap)
    assert [i.pid for i in reap.pids_children_first] == [1002]
    assert reap.cgroup_path == cg
    assert t.signals == []


def test_a_live_claimant_outside_the_cgroup_is_still_unproven() -> None:
    """The control: a marker carrier that lives on outside the run's cgroup (and below no
    verified anchor) is still reported as unproven and never put in the reap."""
    t = _ExitsAtCgroupRead(pid_ns="pid:[1]")
    cg = "/sys/fs/cgroup/tether/L1"
    t.add(1002, ppid=1, starttime=61, env=MARK)
    t.add(1004, ppid=1, starttime=63, env=MARK)  # `env TETHER_LEASE_ID=L1 setsid sleep`
    t.cgroups[cg] = [1002]
    out = plan(t, lease(cgroup_path=cg, keeper_pid=None, keeper_starttime=None))
    assert [type(a) for a in out] == [Steal, Reap, MarkClosed, Unproven], out
    assert isinstance(out[3], Unproven)
    assert out[3].pids == [1004]
