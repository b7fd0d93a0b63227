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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests._cli import run_tether
from tests.integration.test_owner import Cli, signal_descendant, stop_outside_writes
from tests.integration.test_supervise_real import (
    GRACE,
    Lines,
    Supervisor,
    alive,
    assert_lease,
    cgroup_mode,
    spec,
    starttime_of,
)

from tether.state.registry import Registry
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
ESCAPE_TREE_ARGV = [sys.executable, str(FAKES / "escape_tree.py")]


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


# --- items 5 and 6: a stale lease stolen from a stopped supervisor ---------------------------


def wait_expired(lease_id: str) -> None:
    """Wait (bounded) until the lease's expiry has passed: its holder stopped renewing."""
    with Registry() as reg:
        for _ in range(200):
            lease = reg.lease(lease_id)
            assert lease is not None
            if lease.lease_expires_at is not None and lease.lease_expires_at <= time.time():
                return
            time.sleep(0.05)
    raise AssertionError("the lease never expired")


def _expire_stopped(sup: Supervisor, lease_id: str) -> None:
    """Stop the supervisor (alive but silent) and wait until its lease has expired."""
    sup.signal(signal.SIGSTOP)
    wait_expired(lease_id)


@pytest.fixture
def short_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_LEASE_HEARTBEAT_S", "0.1")
    monkeypatch.setenv("TETHER_LEASE_TTL_S", "1.0")


def _shebang_agent(tmp_path: Path) -> list[str]:
    """The escape tree behind a shebang: the kernel runs `python script`, not `script`."""
    script = tmp_path / "escape-tree-agent"
    script.write_text(f"#!{sys.executable}\n" + (FAKES / "escape_tree.py").read_text())
    script.chmod(0o755)
    return [str(script)]


@pytest.mark.usefixtures("short_lease")
@pytest.mark.parametrize("wrapper", ["env", "shebang"])
def test_stale_lease_of_an_exec_d_agent_is_stolen_and_reaped(
    cgroup_mode: str, wrapper: str, tmp_path: Path
) -> None:
    """Item 5: an agent started through an exec'ing wrapper (`env FOO=1 agent`) or a
    shebang script no longer has the argv Tether recorded; its stale lease is still
    verified (its parent is the lease's keeper), stolen, and its tree ended."""
    agent = ["env", "FOO=1", *ESCAPE_TREE_ARGV] if wrapper == "env" else _shebang_agent(tmp_path)
    sup = Supervisor(1, "sess-exec", ["--members", "same,setsid"], agent=agent)
    try:
        (run_,) = sup.runs
        lease_id = run_["lease_id"]
        targets = [
            (run_["tree"]["root"]["pid"], run_["tree"]["root"]["starttime"]),
            *[(m["pid"], m["starttime"]) for m in run_["tree"]["members"].values()],
            (run_["keeper"]["pid"], run_["keeper"]["starttime"]),
        ]
        _expire_stopped(sup, lease_id)
        with Registry() as reg:
            done = [d for d in reconcile(reg, grace=GRACE) if d["lease_id"] == lease_id]
        assert [d["kind"] for d in done] == ["steal", "reap", "markclosed"], done
        assert done[1]["extinct"] is True
        assert not [t for t in targets if alive(*t)]
        assert_lease(lease_id, state="closed")
    finally:
        sup.close()


@pytest.mark.usefixtures("short_lease")
def test_a_stolen_lease_gives_each_member_one_term(cgroup_mode: str, tmp_path: Path) -> None:
    """Item 6: a stale lease whose keeper still lives is ended by that keeper -- the
    reconciler asks it once -- so each member gets one SIGTERM, not the reaper's and
    then the keeper's."""
    log = tmp_path / "terms.log"
    sup = Supervisor(1, "sess-one-term", [str(log)], agent=TERM_COUNTER)
    try:
        (run_,) = sup.runs
        lease_id = run_["lease_id"]
        tree: dict[str, int] = run_["tree"]
        _expire_stopped(sup, lease_id)
        with Registry() as reg:
            done = [d for d in reconcile(reg, grace=GRACE) if d["lease_id"] == lease_id]
        assert [d["kind"] for d in done] == ["steal", "reap", "markclosed"], done
        assert done[1]["extinct"] is True
        counts = _terms(log)
        assert {kind: counts[pid] for kind, pid in tree.items()} == {
            "root": 1,
            "same": 1,
            "setsid": 1,
        }
    finally:
        sup.close()


