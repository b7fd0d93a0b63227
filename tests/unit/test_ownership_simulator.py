"""The ownership simulator: reconcile plans executed against a recording fake process table.

Each row builds a world (processes, pids reused, /proc readability, boots), plans a
reconcile for one lease of ours whose owner died (or a foreign/live one), executes the
plan the way ``tether reap`` does -- every pid only through ``signal_verified`` with the
lease marker -- and then asserts the two promises: no signal ever reached a process we
do not own, and every unverifiable row failed closed (``MarkLost``, no signal).
"""

from __future__ import annotations

import shlex
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from tether import metrics
from tether._os import ProcessIdentity
from tether._os._fake import FakeProcessTable
from tether.state.registry import Registry
from tether.supervise import reconcile as reconcile_mod
from tether.supervise.lease_state import LeaseInput, LeaseState
from tether.supervise.reconcile_plan import (
    Action,
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
from tether.supervise.verify import command_hash, marker_for, signal_verified

BOOT = "boot-A"
NS = "pid:[4026531836]"
US = "instance-us"
ARGV = [b"node", b"agent.js", b"--name", b"my agent"]
OURS = {b"TETHER_LEASE_ID": b"L1"}


def lease(**overrides: object) -> LeaseRecord:
    base = LeaseRecord(
        lease_id="L1",
        instance_id=US,
        session_key="codex:/proj:default",
        root_pid=1000,
        pgid=1000,
        boot_id=BOOT,
        starttime=50,
        cgroup_path=None,
        command_hash=command_hash(ARGV),
        state=LeaseState.OPEN,
        owner_alive=False,
        updated_at=0.0,
        pid_namespace=NS,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def root(table: FakeProcessTable, **kw: object) -> None:
    """Our agent root as spawned: pid 1000, starttime 50, marked, exact argv."""
    args: dict[str, object] = {"starttime": 50, "env": OURS, "cmdline": ARGV}
    args.update(kw)
    table.add(1000, **args)  # type: ignore[arg-type]


@dataclass
class Row:
    build: Callable[[FakeProcessTable], object]
    lease: LeaseRecord = field(default_factory=lease)
    #: pids (in the final world) that truly belong to lease L1 and may be signalled.
    owned: tuple[int, ...] = ()
    #: the kinds of actions expected, in order.
    kinds: tuple[type, ...] = ()
    #: expected signal order (children first), when anything is reaped.
    order: tuple[int, ...] = ()
    unverifiable: bool = False


def _foreign(table: FakeProcessTable) -> None:
    # Unrelated bystanders present in every world: init, a shell, a foreign daemon.
    table.add(1, starttime=1, cmdline=[b"/sbin/init"])
    table.add(300, starttime=20, env={b"HOME": b"/root"})
    table.add(301, ppid=300, starttime=21, env={b"TETHER_LEASE_ID": b"L-foreign"})


def _orphan_tree(t: FakeProcessTable) -> None:
    root(t)
    t.add(1001, ppid=1000, pgid=1000, starttime=51, env=OURS)
    t.add(1002, ppid=1001, pgid=1000, starttime=52, env=OURS)


def _orphan_tree_with_escapee(t: FakeProcessTable) -> None:
    _orphan_tree(t)
    t.add(1003, ppid=1, starttime=53, env=OURS)  # setsid + double fork
    t.add(1004, ppid=1000, starttime=54, env={b"HOME": b"/x"})  # adopted, unmarked


def _gone_root_with_survivor(t: FakeProcessTable) -> None:
    t.add(1003, ppid=1, starttime=53, env=OURS)  # the root is gone, its daemon lives on
    t.add(1000, starttime=80, env={})  # and the pid went to an unrelated process


def _tree_and_claimant(t: FakeProcessTable) -> None:
    _orphan_tree(t)
    # `env TETHER_LEASE_ID=L1 setsid sleep 3600 &`, started by the user's shell (300).
    t.add(1005, ppid=300, starttime=60, env=OURS)


def _gone_root_survivor_below_keeper(t: FakeProcessTable) -> None:
    t.add(900, ppid=1, starttime=40, env=OURS)  # the keeper lives (its owner is stopped)
    t.add(1003, ppid=900, starttime=53, env=OURS)  # an orphan it adopted as subreaper


def _gone_root_survivor_in_cgroup(t: FakeProcessTable) -> None:
    _gone_root_with_survivor(t)
    t.cgroups["/cg/tether/L1"] = [1003]


def _root_then_proc_unreadable(t: FakeProcessTable) -> None:
    root(t)
    t.proc_readable = False


def _root_in_unknown_namespace(t: FakeProcessTable) -> None:
    root(t)
    t.pid_ns = None


def _reboot_then_lookalike(t: FakeProcessTable) -> None:
    t.boot = "boot-B"
    root(t)


ROWS = {
    "pid-reused-by-unrelated-process": Row(
        build=lambda t: t.add(1000, starttime=77, env={b"HOME": b"/x"}, cmdline=ARGV),
        kinds=(Steal, MarkLost),
    ),
    "pid-reused-by-another-instances-run": Row(
        build=lambda t: t.add(
            1000, starttime=50, env={b"TETHER_LEASE_ID": b"L-theirs"}, cmdline=ARGV
        ),
        kinds=(Steal, MarkLost),
    ),
    "pid-reused-by-another-run-other-starttime": Row(
        build=lambda t: t.add(1000, starttime=60, env={b"TETHER_LEASE_ID": b"L-theirs"}),
        kinds=(Steal, MarkLost),
    ),
    "command-stored-shell-quoted": Row(
        build=root,
        lease=lease(command_hash=command_hash([shlex.join([a.decode() for a in ARGV])])),
        kinds=(Steal, MarkLost),
        unverifiable=True,
    ),
    "command-stored-as-exact-argv-str": Row(
        build=root,
        lease=lease(command_hash=command_hash([a.decode() for a in ARGV])),
        owned=(1000,),
        kinds=(Steal, Reap, MarkClosed),
        order=(1000,),
    ),
    "proc-unreadable": Row(
        build=_root_then_proc_unreadable,
        owned=(1000,),
        kinds=(Steal, MarkLost),
        unverifiable=True,
    ),
    "pid-namespace-unknown": Row(
        build=_root_in_unknown_namespace,
        owned=(1000,),
        kinds=(Steal, MarkLost),
        unverifiable=True,
    ),
    "stale-lease-process-gone": Row(build=lambda t: None, kinds=(Steal, MarkLost)),
    "boot-id-changed": Row(
        # A new boot, and by coincidence the same pid, starttime and even marker.
        build=_reboot_then_lookalike,
        kinds=(Steal, MarkLost),
    ),
    "starttime-mismatch": Row(
        build=lambda t: root(t, starttime=51, env={}),
        kinds=(Steal, MarkLost),
    ),
    "marker-missing": Row(
        build=lambda t: root(t, env={b"HOME": b"/x"}),
        kinds=(Steal, MarkLost),
        unverifiable=True,
    ),
    "marker-unreadable": Row(
        build=lambda t: root(t, env_readable=False),
        kinds=(Steal, MarkLost),
        unverifiable=True,
    ),
    "zombie-root": Row(build=lambda t: root(t, state="Z"), kinds=(Steal, MarkLost)),
    "startup-orphan-root-child-grandchild": Row(
        build=_orphan_tree,
        owned=(1000, 1001, 1002),
        kinds=(Steal, Reap, MarkClosed),
        order=(1002, 1001, 1000),
    ),
    # Issue 20, item 2: the marker alone is a claim. An escapee reparented to init, with
    # no live keeper above it and no cgroup, cannot be proven a member: reported as
    # unproven, never signalled (recorded run membership may prove it one day).
    "orphan-tree-with-setsid-escapee-and-adopted-stranger": Row(
        build=_orphan_tree_with_escapee,
        owned=(1000, 1001, 1002),
        kinds=(Steal, Reap, MarkClosed, Unproven),
        order=(1002, 1001, 1000),
    ),
    "root-gone-marker-only-survivor-is-unproven": Row(
        build=_gone_root_with_survivor,
        kinds=(Steal, MarkLost, Unproven),
    ),
    "claimant-started-next-to-a-live-tree": Row(
        build=_tree_and_claimant,
        owned=(1000, 1001, 1002),
        kinds=(Steal, Reap, MarkClosed, Unproven),
        order=(1002, 1001, 1000),
    ),
    "survivor-below-the-live-keeper-is-reaped": Row(
        build=_gone_root_survivor_below_keeper,
        lease=lease(keeper_pid=900, keeper_starttime=40),
        owned=(900, 1003),
        kinds=(Steal, Reap, MarkClosed),
        order=(1003, 900),
    ),
    "lease-of-another-instance": Row(
        build=_orphan_tree,
        lease=lease(instance_id="instance-them"),
        kinds=(Skip,),
    ),
    "lease-of-a-live-owner": Row(
        build=_orphan_tree,
        lease=lease(owner_alive=True),
        kinds=(Skip,),
    ),
    "lost-lease-still-unverifiable": Row(
        build=lambda t: root(t, env_readable=False),
        lease=lease(state=LeaseState.LOST),
        kinds=(Skip,),
        unverifiable=True,
    ),
    "lost-lease-gone-before-cleanup-stays-lost": Row(
        build=lambda t: None,
        lease=lease(state=LeaseState.LOST),
        kinds=(),
    ),
    "lost-lease-with-marker-only-survivor-is-reported-not-reaped": Row(
        build=_gone_root_with_survivor,
        lease=lease(state=LeaseState.LOST),
        kinds=(Skip, Unproven),
    ),
}


def execute(plan: list[Action], table: FakeProcessTable) -> None:
    """Carry a plan out the way the reap executor must: verified pidfd signals only."""
    for action in plan:
        if isinstance(action, Reap):
            for ident in action.pids_children_first:
                signal_verified(table, ident, signal.SIGTERM, marker=marker_for(action.lease_id))
            if action.cgroup_path is not None:
                table.cgroup_kill(action.cgroup_path)


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_reconcile_never_signals_an_unowned_process(row: Row) -> None:
    """Reconcile signals only the verified lease tree, children first, and fails closed."""
    table = FakeProcessTable(kill_effect=True)
    _foreign(table)
    row.build(table)
    owned = {table.identity(p) for p in row.owned if table.process(p) is not None}
    bystanders = set(table.alive()) - owned

    plan = plan_reconcile([row.lease], table, our_instance_id=US, now=10.0, retention_s=3600)
    assert tuple(type(a) for a in plan) == row.kinds
    assert all(a.lease_id == "L1" and a.why for a in plan)
    execute(plan, table)

    # Promise 1: zero signals to processes we do not own.
    assert set(table.signalled) <= owned
    assert [s for s in table.signals if s[0] != "pidfd"] == []
    assert table.open_fds == []
    # Children first, exactly the verified tree.
    assert tuple(i.pid for i in table.signalled) == row.order
    # Promise 2: unverifiable rows fail closed.
    if row.unverifiable:
        assert table.signals == []
        assert not any(isinstance(a, Reap | MarkClosed) for a in plan)
    # What we reaped is dead; bystanders are untouched.
    alive = set(table.alive())
    assert not ({i.pid for i in alive} & set(row.order))
    assert bystanders <= alive


def test_pid_reused_between_plan_and_execution_is_not_signalled() -> None:
    """A planned pid reused before execution is not signalled by the executor."""
    table = FakeProcessTable(kill_effect=True)
    _foreign(table)
    _orphan_tree(table)
    plan = plan_reconcile([lease()], table, our_instance_id=US, now=10.0, retention_s=3600)
    table.remove(1001)
    table.add(1001, ppid=300, starttime=99, env={b"HOME": b"/x"})  # a stranger
    execute(plan, table)
    assert table.signalled == [table.identity(1002), ProcessIdentity(BOOT, 1000, 50)]
    assert table.process(1001) is not None
    assert table.process(1001).state == "S"  # type: ignore[union-attr]


@pytest.mark.parametrize("state", [LeaseState.OPEN, LeaseState.LOST])
def test_marker_carrier_in_the_leases_cgroup_is_proven(state: LeaseState) -> None:
    """Issue 20, item 2: with the root gone and no keeper, a marker carrier in the
    lease's own cgroup is proven a member (reaped); one outside it is only reported."""
    table = FakeProcessTable(kill_effect=True)
    _foreign(table)
    _gone_root_survivor_in_cgroup(table)
    table.add(1005, ppid=300, starttime=60, env=OURS)  # a claimant outside the cgroup
    rec = lease(state=state, cgroup_path="/cg/tether/L1")
    plan = plan_reconcile([rec], table, our_instance_id=US, now=10.0, retention_s=3600)
    assert [type(a) for a in plan] == [Steal, Reap, MarkClosed, Unproven]
    reap, claims = plan[1], plan[3]
    assert isinstance(reap, Reap)
    assert [i.pid for i in reap.pids_children_first] == [1003]
    assert isinstance(claims, Unproven)
    assert claims.pids == [1005]


def test_owned_lease_with_cgroup_kills_only_its_cgroup() -> None:
    """An owned lease with a populated cgroup gets that cgroup killed and nobody else's."""
    table = FakeProcessTable(kill_effect=True)
    _foreign(table)
    _orphan_tree(table)
    table.cgroups["/cg/tether/L1"] = [1000, 1001, 1002]
    table.cgroups["/cg/other"] = [300]
    rec = lease(cgroup_path="/cg/tether/L1")
    plan = plan_reconcile([rec], table, our_instance_id=US, now=10.0, retention_s=3600)
    assert isinstance(plan[0], Steal)
    assert isinstance(plan[1], Reap)
    assert plan[1].cgroup_path == "/cg/tether/L1"
    execute(plan, table)
    assert [s for s in table.signals if s[0] == "cgroup_kill"] == [
        ("cgroup_kill", "/cg/tether/L1", 9)
    ]
    assert {1, 300, 301} <= {i.pid for i in table.alive()}


def test_many_leases_mixed_world() -> None:
    """A mixed registry gets one decision per lease and signals only our orphans."""
    table = FakeProcessTable(kill_effect=True)
    _foreign(table)
    _orphan_tree(table)
    table.add(2000, starttime=70, env={b"TETHER_LEASE_ID": b"L3"}, cmdline=ARGV)
    leases = [
        lease(),
        lease(lease_id="L2", instance_id="instance-them", root_pid=301),
        lease(lease_id="L3", root_pid=2000, pgid=2000, starttime=70, owner_alive=True),
        lease(lease_id="L4", state=LeaseState.CLOSED, updated_at=-7200.0),
        lease(lease_id="L5", state=LeaseState.CLOSED, updated_at=0.0),
    ]
    plan = plan_reconcile(leases, table, our_instance_id=US, now=10.0, retention_s=3600)
    assert [(type(a).__name__, a.lease_id) for a in plan] == [
        ("Steal", "L1"),
        ("Reap", "L1"),
        ("MarkClosed", "L1"),
        ("Skip", "L2"),
        ("Skip", "L3"),
        ("Expire", "L4"),
    ]
    assert isinstance(plan[5], Expire)
    execute(plan, table)
    assert {i.pid for i in table.signalled} == {1000, 1001, 1002}


# --- lease contention (seed 003's OS matrix, row 8), over the real registry and executor ---


def _registry_lease(reg: Registry, lease_id: str, **fields: object) -> None:
    base: dict[str, object] = {
        "lease_id": lease_id,
        "session_key": "sess-contention",
        "owner_pid": 4242,
        "owner_starttime": 7,
        "root_pid": 1000,
        "pgid": 1000,
        "boot_id": BOOT,
        "pid_namespace": NS,
        "starttime": 50,
        "command_hash": command_hash(ARGV),
        "cwd": "/proj",
        "owner_instance_id": "S-dead",
        "lease_expires_at": time.time() - 1,
        "run_state": "running",
    }
    base.update(fields)
    reg.create_lease(**base)


def test_two_supervisors_one_expired_lease_one_steal_one_kill() -> None:
    """Two supervisors plan over one expired lease before either acts: exactly one
    steals it and signals its tree, each process once; the other touches nothing."""
    table = FakeProcessTable(kill_effect=True)
    _foreign(table)
    _orphan_tree(table)
    with Registry() as reg:
        metrics.attach(reg)
        try:
            _registry_lease(reg, "L1")
            first = reconcile_mod.plan(reg, table=table)
            second = reconcile_mod.plan(reg, table=table)
            assert [type(a) for a in first.actions] == [Steal, Reap, MarkClosed]
            won = reconcile_mod.carry_out(reg, first, grace=0.05)
            signals_after_winner = list(table.signals)
            lost = reconcile_mod.carry_out(reg, second, grace=0.05)
            row = reg.lease("L1")
            counters = reg.counters()
            stolen = reg.events("sess-contention", kind="lease_stolen")
        finally:
            metrics.attach(None)
    assert [d["kind"] for d in won] == ["steal", "reap", "markclosed"]
    assert not any(d.get("raced") for d in won)
    assert [d["kind"] for d in lost] == ["steal", "reap", "markclosed"]
    assert all(d.get("raced") for d in lost)
    assert "extinct" not in lost[1]  # the loser never executed its reap
    # One kill: nothing was signalled by the loser, and nobody twice.
    assert table.signals == signals_after_winner
    targets = [s[1] for s in table.signals]
    assert sorted(targets) == [1000, 1001, 1002]
    assert row is not None
    assert (row.state, row.stolen_from, row.reason) == ("closed", "S-dead", "owner-lost")
    assert counters["run_lease_steal_total"] == 1
    assert counters["run_reconcile_orphans_total"] == 3
    assert [e["payload"]["from"] for e in stolen] == ["S-dead"]


def test_healthy_lease_of_another_supervisor_is_left_alone() -> None:
    """A lease whose holder lives and whose expiry lies ahead is never touched, even
    with a reconciler's full powers over the same tree; expired, it is stolen."""
    table = FakeProcessTable(kill_effect=True)
    _foreign(table)
    _orphan_tree(table)
    table.add(4242, starttime=7, cmdline=[b"tether-owner"])  # the holder, alive
    with Registry() as reg:
        _registry_lease(reg, "L1", owner_instance_id="S-live", lease_expires_at=time.time() + 60)
        decisions = reconcile_mod.reconcile(reg, table=table, grace=0.05)
        assert [d["kind"] for d in decisions] == ["skip"]
        assert table.signals == []
        healthy = reg.lease("L1")
        assert healthy is not None
        assert (healthy.state, healthy.owner_instance_id) == ("open", "S-live")
        # The same holder, still alive but silent past its expiry: now it is stale.
        reg.update_lease("L1", lease_expires_at=time.time() - 0.5)
        decisions = reconcile_mod.reconcile(reg, table=table, grace=0.05)
        assert [d["kind"] for d in decisions] == ["steal", "reap", "markclosed"]
        assert "expired" in decisions[0]["why"]
    assert sorted(s[1] for s in table.signals) == [1000, 1001, 1002]
    assert table.process(4242) is not None
    assert table.process(4242).state == "S"  # type: ignore[union-attr]


def test_reconcile_lease_writes_follow_the_table() -> None:
    """Issue 9 item 14: reconcile moves a lease only through legal steps (never open ->
    closed), and a lease whose tree was gone before cleanup ends ``lost`` (seed 000)."""
    table = FakeProcessTable(kill_effect=True)
    _foreign(table)
    with Registry() as reg:
        _registry_lease(reg, "L1")
        calls: list[tuple[str, object]] = []
        real_advance = reg.advance_lease

        def spy(lease_id: str, event: LeaseInput, **kw: object) -> object:
            calls.append((lease_id, event))
            return real_advance(lease_id, event, **kw)  # type: ignore[arg-type]

        reg.advance_lease = spy  # type: ignore[method-assign]
        decisions = reconcile_mod.reconcile(reg, table=table, grace=0.05)
        row = reg.lease("L1")
        ended = reg.events("sess-contention", kind="agent_run_ended")
    assert [d["kind"] for d in decisions] == ["steal", "marklost"]
    assert calls == [("L1", LeaseInput.GONE_BEFORE_CLEANUP)]
    assert row is not None
    assert (row.state, row.reason) == ("lost", "owner-lost")
    assert len(ended) == 1
    assert "gone before cleanup" in ended[0]["payload"]["message"]
    assert table.signals == []
