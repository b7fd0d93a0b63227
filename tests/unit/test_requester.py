"""Who is asking: the environment claim checked against a (fake) kernel."""

from __future__ import annotations

import os
import socket

import pytest

from tether._os._fake import FakeProcessTable
from tether.policy.requester import peer_pid, resolve, resolve_peer
from tether.policy.visibility import Visibility
from tether.state.registry import Registry

# pid 100: the owner of session "parent"; 101: its keeper; 102: the agent; 103: a shell
# the agent ran; 104: `tether` run from that shell. 200: an unrelated terminal.
CGROUP = "/sys/fs/cgroup/tether/lease-p"


@pytest.fixture
def world() -> tuple[Registry, FakeProcessTable]:
    table = FakeProcessTable()
    table.add(100, starttime=1000)
    table.add(101, ppid=100, starttime=1001)
    table.add(102, ppid=101, starttime=1002)
    table.add(103, ppid=102, starttime=1003)
    table.add(104, ppid=103, starttime=1004)
    table.add(200, starttime=2000)
    table.add(201, ppid=200, starttime=2001)
    reg = Registry()
    for key, label in (("parent", "claude"), ("other", "codex")):
        reg.upsert_session(key=key, name=key, agent_command=["a"], agent_label=label, cwd="/p")
    reg.create_lease(
        lease_id="lease-p",
        session_key="parent",
        keeper_pid=101,
        keeper_starttime=1001,
        boot_id=table.boot,
        command_hash="h",
        cwd="/p",
    )
    yield reg, table
    reg.close()


def test_no_claim_outside_every_tree_is_the_operator(world: tuple) -> None:
    reg, table = world
    resolved = resolve(reg, pid=201, environ={}, table=table)
    assert resolved.requester is None
    assert "operator" in resolved.proof


def test_proven_claim_gets_the_configured_level(world: tuple) -> None:
    reg, table = world
    resolved = resolve(reg, pid=104, environ={"TETHER_SESSION_KEY": "parent"}, table=table)
    assert resolved.requester is not None
    assert (resolved.requester.session_key, resolved.requester.clamp) == ("parent", None)
    assert resolved.requester.agent_id == "claude"
    assert resolved.lease_id == "lease-p"


def test_stripped_environment_is_still_the_kernels_session(world: tuple) -> None:
    """An agent cannot become the operator by clearing its environment."""
    reg, table = world
    resolved = resolve(reg, pid=104, environ={}, table=table)
    assert resolved.requester is not None
    assert resolved.requester.session_key == "parent"


def test_forged_claim_inside_a_tree_gets_its_own_session_clamped(world: tuple) -> None:
    reg, table = world
    resolved = resolve(reg, pid=104, environ={"TETHER_SESSION_KEY": "other"}, table=table)
    assert resolved.requester is not None
    assert (resolved.requester.session_key, resolved.requester.clamp) == (
        "parent",
        Visibility.SELF,
    )


def test_claim_outside_every_tree_is_unproven_and_clamped(world: tuple) -> None:
    reg, table = world
    resolved = resolve(reg, pid=201, environ={"TETHER_SESSION_KEY": "parent"}, table=table)
    assert resolved.requester is not None
    assert (resolved.requester.session_key, resolved.requester.clamp) == (
        "parent",
        Visibility.SELF,
    )
    assert "unproven" in resolved.proof


def test_recycled_keeper_pid_proves_nothing(world: tuple) -> None:
    """A process at the keeper's pid with another start time is not that keeper."""
    reg, table = world
    table.remove(104)
    table.remove(103)
    table.remove(102)
    table.remove(101)
    table.add(101, ppid=100, starttime=5000)
    table.add(102, ppid=101, starttime=5001)
    resolved = resolve(reg, pid=102, environ={"TETHER_SESSION_KEY": "parent"}, table=table)
    assert resolved.requester is not None
    assert resolved.requester.clamp is Visibility.SELF
    assert resolved.lease_id is None


def test_leaving_the_cgroup_clamps_to_self(world: tuple) -> None:
    reg, table = world
    reg.update_lease("lease-p", cgroup_path=CGROUP)
    table.cgroups[CGROUP] = [102, 103]  # 104 moved itself out
    inside = resolve(reg, pid=103, environ={}, table=table)
    assert inside.requester is not None
    assert inside.requester.clamp is None
    escaped = resolve(reg, pid=104, environ={}, table=table)
    assert escaped.requester is not None
    assert (escaped.requester.session_key, escaped.requester.clamp) == ("parent", Visibility.SELF)