@pytest.mark.usefixtures("short_lease")
def test_a_stolen_run_s_end_is_reported_once_and_truly(cli: Callable[..., Cli]) -> None:
    """Item 6: a session's owner is stopped past its lease; `tether reap` steals the lease
    and ends the run, reporting that the owner went silent (not that it died); once the
    owner continues, it does not report the same run's end a second time."""
    c = cli()
    c.run("sessions", "new")
    c.run("prompt", "echo hi")
    before = c.status()
    owner, agent = before["ownerPid"], before["agentPid"]
    lease_id = _lease_of(agent)
    agent_ident = (agent, starttime_of(agent))
    stop_outside_writes(owner)
    try:
        wait_expired(lease_id)
        reaped = run_tether("--format", "json", "reap", cwd=c.project)
        assert reaped.returncode == 0, reaped.stderr
        mine = [d for d in json.loads(reaped.stdout)["decisions"] if d["lease_id"] == lease_id]
        assert [d["kind"] for d in mine] == ["steal", "reap", "markclosed"], mine
        assert not alive(*agent_ident)
    finally:
        signal_descendant(owner, signal.SIGCONT)
    # The continued owner notices its run ended; then it serves a new one.
    assert "again" in c.run("prompt", "echo again").stdout
    with Registry() as reg:
        audit = list(reg.events(before["sessionKey"], kind="agent_run_ended"))
    journal = [e["payload"] for e in c.history("agent_run_ended")]
    ends = [e for e in [*audit, *journal] if _lease_id_of(e) == lease_id]
    assert len(ends) == 1, ends
    (end,) = ends
    assert "stopped renewing its lease" in str(_payload(end)["message"])
    assert "died" not in str(_payload(end)["message"])


def _payload(entry: dict[str, Any]) -> dict[str, Any]:
    payload = entry.get("payload", entry)
    return payload if isinstance(payload, dict) else {}


def _lease_id_of(entry: dict[str, Any]) -> object:
    return _payload(entry).get("leaseId")


def test_offline_close_reports_a_marker_claimant_and_never_signals_it(mock: Cli) -> None:
    """With the owner killed (its keeper ended the tree), an offline `close` reconciles
    the stale lease: the claimant is listed under `unproven` and left running."""
    mock.run("prompt", "echo hi")
    before = mock.status()
    lease_id = _lease_of(before["agentPid"])
    agent = (before["agentPid"], starttime_of(before["agentPid"]))
    signal_descendant(before["ownerPid"], signal.SIGKILL)
    for _ in range(250):
        if not alive(*agent):
            break
        time.sleep(0.02)
    assert not alive(*agent)
    claimant = _claimant(lease_id)
    try:
        closed = mock.json("sessions", "close")
        assert "reconciled" in closed
        assert claimant.poll() is None, "the claimant was signalled"
        assert closed["survivors"] == []
        assert closed["unproven"] == [claimant.pid]
        assert_lease(lease_id, state="lost")
    finally:
        _end(claimant)


def test_keeper_killed_claimant_leaves_the_run_unproven(mock: Cli) -> None:
    """The keeper is SIGKILLed, so no ECHILD proof comes: the owner's sweep leaves a
    marker claimant alone, reports it, and -- unable to prove the run extinct -- ends
    the lease lost rather than closed."""
    mock.run("prompt", "echo hi")
    agent = mock.status()["agentPid"]
    lease_id = _lease_of(agent)
    agent_ident = (agent, starttime_of(agent))
    with Registry() as reg:
        lease = reg.lease(lease_id)
    assert lease is not None
    assert lease.keeper_pid is not None
    claimant = _claimant(lease_id)
    try:
        signal_descendant(lease.keeper_pid, signal.SIGKILL)
        for _ in range(250):
            with Registry() as reg:
                now = reg.lease(lease_id)
            if now is not None and now.state in ("closed", "lost") and not alive(*agent_ident):
                break
            time.sleep(0.02)
        ended = assert_lease(lease_id, state="lost")
        assert f"unproven=[{claimant.pid}]" in (ended.note or "")
        assert claimant.poll() is None, "the claimant was signalled"
    finally:
        _end(claimant)
