"""Ownership verification, tree planning and verified signalling against the fake table."""

from __future__ import annotations

import signal

import pytest

from tether._os import ProcessIdentity
from tether._os._fake import FakeProcessTable
from tether.errors import IdentityUnverified
from tether.supervise.verify import (
    LeaseEvidence,
    Verdict,
    command_hash,
    marked_survivors,
    marker_for,
    plan_tree_kill,
    signal_verified,
    verify,
)

BOOT = "boot-A"
NS = "pid:[4026531836]"
ARGV = [b"node", b"agent.js", b"--name", b"my agent"]
MARK = {b"TETHER_LEASE_ID": b"L1"}


def evidence(**overrides: object) -> LeaseEvidence:
    base: dict[str, object] = {
        "lease_id": "L1",
        "instance_id": "I1",
        "boot_id": BOOT,
        "pid": 1000,
        "starttime": 50,
        "pgid": 1000,
        "command_hash": command_hash(ARGV),
        "pid_namespace": NS,
    }
    base.update(overrides)
    return LeaseEvidence(**base)  # type: ignore[arg-type]


def run(table: FakeProcessTable, ev: LeaseEvidence | None = None) -> Verdict:
    result = verify(ev or evidence(), table, our_instance_id="I1", our_boot_id=BOOT)
    assert result.reasons
    return result.verdict


def test_command_hash_is_the_same_for_str_and_bytes() -> None:
    """command_hash of an argv held as str equals that of the bytes read back from /proc."""
    assert command_hash(["node", "agent.js", "--name", "my agent"]) == command_hash(ARGV)
    assert command_hash(["a", "b"]) != command_hash(["a b"])
    assert command_hash(["ab"]) != command_hash(["a", "b"])


@pytest.mark.parametrize(
    ("setup", "ev", "verdict"),
    [
        pytest.param({}, {}, Verdict.OWNED, id="all-match"),
        pytest.param(None, {}, Verdict.GONE, id="no-such-pid"),
        pytest.param({"state": "Z"}, {}, Verdict.GONE, id="zombie"),
        pytest.param({"starttime": 51}, {}, Verdict.GONE, id="starttime-mismatch"),
        pytest.param({"env": {b"TETHER_LEASE_ID": b"L9"}}, {}, Verdict.GONE, id="other-marker"),
        pytest.param({"env": {}}, {}, Verdict.LOST, id="marker-absent"),
        pytest.param({"env_readable": False}, {}, Verdict.LOST, id="marker-unreadable"),
        pytest.param({"pgid": 7}, {}, Verdict.LOST, id="pgid-moved"),
        pytest.param({"pgid": 7}, {"pgid": None}, Verdict.OWNED, id="pgid-not-recorded"),
        pytest.param({"cmdline": [b"node", b"x"]}, {}, Verdict.LOST, id="argv-differs"),
        pytest.param({}, {"command_hash": None}, Verdict.OWNED, id="argv-not-recorded"),
        pytest.param({}, {"boot_id": "boot-Z"}, Verdict.GONE, id="other-boot"),
        pytest.param({}, {"pid_namespace": None}, Verdict.LOST, id="lease-ns-unknown"),
        pytest.param({}, {"pid_namespace": "pid:[1]"}, Verdict.LOST, id="other-ns"),
    ],
)
def test_verify_verdicts(
    setup: dict[str, object] | None, ev: dict[str, object], verdict: Verdict
) -> None:
    """Each piece of evidence that fails maps to the documented verdict."""
    table = FakeProcessTable()
    if setup is not None:
        kwargs: dict[str, object] = {"starttime": 50, "env": MARK, "cmdline": ARGV}
        kwargs.update(setup)
        table.add(1000, **kwargs)  # type: ignore[arg-type]
    assert run(table, evidence(**ev)) is verdict
    assert table.signals == []


def test_verify_fails_closed_when_proc_or_namespace_is_unknown() -> None:
    """An unreadable /proc or an unknown namespace of our own gives LOST, never GONE."""
    table = FakeProcessTable()
    table.add(1000, starttime=50, env=MARK, cmdline=ARGV)
    table.proc_readable = False
    assert run(table) is Verdict.LOST
    table.proc_readable = True
    table.pid_ns = None
    assert run(table) is Verdict.LOST


def test_verify_refuses_another_instances_lease() -> None:
    """Verifying another instance's lease raises IdentityUnverified without reading /proc."""
    table = FakeProcessTable()
    with pytest.raises(IdentityUnverified):
        verify(evidence(instance_id="I2"), table, our_instance_id="I1", our_boot_id=BOOT)
    assert table.calls == []


def test_plan_tree_kill_children_first_and_marker_only() -> None:
    """The plan lists marked descendants deepest first and skips unmarked or unreadable ones."""
    table = FakeProcessTable()
    table.add(1000, starttime=50, env=MARK)  # root
    table.add(1001, ppid=1000, starttime=51, env=MARK)  # child
    table.add(1002, ppid=1001, starttime=52, env=MARK)  # grandchild
    table.add(1003, ppid=1000, starttime=53, env={})  # adopted, no marker
    table.add(1004, ppid=1000, starttime=54, env=MARK, env_readable=False)  # unreadable
    table.add(1005, ppid=1, starttime=55, env=MARK)  # setsid escapee, reparented
    table.add(1006, ppid=1005, starttime=56, env=MARK)  # its child
    table.add(1007, ppid=1001, starttime=57, env=MARK, state="Z")  # zombie
    table.add(2000, ppid=1, starttime=9, env={b"TETHER_LEASE_ID": b"L2"})  # other lease
    plan = plan_tree_kill(1000, table, marker_for("L1"))
    assert plan == [1002, 1006, 1001, 1005, 1000]
    assert table.signals == []


