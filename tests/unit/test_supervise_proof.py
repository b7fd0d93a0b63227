"""Membership proof (issue 20, item 2) and the keeper's one-signal bookkeeping (item 6)."""

from __future__ import annotations

import signal

from tether._os import ProcessIdentity, ProcStat
from tether._os._fake import FakeProcessTable
from tether.supervise.keeper_signals import SentSignals
from tether.supervise.proof import descends_from, split_claims, split_run_claims, verified_keeper
from tether.supervise.verify import marker_for

MARK = {b"TETHER_LEASE_ID": b"L1"}


def _world() -> FakeProcessTable:
    t = FakeProcessTable()
    t.add(1, starttime=1)
    t.add(300, starttime=20)  # the user's shell
    t.add(900, ppid=800, starttime=40, env=MARK)  # the keeper
    t.add(1000, ppid=900, starttime=50, env=MARK)  # the agent root
    t.add(1001, ppid=1000, starttime=51, env=MARK)
    t.add(1003, ppid=1, starttime=53, env=MARK)  # reparented to init: a claim only
    t.add(1005, ppid=300, starttime=60, env=MARK)  # `env TETHER_LEASE_ID=L1 sleep` by hand
    return t


def test_descends_from_walks_ppid_links_to_an_anchor() -> None:
    """A process is below an anchor when a ppid chain reaches it; the anchor counts itself."""
    t = _world()
    assert descends_from(t, 1001, [900])
    assert descends_from(t, 900, [900])
    assert not descends_from(t, 1003, [900])
    assert not descends_from(t, 1005, [900])
    assert not descends_from(t, 4242, [900])  # no such pid proves nothing


def test_split_claims_signals_only_what_is_proven() -> None:
    """Marker carriers below an anchor or in the cgroup are proven; the rest are claims."""
    t = _world()
    pids = [1001, 1000, 1003, 1005]
    assert split_claims(t, pids, anchors=[900]) == ([1001, 1000], [1003, 1005])
    assert split_claims(t, pids, anchors=[900], cgroup_members=[1003]) == (
        [1001, 1000, 1003],
        [1005],
    )
    assert split_claims(t, pids, anchors=[]) == ([], pids)


def test_verified_keeper_needs_its_very_identity_and_marker() -> None:
    """The keeper anchors a proof only as that very process: starttime, alive, marked."""
    t = _world()
    mark = marker_for("L1")
    assert verified_keeper(t, "b", 900, 40, mark) == ProcessIdentity("b", 900, 40)
    assert verified_keeper(t, "b", 900, 41, mark) is None
    assert verified_keeper(t, "b", None, 40, mark) is None
    assert verified_keeper(t, "b", 300, 20, mark) is None  # unmarked: not the keeper


def test_sent_signals_once_per_process() -> None:
    """The group signal goes once; a process reached by it, or signalled by identity, is
    not signalled again with the same signal (another signal is still due)."""
    sent = SentSignals()
    term, kill = signal.SIGTERM, signal.SIGKILL
    assert sent.group_due(term)
    # 1001 stayed in the group across the killpg; 1002 left it in between.
    sent.group_sent(term, [(1001, 51), (1002, 52)], lambda pid: pid == 1001)
    assert not sent.group_due(term)
    assert sent.group_due(kill)
    assert not sent.due(term, (1001, 51))
    assert sent.due(term, (1002, 52))
    sent.sent(term, (1002, 52))
    assert not sent.due(term, (1002, 52))
    assert sent.due(kill, (1002, 52))
    assert sent.due(term, (1002, 99))  # same pid, another process


class _ReapedMidWalk(FakeProcessTable):
    """The first stat of ``intermediate`` finds it reaped: its child was reparented to
    ``adopter`` before that (the kernel reparents in exit, before the zombie is reaped)."""

    intermediate = 0
    adopter = 0

    def stat(self, pid: int) -> ProcStat | None:
        if pid == self.intermediate and self.process(pid) is not None:
            for child in self.children(pid):
                proc = self.process(child)
                assert proc is not None
                proc.ppid = self.adopter
            self.remove(pid)
        return super().stat(pid)


def test_split_run_claims_drops_claimants_that_exited_before_the_cgroup_read() -> None:
    """A carrier found by the scan that exits before cgroup.procs is read is neither
    proven nor unproven: it is gone (the flaky `killed_reconcile_reaps[cgroup]`)."""
    t = _world()
    t.add(1010, ppid=1, starttime=70, env=MARK)  # in the cgroup, alive
    t.add(1011, ppid=1010, starttime=71, env=MARK)  # in the cgroup, exits meanwhile
    t.cgroups["/cg"] = [1010, 1011]
    real = t.cgroup_procs

    def read_after_exit(path: str) -> list[int]:
        t.remove(1011)
        return real(path)

    t.cgroup_procs = read_after_exit  # type: ignore[method-assign]
    pids = [1011, 1010, 1005]
    assert split_run_claims(t, pids, anchors=[900], cgroup_path="/cg") == ([1010], [1005])


def test_split_run_claims_walks_again_when_an_ancestor_is_reaped_mid_walk() -> None:
    """A walk broken by an intermediate reaped under it is retried once: the orphan now
    hangs below the subreaper anchor that adopted it, so it is proven, not a claim."""
    t = _ReapedMidWalk()
    t.add(800, starttime=30)  # the supervisor, a subreaper: the anchor
    t.add(1020, ppid=800, starttime=80)  # a double fork's intermediate (unmarked)
    t.add(1021, ppid=1020, starttime=81, env=MARK)  # the daemon
    t.add(1005, ppid=1, starttime=60, env=MARK)  # a claim by hand
    t.intermediate, t.adopter = 1020, 800
    assert split_run_claims(t, [1021, 1005], anchors=[800], cgroup_path=None) == ([1021], [1005])
