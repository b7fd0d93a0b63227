"""Everything Tether runs for an agent is the agent (issue 20, items 1 and 3).

Real owners and the mock agent. A command the agent runs in an ACP terminal (its own
keeper under the owner) cannot answer the session's questions. A member of the agent's
tree that escapes every boundary -- double fork, ``setsid``, ``execve`` with only
``PATH`` and ``TETHER_HOME``, out of the run's cgroup, then ``kill -9`` of its keeper
(``tests/fake_agents/escaper.py``) -- is ended by the owner, the run ends
``ownership-escape``; and one that kills its owner too is still its session's agent,
never the operator, and the next close finds it, ends it and counts it. The escapes
are tried as root and as a regular user (``nobody``, every capability dropped) in a
cgroup v2 subtree delegated to it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_owner import Cli, finish, wait_for
from tests.integration.test_questions import controller, wait_controllers
from tests.integration.test_supervise_real import _cgroup_capability, alive

from tether import _os
from tether.state.registry import Registry

pytestmark = pytest.mark.integration

FAKES = Path(__file__).resolve().parent.parent / "fake_agents"
SELF_ANSWER = FAKES / "self_answer.py"
ESCAPER = FAKES / "escaper.py"


UNPRIVILEGED = 65534  # nobody: the regular user the escapes are tried as, too


class UserCli(Cli):
    """:class:`Cli` as a regular user (``setpriv``, every capability dropped), in a
    cgroup v2 subtree delegated to that user (where cgroups are writable here)."""

    def __init__(self, project: Path, home: Path, delegated: Path | None, python: str) -> None:
        super().__init__(project)
        self.env["TETHER_HOME"] = str(home)
        self.delegated = delegated
        self.python = python

    def argv(self, *args: str, fmt: str = "text") -> list[str]:
        drop = [
            "setpriv",
            f"--reuid={UNPRIVILEGED}",
            f"--regid={UNPRIVILEGED}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ]
        cli = [self.python, "-m", "tether", "--cwd", str(self.project), "--format", fmt]
        inner = [*drop, *cli, *self.agent, *args]
        if self.delegated is None:
            return inner
        # Start inside the delegated subtree, so the user's processes live there.
        enter = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
        return ["sh", "-c", enter, str(self.delegated), *inner]


def _user_python(base: Path) -> str:
    """An interpreter the regular user may run, seeing this worktree's packages.

    Ours may live where only root can reach (a pyenv under /root): a bare venv of the
    system's python 3 of the same minor version, whose ``.pth`` adds our site-packages.
    """
    system = f"/usr/bin/python3.{sys.version_info.minor}"
    if not os.access(system, os.X_OK):
        pytest.skip(f"no {system} for the regular user")
    venv = base / "venv"
    subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    ours = sysconfig.get_paths()["purelib"]
    (site / "tether_worktree.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return str(venv / "bin" / "python")


def _home(c: Cli) -> str:
    return c.env.get("TETHER_HOME") or os.environ["TETHER_HOME"]


@pytest.fixture(params=["root", "regular-user"])
def who(request: pytest.FixtureRequest, cli: Any, tmp_path: Path) -> Iterator[Cli]:
    """The mock agent's session, run as root and as a regular user."""
    if request.param == "root":
        c: Cli = cli()
        c.run("sessions", "new")
        yield c
        return
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as a regular user")
    # Not under pytest's tmp_path: it is private to root.
    base = Path(tempfile.mkdtemp(prefix="tether-user-"))
    os.chmod(base, 0o755)
    home, project = base / "home", base / "project"
    for d in (home, project):
        d.mkdir()
        os.chown(d, UNPRIVILEGED, UNPRIVILEGED)
    mount = _os.find_cgroup2_mount() if _cgroup_capability() is None else None
    delegated: Path | None = None
    if mount is not None:
        delegated = Path(mount) / f"tether-test-user-{os.getpid()}-{os.urandom(3).hex()}"
        delegated.mkdir()
        for name in ("cgroup.procs", "cgroup.subtree_control", "cgroup.threads"):
            os.chown(delegated / name, UNPRIVILEGED, UNPRIVILEGED)
        os.chown(delegated, UNPRIVILEGED, UNPRIVILEGED)
    c = UserCli(project, home, delegated, _user_python(base))
    try:
        c.run("sessions", "new")
        yield c
    finally:
        c.run("sessions", "close", rc=None)
        for proc in c.callers:
            finish(proc)
        if delegated is not None:
            procs = delegated / "cgroup.procs"
            wait_for(lambda: not procs.read_text().split(), "the delegated cgroup to empty")
            delegated.rmdir()
        shutil.rmtree(base, ignore_errors=True)


def _cgroup_root() -> list[str]:
    """``--cgroup-root MOUNT`` where cgroup v2 is mounted and writable to root here."""
    if _cgroup_capability() is not None:
        return []
    mount = _os.find_cgroup2_mount()
    return ["--cgroup-root", mount] if mount else []