def test_marker_scan_reads_one_file_per_process_without_the_marker() -> None:
    """The survivor scan reads a stranger's environment only: stat is for marker carriers
    (issue 23: on a host of hundreds of processes the scan was most of a close)."""
    table = FakeProcessTable()
    for pid in range(3000, 3200):
        table.add(pid, ppid=1, starttime=pid, env={b"PATH": b"/bin"})
    table.add(1005, ppid=1, starttime=55, env=MARK)  # setsid escapee, reparented
    table.add(1007, ppid=1005, starttime=57, env=MARK, state="Z")  # zombie: not a survivor
    assert marked_survivors(table, marker_for("L1")) == [1005]
    stats = {call[1] for call in table.calls if call[0] == "stat"}
    assert stats <= {1005, 1007}, sorted(stats)[:10]


def test_plan_tree_kill_excludes_ourselves() -> None:
    """A pid in exclude (ourselves, our ancestry) is never planned, marker or not."""
    table = FakeProcessTable()
    table.add(1000, starttime=50, env=MARK)
    table.add(1001, ppid=1000, starttime=51, env=MARK)
    assert plan_tree_kill(1000, table, marker_for("L1"), exclude=[1000]) == [1001]


def test_signal_verified_signals_the_pinned_identity() -> None:
    """A matching identity is signalled once through a pidfd that is then closed."""
    table = FakeProcessTable()
    table.add(1000, starttime=50, env=MARK)
    ident = ProcessIdentity(BOOT, 1000, 50)
    assert signal_verified(table, ident, signal.SIGTERM, marker=marker_for("L1")) is True
    assert table.signals == [("pidfd", 1000, signal.SIGTERM)]
    assert table.signalled == [ident]
    assert table.open_fds == []


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda t: t.reuse(1000, starttime=99, env=MARK), id="pid-reused"),
        pytest.param(lambda t: t.remove(1000), id="gone"),
        pytest.param(lambda t: setattr(t, "boot", "boot-B"), id="rebooted"),
        pytest.param(lambda t: setattr(t, "proc_readable", False), id="proc-unreadable"),
        pytest.param(lambda t: t.reuse(1000, starttime=50, env={}), id="same-start-no-marker"),
    ],
)
def test_signal_verified_refuses_unproven_identities(mutate: object) -> None:
    """When the identity no longer holds at signal time, nothing is signalled and False returns."""
    table = FakeProcessTable()
    table.add(1000, starttime=50, env=MARK)
    ident = ProcessIdentity(BOOT, 1000, 50)
    mutate(table)  # type: ignore[operator]
    assert signal_verified(table, ident, signal.SIGKILL, marker=marker_for("L1")) is False
    assert table.signals == []
    assert table.open_fds == []


def test_signal_verified_rechecks_after_opening() -> None:
    """A reuse between pidfd_open and the signal is caught by the re-check after opening."""

    class RacyTable(FakeProcessTable):
        def pidfd_open(self, pid: int) -> int:
            fd = super().pidfd_open(pid)
            # The original exits and is reaped, and an unrelated process takes the pid.
            self.reuse(pid, starttime=77, env=MARK)
            return fd

    table = RacyTable()
    table.add(1000, starttime=50, env=MARK)
    assert signal_verified(table, ProcessIdentity(BOOT, 1000, 50), signal.SIGKILL) is False
    assert table.signals == []
    assert table.open_fds == []


EXECED = [b"/usr/bin/python3", b"/venv/bin/tether-mock-agent"]  # what `env FOO=1 …` became


@pytest.mark.parametrize(
    ("keeper", "ppid", "ev", "verdict"),
    [
        pytest.param({}, 900, {}, Verdict.OWNED, id="parent-is-the-verified-keeper"),
        pytest.param(None, 900, {}, Verdict.LOST, id="keeper-gone"),
        pytest.param({"starttime": 41}, 900, {}, Verdict.LOST, id="keeper-pid-reused"),
        pytest.param({"state": "Z"}, 900, {}, Verdict.LOST, id="keeper-a-zombie"),
        pytest.param({"env": {}}, 900, {}, Verdict.LOST, id="keeper-unmarked"),
        pytest.param({}, 1, {}, Verdict.LOST, id="parent-is-not-the-keeper"),
        pytest.param({}, 900, {"keeper_pid": None}, Verdict.LOST, id="keeper-not-recorded"),
    ],
)
def test_an_agent_that_exec_d_is_verified_by_its_keeper(
    keeper: dict[str, object] | None, ppid: int, ev: dict[str, object], verdict: Verdict
) -> None:
    """Issue 20, item 5: a root whose argv changed by its own exec (a shebang script, an
    exec'ing wrapper, an npm shim) is OWNED while its parent is the lease's keeper, that
    very process; without that proof a changed argv stays LOST."""
    table = FakeProcessTable()
    if keeper is not None:
        table.add(900, **{"ppid": 800, "starttime": 40, "env": MARK, **keeper})  # type: ignore[arg-type]
    table.add(1000, ppid=ppid, starttime=50, env=MARK, cmdline=EXECED)
    assert run(table, evidence(**{"keeper_pid": 900, "keeper_starttime": 40, **ev})) is verdict
