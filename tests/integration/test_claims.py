"""Issue 20, items 2, 5 and 6: a claim is not a proof; an exec'd agent can be verified;
one end, one TERM.

Real processes throughout. Every process a test here signals itself is its own child
(through ``Popen``) or a descendant whose parent and starttime were checked after
pinning it with a pidfd; the suite's subreaper catches anything left behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from tests._cli import run_tether
from tests.integration.test_owner import Cli
from tests.integration.test_supervise_real import (
    GRACE,
    Lines,
    Supervisor,
    alive,
    assert_lease,
    cgroup_mode,
    spec,
)

from tether.registry import Registry
from tether.supervise.reconcile import reconcile
from tether.supervise.run_state import TerminationReason
from tether.supervise.runner import spawn_agent

__all__ = ["cgroup_mode"]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process ownership is Linux"),
]

FAKES = Path(__file__).parents[1] / "fake_agents"
TERM_COUNTER = [sys.executable, str(FAKES / "term_counter.py")]


def _terms(log: Path) -> Counter[int]:
    """How many SIGTERMs each pid recorded."""
    if not log.exists():
        return Counter()
    return Counter(int(x) for x in log.read_text().split())


# --- item 6: one TERM per process -------------------------------------------------------


def test_close_sends_each_member_one_term(cgroup_mode: str, project_dir: Path) -> None:
    """A plain close: the keeper's TERM reaches the root, a same-group child and a setsid
    child exactly once each (group, walk and cgroup no longer add up), then KILL."""
    log = project_dir / "terms.log"

    async def main() -> dict[str, int]:
        with Registry() as reg:
            proc = await spawn_agent(spec([*TERM_COUNTER, str(log)], project_dir), reg)
            tree: dict[str, int] = await Lines(proc).wait_ready()
            report = await proc.aclose(TerminationReason.CLOSE)
            assert report.survivors == ()
            assert report.escalated  # they all ignore TERM: KILL after the grace
            return tree

    tree = asyncio.run(main())
    counts = _terms(log)
    assert {kind: counts[pid] for kind, pid in tree.items()} == {
        "root": 1,
        "same": 1,
        "setsid": 1,
    }


# --- item 2: a claim is not a proof ----------------------------------------------------------


def _lease_of(pid: int) -> str:
    """The lease marker in a process's environment (a run's agent)."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    return env[b"TETHER_LEASE_ID"].decode()


def _claimant(lease_id: str) -> subprocess.Popen[bytes]:
    """`env TETHER_LEASE_ID=<lease> setsid sleep 600 &`, as a user would start it."""
    env = {**os.environ, "TETHER_LEASE_ID": lease_id}
    return subprocess.Popen(["sleep", "600"], env=env, start_new_session=True)


def _end(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()  # our own unreaped child: Popen signals that very process
    proc.wait()


def test_close_reports_a_marker_claimant_and_never_signals_it(mock: Cli) -> None:
    """A process started outside Tether that carries the session's lease marker is not
    killed when the session closes: `close` reports it as unproven, survivors stay 0."""
    mock.run("prompt", "echo hi")
    lease_id = _lease_of(mock.status()["agentPid"])
    claimant = _claimant(lease_id)
    try:
        closed = mock.json("sessions", "close")
        assert claimant.poll() is None, "the claimant was signalled"
        assert closed["survivors"] == []
        assert closed["unproven"] == [claimant.pid]
        (ended,) = mock.history("agent_run_ended")
        assert ended["payload"]["unproven"] == [claimant.pid]
        assert_lease(lease_id, state="closed")
    finally:
        _end(claimant)


def test_reap_reports_a_marker_claimant_and_never_signals_it(cgroup_mode: str) -> None:
    """After its supervisor died, a stale lease's claimant (marker only) is shown by
    `reap --dry-run` as unproven, and `reap` leaves it alone and marks the lease lost."""
    sup = Supervisor(1, "sess-claim", ["--members", "same"])
    claimant: subprocess.Popen[bytes] | None = None
    try:
        (run_,) = sup.runs
        lease_id = run_["lease_id"]
        keeper = (run_["keeper"]["pid"], run_["keeper"]["starttime"])
        sup.signal(signal.SIGKILL)  # its keeper alone ends the tree
        sup.reap()
        for _ in range(200):
            if not alive(*keeper):
                break
            time.sleep(0.02)
        assert not alive(*keeper)
        claimant = _claimant(lease_id)
        dry = run_tether("--format", "json", "reap", "--dry-run", cwd=Path.cwd())
        assert dry.returncode == 0, dry.stderr
        shown = [d for d in json.loads(dry.stdout)["decisions"] if d["lease_id"] == lease_id]
        assert [d["kind"] for d in shown] == ["steal", "marklost", "unproven"], shown
        assert shown[2]["pids"] == [claimant.pid]
        with Registry() as reg:
            done = [d for d in reconcile(reg, grace=GRACE) if d["lease_id"] == lease_id]
        assert [d["kind"] for d in done] == ["steal", "marklost", "unproven"], done
        assert done[2]["pids"] == [claimant.pid]
        assert claimant.poll() is None, "the claimant was signalled"
        assert_lease(lease_id, state="lost")
    finally:
        if claimant is not None:
            _end(claimant)
        sup.close()