def test_unreadable_proc_makes_a_claim_unproven(world: tuple) -> None:
    reg, table = world
    table.proc_readable = False
    resolved = resolve(reg, pid=104, environ={"TETHER_SESSION_KEY": "parent"}, table=table)
    assert resolved.requester is not None
    assert resolved.requester.clamp is Visibility.SELF


def test_peer_pid_is_the_kernels_answer() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        assert peer_pid(a) == os.getpid()
        with Registry() as reg:
            assert resolve_peer(reg, a, None).requester is None


def test_a_claim_for_another_install_is_no_claim_here(world: tuple) -> None:
    """An agent of another TETHER_HOME running this install's tether is its operator."""
    reg, table = world
    env = {"TETHER_SESSION_KEY": "parent", "TETHER_INSTANCE_ID": "another-install"}
    assert resolve(reg, pid=201, environ=env, table=table).requester is None
    same = {"TETHER_SESSION_KEY": "parent", "TETHER_INSTANCE_ID": reg.instance_id}
    resolved = resolve(reg, pid=201, environ=same, table=table)
    assert resolved.requester is not None
    assert resolved.requester.clamp is Visibility.SELF


def test_a_claim_never_gains_anything(world: tuple) -> None:
    """For every caller, claim and level: what a claim reaches ⊆ what no claim reaches."""
    from tether.policy.ownership import row_of
    from tether.policy.visibility import A2APolicy, can_see

    reg, table = world
    reg.upsert_session(
        key="kid",
        name="kid",
        agent_command=["a"],
        agent_label="codex",
        cwd="/p",
        owner={"spawned_by": "parent"},
    )
    rows = [row_of(s) for s in reg.sessions()]
    policies = [A2APolicy(), A2APolicy(enabled=True, allow=("*",))]
    for pid in (102, 104, 201):
        honest = resolve(reg, pid=pid, environ={}, table=table).requester
        for claim in ("parent", "other", "kid", "ghost", ""):
            claimed = resolve(reg, pid=pid, environ={"TETHER_SESSION_KEY": claim}, table=table)
            for level in Visibility:
                for a2a in policies:
                    for row in rows:
                        if can_see(row, claimed.requester, level, a2a).allowed:
                            assert can_see(row, honest, level, a2a).allowed, (pid, claim, row)


# --- issue 20: escaped members keep their identity ----------------------------------------


def test_a_recorded_member_that_moved_away_is_never_the_operator(world: tuple) -> None:
    """Recorded while inside, the process (and its child) re-parented to init with no
    claim at all is still its session's agent, clamped to self."""
    reg, table = world
    reg.record_members("lease-p", "parent", table.boot, [(300, 3000)], "adopted")
    table.add(300, ppid=1, starttime=3000)
    table.add(301, ppid=300, starttime=3001)
    for pid in (300, 301):
        resolved = resolve(reg, pid=pid, environ={}, table=table)
        assert resolved.requester is not None, resolved.proof
        assert (resolved.requester.session_key, resolved.requester.clamp) == (
            "parent",
            Visibility.SELF,
        )
        assert resolved.lease_id == "lease-p"


def test_a_recorded_identity_of_another_process_proves_nothing(world: tuple) -> None:
    """Same pid, another start time (a recycled pid), or another boot: the operator."""
    reg, table = world
    reg.record_members("lease-p", "parent", table.boot, [(300, 2999)], "adopted")
    reg.record_members("lease-p", "parent", "another-boot", [(301, 3001)], "adopted")
    table.add(300, ppid=1, starttime=3000)
    table.add(301, ppid=1, starttime=3001)
    for pid in (300, 301):
        assert resolve(reg, pid=pid, environ={}, table=table).requester is None


def test_below_an_owner_outside_its_keepers_is_that_sessions_agent(world: tuple) -> None:
    """What a killed keeper left is re-parented to the owner: that session's, clamped."""
    reg, table = world
    reg.begin_owner("other", pid=100, starttime=1000, socket="/s", boot_id=table.boot)
    table.add(400, ppid=100, starttime=4000)  # an orphan the owner adopted
    resolved = resolve(reg, pid=400, environ={}, table=table)
    assert resolved.requester is not None
    assert (resolved.requester.session_key, resolved.requester.clamp) == ("other", Visibility.SELF)


def test_a_caller_proven_inside_is_recorded_up_to_its_keeper(world: tuple) -> None:
    reg, table = world
    resolve(reg, pid=104, environ={}, table=table, record=True)
    recorded = {(m.pid, m.starttime, m.lease_id, m.how) for m in reg.members(lease_id="lease-p")}
    assert recorded == {
        (104, 1004, "lease-p", "requester"),
        (103, 1003, "lease-p", "requester"),
        (102, 1002, "lease-p", "requester"),
    }
    reg.forget_members(reg.members(lease_id="lease-p"))
    assert reg.members() == []
