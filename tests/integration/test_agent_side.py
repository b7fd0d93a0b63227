"""Everything Tether runs for an agent is the agent (issue 20, items 1 and 3).

Real owners and the mock agent. A command the agent runs in an ACP terminal (its own
keeper under the owner) cannot answer the session's questions. A member of the agent's
tree that escapes every boundary -- double fork, ``setsid``, ``execve`` with only
``PATH`` and ``TETHER_HOME``, out of the run's cgroup, then ``kill -9`` of its keeper
(``tests/fake_agents/escaper.py``) -- is ended by the owner, the run ends
``ownership-escape``; and one that kills its owner too is still its session's agent,
never the operator, and the next close finds it, ends it and counts it.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest
from tests.integration.test_owner import Cli, finish, wait_for
from tests.integration.test_questions import controller, wait_controllers
from tests.integration.test_supervise_real import _cgroup_capability, alive

from tether import _os
from tether.registry import Registry

pytestmark = pytest.mark.integration

FAKES = Path(__file__).resolve().parent.parent / "fake_agents"
SELF_ANSWER = FAKES / "self_answer.py"
ESCAPER = FAKES / "escaper.py"


def _cgroup_root() -> list[str]:
    """``--cgroup-root MOUNT`` where per-run cgroups are in use here (root), else []."""
    if os.environ.get("TETHER_NO_CGROUP") or _cgroup_capability() is not None:
        return []
    mount = _os.find_cgroup2_mount()
    return ["--cgroup-root", mount] if mount else []


def _escape(c: Cli, out: Path, *extra: str) -> tuple[int, int, int, int]:
    """Have ``c``'s agent start the escaper; (daemon pid, its start time, keeper, owner)."""
    argv = [sys.executable, str(ESCAPER), str(out), *_cgroup_root(), *extra]
    c.run("prompt", f"run {shlex.join(argv)}", rc=None)  # the turn dies with the keeper
    pid, start, keeper, owner = (int(w) for w in out.read_text().split()[:4])
    return pid, start, keeper, owner


def _end(pid: int, start: int) -> None:
    """A test's last resort for a daemon a failed assertion left alive (by identity)."""
    if not alive(pid, start):
        return
    fd = os.pidfd_open(pid)
    try:
        if alive(pid, start):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        os.close(fd)
    wait_for(lambda: not alive(pid, start), "the escapee to die", timeout=10.0)


def _escapes_counted() -> int:
    with Registry() as reg:
        return int(reg.counters().get("run_ownership_escape_total", 0))


def test_killing_its_keeper_is_an_escape_the_owner_ends(mock: Cli, tmp_path: Path) -> None:
    """The escapee that killed its keeper is ended by the owner (its subreaper of last
    resort); the run ends ownership-escape, journaled and counted; close is clean."""
    pid, start, _keeper, _owner = _escape(mock, tmp_path / "esc.txt")
    try:
        wait_for(lambda: not alive(pid, start), "the owner to end the escapee", timeout=15.0)
        ends = wait_for(
            lambda: [e for e in mock.journal() if e["kind"] == "agent_run_ended"],
            "the run's end to be journaled",
        )
        assert len(ends) == 1, ends
        assert ends[0]["message"].startswith("agent run ended: ownership-escape"), ends
        assert pid in ends[0]["escaped"], ends
        wait_for(_escapes_counted, "run_ownership_escape_total to count it")  # written async
        closed = mock.json("sessions", "close")
        assert closed["survivors"] == []
    finally:
        _end(pid, start)


def test_a_terminal_the_agent_created_cannot_answer_its_question(mock: Cli, tmp_path: Path) -> None:
    """A ``tether answer`` run in the agent's own terminal is refused; the question stays
    open for the operator's controller, whose answer is the one the agent gets."""
    key = mock.status()["sessionKey"]
    raw = controller(key, "w1")
    try:
        wait_controllers(mock, 1)
        out = tmp_path / "answer.txt"
        helper = [sys.executable, str(SELF_ANSWER), str(out), "--cwd", str(mock.project), "mock"]
        prompt = mock.popen("prompt", f"terminal --keep {shlex.join(helper)} ; tool edit x")
        frame = None
        while frame is None:
            got = raw.read()
            assert got is not None, "EOF before the question"
            if got.get("type") == "interaction":
                frame = got
        # The helper writes what its answer got: refused (or it would have resolved it).
        for _ in range(2000):  # bounded: 20 s
            if out.exists() and out.read_text().endswith("\n"):
                break
            time.sleep(0.01)
        result = out.read_text()
        code, _, text = result.partition("\n")
        assert code == "5", result
        assert "own" in text, result
        iid = frame["interaction"]["id"]
        raw.request("a1", "answer", {"interactionId": iid, "answer": "deny"})
        rc, stdout, _ = finish(prompt)
        assert rc == 0
        assert "permission: denied" in stdout or "rejected" in stdout, stdout
    finally:
        raw.__exit__()


def test_an_escapee_that_killed_keeper_and_owner_stays_its_sessions_agent(
    mock: Cli, tmp_path: Path
) -> None:
    """Recorded inside its run (it ran ``tether`` there), the escapee kills its owner and
    its keeper: re-parented far away, with no marker anywhere above it, it is still its
    session's agent -- another session's history is refused -- and ``reap --dry-run``
    reports it, ``sessions close`` ends it and counts it (survivors 0 is then true)."""
    mock.run("sessions", "new", "-s", "victim")
    out = tmp_path / "esc.txt"
    victim = ["--cwd", str(mock.project), "mock", "sessions", "history", "-s", "victim"]
    pid, start, _keeper, _owner = _escape(
        mock, out, "--ask-first", str(mock.project), "--kill-owner", "--then", *victim
    )
    try:
        wait_for(lambda: "rc=" in out.read_text(), "the escapee's history request")
        answer = out.read_text()
        assert "rc=0" not in answer, answer
        assert "denied" in answer, answer
        assert alive(pid, start)  # nothing above it was left to end it
        dry = mock.json("reap", "--dry-run")
        members = [d for d in dry["decisions"] if d["kind"] == "members"]
        assert [pid] == [p for d in members for p in d["pids"] if p == pid], dry
        assert alive(pid, start)  # a dry run signals nothing
        before = _escapes_counted()
        closed = mock.json("sessions", "close")
        assert pid in closed["escaped"], closed
        assert closed["survivors"] == [], closed
        assert not alive(pid, start)
        assert _escapes_counted() > before
    finally:
        _end(pid, start)
        mock.run("sessions", "close", "-s", "victim", rc=None)