def _out(c: Cli, tmp_path: Path) -> Path:
    """Where the escaper reports: a directory its user may write."""
    where = (c.project.parent if isinstance(c, UserCli) else tmp_path) / "esc"
    where.mkdir(exist_ok=True)
    os.chmod(where, 0o777)
    return where / "out.txt"


def _escape(c: Cli, out: Path, *extra: str) -> tuple[int, int]:
    """Have ``c``'s agent start the escaper; (daemon pid, its start time)."""
    python = c.python if isinstance(c, UserCli) else sys.executable
    argv = [python, str(ESCAPER), str(out), *_cgroup_root(), *extra]
    c.run("prompt", f"run {shlex.join(argv)}", rc=None)  # the turn dies with the keeper
    words = out.read_text().split()
    if isinstance(c, UserCli):
        assert words[4] in ("denied", "-"), words  # a regular user cannot leave its subtree
    return int(words[0]), int(words[1])


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


def _escapes_counted(home: str) -> int:
    with Registry(os.path.join(home, "state.db")) as reg:
        return int(reg.counters().get("run_ownership_escape_total", 0))


def test_killing_its_keeper_is_an_escape_the_owner_ends(who: Cli, tmp_path: Path) -> None:
    """The escapee that killed its keeper is ended by the owner (its subreaper of last
    resort); the run ends ownership-escape, journaled and counted; close is clean."""
    pid, start = _escape(who, _out(who, tmp_path))
    try:
        wait_for(lambda: not alive(pid, start), "the owner to end the escapee", timeout=15.0)
        ends = wait_for(
            lambda: [e for e in who.journal() if e["kind"] == "agent_run_ended"],
            "the run's end to be journaled",
        )
        assert len(ends) == 1, ends
        assert ends[0]["message"].startswith("agent run ended: ownership-escape"), ends
        assert pid in ends[0]["escaped"], ends
        wait_for(lambda: _escapes_counted(_home(who)), "run_ownership_escape_total to count it")
        closed = who.json("sessions", "close")
        assert closed["survivors"] == []
    finally:
        _end(pid, start)


@pytest.mark.parametrize("seen", ["asked", "scanned"])
def test_an_escapee_that_killed_keeper_and_owner_stays_its_sessions_agent(
    who: Cli, tmp_path: Path, seen: str
) -> None:
    """Recorded inside its run -- it ran ``tether`` there, or merely lived there through
    one of the owner's scans -- the escapee kills its owner and its keeper: re-parented
    far away, with no marker anywhere above it, it is still its session's agent --
    another session's history is refused -- and ``reap --dry-run`` reports it,
    ``sessions close`` ends it and counts it (survivors 0 is then true)."""
    who.run("sessions", "new", "-s", "victim")
    out = _out(who, tmp_path)
    victim = ["--cwd", str(who.project), "mock", "sessions", "history", "-s", "victim"]
    how = ["--ask-first", str(who.project)] if seen == "asked" else ["--wait-recorded"]
    pid, start = _escape(who, out, *how, "--kill-owner", "--then", *victim)
    try:
        wait_for(lambda: "rc=" in out.read_text(), "the escapee's history request")
        answer = out.read_text()
        assert "rc=0" not in answer, answer
        assert "denied" in answer.partition("rc=")[2], answer
        assert alive(pid, start)  # nothing above it was left to end it
        dry = who.json("reap", "--dry-run")
        members = [d for d in dry["decisions"] if d["kind"] == "members"]
        assert [pid] == [p for d in members for p in d["pids"] if p == pid], dry
        assert alive(pid, start)  # a dry run signals nothing
        before = _escapes_counted(_home(who))
        closed = who.json("sessions", "close")
        assert pid in closed["escaped"], closed
        assert closed["survivors"] == [], closed
        assert not alive(pid, start)
        assert _escapes_counted(_home(who)) > before
    finally:
        _end(pid, start)
        who.run("sessions", "close", "-s", "victim", rc=None)


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


def test_tether_exec_ends_what_a_killed_keeper_leaves(project_dir: Path, tmp_path: Path) -> None:
    """``tether exec`` is its runs' subreaper of last resort too: the escapee that killed
    its keeper is ended before exec returns."""
    out = _out(Cli(project_dir), tmp_path)
    argv = [sys.executable, str(ESCAPER), str(out), *_cgroup_root()]
    cli = [sys.executable, "-m", "tether", "--cwd", str(project_dir), "mock", "exec"]
    subprocess.run([*cli, f"run {shlex.join(argv)}"], capture_output=True, timeout=60)
    words = out.read_text().split()
    pid, start = int(words[0]), int(words[1])
    try:
        assert not alive(pid, start)
    finally:
        _end(pid, start)
