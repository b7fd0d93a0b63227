"""Real-process matrix for the keeper, the supervisor shell and reconcile (Linux).

Every case runs real trees -- shell wrappers, ``setsid`` children, double-forked
daemons, TERM-ignoring members -- and asserts three things:

* the termination reason (the ExtinctionReport and the lease row agree);
* the lease ends ``closed``;
* nothing survives, by three independent witnesses: the report's ``survivors`` is
  empty, a ``/proc`` scan for the lease marker ``TETHER_LEASE_ID=<lease_id>`` finds no
  live process (and the lease's cgroup, if any, is gone or unpopulated), and the
  suite's conftest finds no descendant of the test left alive.

Cases that can use a cgroup run twice: with the cgroup (``cgroup.kill``), and with
``TETHER_NO_CGROUP=1`` (keeper subreaper walk / reconcile pidfd sweep only). The
cgroup variant skips, with its reason, where cgroup v2 is not writable.

Supervisor-death cases run the supervisor as a separate interpreter
(``tests/fake_agents/supervisor.py``) and SIGKILL it through a pidfd; every process
this module signals is its own child or a descendant whose identity (parent and
starttime) was verified after opening a pidfd on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests._proctree import descendants, kill_verified, marker_carriers

from tether import _os, metrics
from tether._os import UNREADABLE
from tether.state.registry import Registry
from tether.supervise import reconcile_reap as reconcile_mod
from tether.supervise.cgroups import CgroupProbe
from tether.supervise.reconcile import reconcile
from tether.supervise.run_state import TerminationReason
from tether.supervise.runner import AgentProcess, ExtinctionReport, SpawnSpec, spawn_agent

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process ownership is Linux"),
]

FAKES = Path(__file__).parents[1] / "fake_agents"
ESCAPE_TREE = [sys.executable, str(FAKES / "escape_tree.py")]
SUPERVISOR = [sys.executable, str(FAKES / "supervisor.py")]
GRACE = 0.3
READY_TIMEOUT = 15.0


# --- witnesses --------------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, starttime) or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[19])


def alive(pid: int, starttime: int) -> bool:
    """Is that very process (pid + starttime) still running? Zombies are dead."""
    st = _stat(pid)
    return st is not None and st[0] != "Z" and st[2] == starttime


def assert_extinct(lease_id: str, cgroup: str | None, *, within: float = 0.0) -> None:
    """The /proc marker witness (and the cgroup one): nothing of the lease is alive."""
    deadline = time.monotonic() + within
    while True:
        carriers = marker_carriers(lease_id)
        if not carriers or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    assert carriers == [], f"processes carrying the lease marker survived: {carriers}"
    if cgroup is not None:
        events = Path(cgroup, "cgroup.events")
        if events.exists():
            assert "populated 0" in events.read_text()
        # The keeper (or reconcile) removes the cgroup once it is empty.
        assert not Path(cgroup).exists(), f"cgroup {cgroup} was left behind"


def assert_lease(lease_id: str, *, state: str = "closed", reason: str | None = None) -> Any:
    with Registry() as reg:
        lease = reg.lease(lease_id)
    assert lease is not None
    assert lease.state == state, (lease.state, lease.reason, lease.note)
    if reason is not None:
        assert lease.reason == reason
    return lease


def assert_clean(
    proc: AgentProcess, report: ExtinctionReport, reason: str, *, escape: bool = False
) -> None:
    """The run ended for ``reason`` -- or, with ``escape``, failed ``ownership-escape``."""
    if escape:
        assert report.escaped, report
        reason = "ownership-escape"
    else:
        assert report.escaped == (), report
    assert report.reason == reason, report
    assert report.survivors == ()
    assert_extinct(proc.lease_id, proc.cgroup)
    lease = assert_lease(proc.lease_id, reason=reason)
    assert lease.run_state == "exited"
    assert lease.failure == ("ownership-escape" if escape else None)


def setsid_escapes(mode: str) -> bool:
    """Whether a setsid member leaves the run's boundary: only without a cgroup.

    With a cgroup the boundary is the cgroup, which setsid cannot leave; without one
    it is the process group and session (seed 003, "Child and Grandchild Rules").
    """
    return mode == "no-cgroup"


# --- cgroup / no-cgroup parametrisation ------------------------------------------------


def _cgroup_capability() -> str | None:
    """None if per-run cgroups work here, else why not."""
    mount = _os.find_cgroup2_mount()
    if mount is None:
        return "no cgroup2 mount"
    ok, why = _os.cgroup_writable(mount)
    return None if ok else why


@pytest.fixture(params=["cgroup", "no-cgroup"])
def cgroup_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the case with a per-run cgroup, and with TETHER_NO_CGROUP=1."""
    if request.param == "cgroup":
        why = _cgroup_capability()
        if why is not None:
            pytest.skip(f"cgroup v2 not writable: {why}")
        monkeypatch.delenv("TETHER_NO_CGROUP", raising=False)
    else:
        monkeypatch.setenv("TETHER_NO_CGROUP", "1")
    CgroupProbe.reset()  # the probe is once per process; each case decides afresh
    yield request.param
    CgroupProbe.reset()


def _expect_cgroup(proc: AgentProcess, mode: str) -> None:
    if mode == "cgroup":
        assert proc.cgroup is not None
    else:
        assert proc.cgroup is None


# --- in-process runs ---------------------------------------------------------------------


class Lines:
    """Collects an agent's stdout lines; resolves ``ready`` at the escape tree's JSON line."""

    def __init__(self, proc: AgentProcess) -> None:
        self.buf = bytearray()
        self.lines: list[bytes] = []
        self.ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.ready_at: float | None = None
        self.changed = asyncio.Event()
        proc.set_stdout_handler(self._data, lambda: None)

    def _data(self, data: bytes) -> None:
        self.buf += data
        while b"\n" in self.buf:
            i = self.buf.index(b"\n")
            line = bytes(self.buf[:i]).rstrip(b"\r")
            del self.buf[: i + 1]
            self.lines.append(line)
            self.changed.set()
            if line.startswith(b"{") and not self.ready.done():
                self.ready_at = time.monotonic()
                self.ready.set_result(json.loads(line))

    async def wait_ready(self) -> dict[str, Any]:
        return await asyncio.wait_for(asyncio.shield(self.ready), READY_TIMEOUT)

    async def wait_lines(self, n: int) -> list[bytes]:
        async with asyncio.timeout(READY_TIMEOUT):
            while len(self.lines) < n:
                self.changed.clear()
                await self.changed.wait()
        return self.lines[:n]


def starttime_of(pid: int) -> int:
    st = _stat(pid)
    assert st is not None, f"pid {pid} is gone"
    return st[2]


def tree_pids(tree: dict[str, Any]) -> list[tuple[int, int]]:
    out = [(tree["root"]["pid"], tree["root"]["starttime"])]
    out += [(m["pid"], m["starttime"]) for m in tree["members"].values()]
    return out


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def spec(argv: list[str], tmp: Path, **kw: Any) -> SpawnSpec:
    kw.setdefault("grace", GRACE)
    return SpawnSpec(argv=argv, cwd=str(tmp), **kw)


def test_direct_exit(cgroup_mode: str, project_dir: Path) -> None:
    """The agent exits 0 by itself: reason ``exit``, by the agent, nobody called aclose."""

    async def main() -> None:
        with Registry() as reg:
            proc = await spawn_agent(spec([sys.executable, "-c", "print('bye')"], project_dir), reg)
            _expect_cgroup(proc, cgroup_mode)
            report = await asyncio.wait_for(proc.wait_ended(), 10)
            assert report.exit_code == 0
            assert report.exit_signal is None
            assert not report.escalated
            assert proc.lifecycle.terminated_by == "agent"
            # aclose() after the end is idempotent and keeps the first outcome.
            assert await proc.aclose(TerminationReason.CLOSE) == report
            assert_clean(proc, report, "exit")

    run(main())


def test_a_keeper_started_past_select_s_limit_serves(project_dir: Path) -> None:
    """A supervisor holding over 1,024 descriptors (a session host does) passes the
    keeper a control socket numbered past select's FD_SETSIZE: the keeper still waits
    on it (it died at once, an ``ownership-escape``, when it used select)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard limit on open files is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]

    async def main() -> None:
        with Registry() as reg:
            argv = [sys.executable, "-c", "import time; time.sleep(0.3); print('bye')"]
            proc = await spawn_agent(spec(argv, project_dir), reg)
            report = await asyncio.wait_for(proc.wait_ended(), 10)
            assert report.exit_code == 0
            assert_clean(proc, report, "exit")

    try:
        assert max(filler) > 1024
        run(main())
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_exit_then_aclose_is_still_exit(project_dir: Path) -> None:
    """wait_exited() then aclose(): the run ended by itself, so it is not a "close"."""

    async def main() -> None:
        with Registry() as reg:
            proc = await spawn_agent(spec(["sh", "-c", "exit 3"], project_dir), reg)
            assert await asyncio.wait_for(proc.wait_exited(), 10) == (3, None)
            report = await proc.aclose(TerminationReason.CLOSE)
            assert report.exit_code == 3
            assert proc.lifecycle.terminated_by == "agent"
            assert_clean(proc, report, "exit")

    run(main())


def test_exit_leaving_escapes_reaps_them(cgroup_mode: str, project_dir: Path) -> None:
    """The root exits 0 leaving setsid/daemon/TERM-ignoring members: all of them die."""

    async def main() -> None:
        with Registry() as reg:
            proc = await spawn_agent(spec([*ESCAPE_TREE, "--then", "exit"], project_dir), reg)
            lines = Lines(proc)
            tree = await lines.wait_ready()
            report = await asyncio.wait_for(proc.wait_ended(), 10)
            assert report.exit_code == 0
            assert report.escalated  # the TERM-ignoring members needed SIGKILL
            assert_clean(proc, report, "exit", escape=setsid_escapes(cgroup_mode))
            assert not [p for p, s in tree_pids(tree) if alive(p, s)]

    run(main())


def test_manual_cancel(cgroup_mode: str, project_dir: Path) -> None:
    """aclose(MANUAL_CANCEL) on a full escape tree whose root ignores SIGTERM."""

    async def main() -> None:
        with Registry() as reg:
            proc = await spawn_agent(spec([*ESCAPE_TREE, "--root-ignore-term"], project_dir), reg)
            _expect_cgroup(proc, cgroup_mode)
            lines = Lines(proc)
            tree = await lines.wait_ready()
            assert all(alive(p, s) for p, s in tree_pids(tree))
            t0 = time.monotonic()
            report = await proc.aclose(TerminationReason.MANUAL_CANCEL)
            took = time.monotonic() - t0
            assert report.escalated
            assert report.mode == ("cgroup" if cgroup_mode == "cgroup" else "subreaper")
            assert report.exit_signal == signal.SIGKILL
            assert GRACE <= took < GRACE + 2.0
            assert proc.lifecycle.terminated_by == "daemon"
            assert_clean(proc, report, "manual-cancel", escape=setsid_escapes(cgroup_mode))
            assert not [p for p, s in tree_pids(tree) if alive(p, s)]

    run(main())


def test_overall_timeout(cgroup_mode: str, project_dir: Path) -> None:
    """overall_timeout=0.3 ends the run by itself; we only await its end."""
    script = "sleep 30 & setsid sleep 30 & (trap '' TERM; sleep 30) & echo up; wait"

    async def main() -> None:
        with Registry() as reg:
            t0 = time.monotonic()
            proc = await spawn_agent(
                spec(["bash", "-c", script], project_dir, overall_timeout=0.3), reg
            )
            report = await asyncio.wait_for(proc.wait_ended(), 10)
            took = time.monotonic() - t0
            assert 0.3 <= took < 0.3 + GRACE + 3.0
            assert_clean(proc, report, "overall-timeout", escape=setsid_escapes(cgroup_mode))

    run(main())


def test_no_output_timeout(cgroup_mode: str, project_dir: Path) -> None:
    """One line of output, then silence: the no-output watchdog ends the run."""

    async def main() -> None:
        with Registry() as reg:
            proc = await spawn_agent(spec(ESCAPE_TREE, project_dir, no_output_timeout=0.5), reg)
            lines = Lines(proc)
            tree = await lines.wait_ready()
            report = await asyncio.wait_for(proc.wait_ended(), 10)
            assert lines.ready_at is not None
            assert report.escalated  # TERM-ignoring members
            assert_clean(proc, report, "no-output-timeout", escape=setsid_escapes(cgroup_mode))
            assert not [p for p, s in tree_pids(tree) if alive(p, s)]

    run(main())


def test_pty_output_rearms_watchdog(cgroup_mode: str, project_dir: Path) -> None:
    """Output every 0.2 s on a PTY keeps a 0.5 s no-output watchdog quiet for 1.5 s."""

    async def main() -> None:
        with Registry() as reg:
            argv = [*ESCAPE_TREE, "--members", "", "--then", "tick", "--interval", "0.2"]
            argv += ["--duration", "1.5"]
            t0 = time.monotonic()
            proc = await spawn_agent(spec(argv, project_dir, pty=True, no_output_timeout=0.5), reg)
            lines = Lines(proc)
            report = await asyncio.wait_for(proc.wait_ended(), 10)
            took = time.monotonic() - t0
            assert took >= 1.5
            ticks = [ln for ln in lines.lines if ln.startswith(b"tick ")]
            assert len(ticks) >= 5, lines.lines
            assert report.exit_code == 0
            assert_clean(proc, report, "exit")

    run(main())


def test_pty_is_a_terminal_and_takes_input(project_dir: Path) -> None:
    """On a PTY the agent sees a terminal, our writes reach it, and are not echoed back."""
    prog = (
        "import os, sys\n"
        "print('tty', os.isatty(0), os.isatty(1), os.getsid(0) == os.getpid(), flush=True)\n"
        "line = sys.stdin.readline()\n"
        "print('got', line.strip(), flush=True)\n"
        "print('eof', repr(sys.stdin.read()), flush=True)\n"
    )

    async def main() -> None:
        with Registry() as reg:
            proc = await spawn_agent(spec([sys.executable, "-c", prog], project_dir, pty=True), reg)
            lines = Lines(proc)
            proc.write(b"hello\n")
            await proc.drain()
            proc.close_stdin()
            report = await asyncio.wait_for(proc.wait_ended(), 10)
            assert lines.lines[:3] == [b"tty True True True", b"got hello", b"eof ''"], lines.lines
            assert_clean(proc, report, "exit")

    run(main())


def test_shell_wrapper_tree(cgroup_mode: str, project_dir: Path) -> None:
    """`bash -c` with a child and a grandchild: all gone after close."""
    script = (
        "bash -c 'sleep 600 & echo grandchild $!; wait' & echo child $!; "
        "sleep 600 & echo sibling $!; wait"
    )

    async def main() -> None:
        with Registry() as reg:
            proc = await spawn_agent(spec(["bash", "-c", script], project_dir), reg)
            lines = Lines(proc)
            first = await lines.wait_lines(3)
            pids = {ln.split()[0]: int(ln.split()[1]) for ln in first}
            assert set(pids) == {b"child", b"grandchild", b"sibling"}, first
            idents = [(p, starttime_of(p)) for p in pids.values()]
            report = await proc.aclose(TerminationReason.CLOSE)
            assert not report.escalated  # plain shells and sleeps die on SIGTERM
            assert_clean(proc, report, "close")
            assert not [p for p, s in idents if alive(p, s)]

    run(main())


def test_setsid_and_double_fork_escapes(cgroup_mode: str, project_dir: Path) -> None:
    """python -c programs that fork+setsid and double-fork: caught by the subreaper/cgroup."""
    prog = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid(); time.sleep(600); os._exit(0)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork(): os._exit(0)\n"
        "    time.sleep(600); os._exit(0)\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )

    async def main() -> None:
        with Registry() as reg:
            proc = await spawn_agent(spec([sys.executable, "-c", prog], project_dir), reg)
            lines = Lines(proc)
            await lines.wait_lines(1)
            await asyncio.sleep(0.1)  # let the double fork finish its second fork
            assert len(marker_carriers(proc.lease_id)) >= 3
            report = await proc.aclose(TerminationReason.CLOSE)
            assert_clean(proc, report, "close", escape=setsid_escapes(cgroup_mode))

    run(main())


def test_term_ignoring_members_escalate(cgroup_mode: str, project_dir: Path) -> None:
    """trap '' TERM members (and root): SIGKILL after the grace, 0 survivors."""
    script = (
        "trap '' TERM; (trap '' TERM; while :; do sleep 0.1; done) & "
        "bash -c \"trap '' TERM; exec sleep 600\" & echo up; while :; do sleep 0.1; done"
    )

    async def main() -> None:
        with Registry() as reg:
            proc = await spawn_agent(spec(["bash", "-c", script], project_dir), reg)
            lines = Lines(proc)
            await lines.wait_lines(1)
            await asyncio.sleep(0.1)
            t0 = time.monotonic()
            report = await proc.aclose(TerminationReason.CLOSE)
            took = time.monotonic() - t0
            assert report.escalated
            assert report.exit_signal == signal.SIGKILL
            assert took >= GRACE
            assert_clean(proc, report, "close")

    run(main())


def test_keeper_killed_supervisor_sweeps(cgroup_mode: str, project_dir: Path) -> None:
    """The keeper dies (SIGKILL): the supervisor notices and sweeps the verified tree;
    a keeper dying before its run ended is an escape attempt (issue 20): the run fails
    ownership-escape."""

    async def main() -> None:
        with Registry() as reg:
            proc = await spawn_agent(spec(ESCAPE_TREE, project_dir), reg)
            lines = Lines(proc)
            tree = await lines.wait_ready()
            assert proc.keeper is not None
            # Our own unreaped child: the pid cannot have been recycled.
            fd = os.pidfd_open(proc.keeper.pid)
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            finally:
                os.close(fd)
            report = await asyncio.wait_for(proc.wait_ended(), 10)
            assert report.mode == "supervisor-sweep"
            assert report.reason == "ownership-escape", report
            assert report.survivors == ()
            assert_extinct(proc.lease_id, proc.cgroup)
            lease = assert_lease(proc.lease_id, reason="ownership-escape")
            assert lease.failure == "ownership-escape"
            assert not [p for p, s in tree_pids(tree) if alive(p, s)]

    run(main())


# --- out-of-process supervisors ------------------------------------------------------------


class Supervisor:
    """tests/fake_agents/supervisor.py as our child; killed through a pidfd."""

    def __init__(
        self,
        trees: int,
        session_key: str | None,
        tree_args: list[str],
        *,
        agent: list[str] = ESCAPE_TREE,
    ) -> None:
        argv = [*SUPERVISOR, "--trees", str(trees), "--grace", str(GRACE)]
        if session_key:
            argv += ["--session-key", session_key]
        self.popen = subprocess.Popen(
            [*argv, "--", *agent, *tree_args],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self.pidfd = os.pidfd_open(self.popen.pid)  # our unreaped child: exact
        self.runs: list[dict[str, Any]] = []
        assert self.popen.stdout is not None
        out = self.popen.stdout
        buf = b""
        deadline = time.monotonic() + READY_TIMEOUT + 5
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "supervisor did not report its runs in time"
            ready, _, _ = select.select([out], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(out.fileno(), 65536)
            assert chunk, "supervisor exited before reporting"
            buf += chunk
            done = False
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                if msg.get("all_ready"):
                    done = True
                else:
                    self.runs.append(msg)
            if done:
                return

    def signal(self, sig: int) -> None:
        signal.pidfd_send_signal(self.pidfd, sig)

    def kill_keepers(self) -> None:
        """SIGKILL each keeper, after proving it is the one our stopped supervisor started."""
        for run_ in self.runs:
            k = run_["keeper"]
            fd = os.pidfd_open(k["pid"])
            try:
                st = _stat(k["pid"])
                # Re-checked after pinning: our supervisor's child, with the starttime it
                # reported. The supervisor is stopped and unreaped, so its pid is exact.
                assert st is not None
                assert st[1] == self.popen.pid
                assert st[2] == k["starttime"]
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            finally:
                os.close(fd)

    def reap(self) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PIDFD, self.pidfd, os.WEXITED)
        self.popen.returncode = -9  # reaped through the pidfd; keep Popen quiet
        os.close(self.pidfd)
        assert self.popen.stdout is not None
        self.popen.stdout.close()

    def close(self) -> None:
        """Make sure the supervisor is gone (test failure paths)."""
        if self.popen.returncode is None:
            with contextlib.suppress(OSError):
                self.signal(signal.SIGKILL)
            self.reap()


def _wait_dead(idents: list[tuple[int, int]], timeout: float) -> list[tuple[int, int]]:
    deadline = time.monotonic() + timeout
    while True:
        left = [(p, s) for p, s in idents if alive(p, s)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.005)


def _session_ended_events(session_key: str) -> list[dict[str, Any]]:
    with Registry() as reg:
        return reg.events(session_key, kind="agent_run_ended")


def test_supervisor_death_keeper_ends_tree(cgroup_mode: str) -> None:
    """SIGKILL the supervisor: its keeper alone ends the tree within grace + 1 s."""
    sup = Supervisor(1, "sess-sup-death", ["--root-ignore-term"])
    try:
        (run_,) = sup.runs
        targets = [*tree_pids(run_["tree"]), (run_["keeper"]["pid"], run_["keeper"]["starttime"])]
        assert all(alive(p, s) for p, s in targets)
        t0 = time.monotonic()
        sup.signal(signal.SIGKILL)
        left = _wait_dead(targets, GRACE + 1.0)
        took = time.monotonic() - t0
        assert left == [], f"still alive {took:.2f}s after the supervisor died: {left}"
        sup.reap()
        assert_extinct(run_["lease_id"], run_["cgroup"])
        # Nobody reported the run's end: the lease is still open until a reconcile.
        assert_lease(run_["lease_id"], state="open")
        with Registry() as reg:
            decisions = reconcile(reg, grace=GRACE)
        mine = [d for d in decisions if d["lease_id"] == run_["lease_id"]]
        # Seed 000: the tree was gone before cleanup reached it -> lost, not closed.
        assert [d["kind"] for d in mine] == ["steal", "marklost"], mine
        assert_lease(run_["lease_id"], state="lost", reason="owner-lost")
        assert len(_session_ended_events("sess-sup-death")) == 1
        # A second reconcile has nothing to do and reports nothing again.
        with Registry() as reg:
            assert [
                d for d in reconcile(reg, grace=GRACE) if d["lease_id"] == run_["lease_id"]
            ] == []
        assert len(_session_ended_events("sess-sup-death")) == 1
    finally:
        sup.close()


def _kill_supervisor_and_keepers(sup: Supervisor) -> None:
    # Stop the supervisor first so it cannot react to its keepers' deaths (it would
    # sweep the tree itself), then kill the keepers, then the supervisor.
    sup.signal(signal.SIGSTOP)
    sup.kill_keepers()
    sup.signal(signal.SIGKILL)
    sup.reap()


def test_supervisor_and_keeper_killed_reconcile_reaps(cgroup_mode: str) -> None:
    """Supervisor and keeper both SIGKILLed: pdeathsig takes the root, reconcile the rest."""
    sup = Supervisor(1, "sess-both-dead", [])
    try:
        (run_,) = sup.runs
        tree = run_["tree"]
        _kill_supervisor_and_keepers(sup)
        root = (tree["root"]["pid"], tree["root"]["starttime"])
        assert _wait_dead([root], 1.0) == [], "the root outlived its keeper (pdeathsig)"
        members = [(m["pid"], m["starttime"]) for m in tree["members"].values()]
        survivors = [(p, s) for p, s in members if alive(p, s)]
        assert survivors, "expected the escaped members to outlive the keeper"
        lease = assert_lease(run_["lease_id"], state="open")
        with Registry() as reg:
            decisions = reconcile(reg, grace=GRACE)
        mine = [d for d in decisions if d["lease_id"] == run_["lease_id"]]
        if cgroup_mode == "no-cgroup":
            # Issue 20, item 2: with no keeper and no cgroup left, nothing proves the
            # escaped members belong to the run -- the marker is only a claim. They are
            # reported as unproven, never signalled, and the lease is lost.
            assert [d["kind"] for d in mine] == ["steal", "marklost", "unproven"], mine
            assert {p for p, _ in survivors} <= set(mine[2]["pids"])
            assert all(alive(p, s) for p, s in survivors)
            assert_lease(run_["lease_id"], state="lost")
            assert len(_session_ended_events("sess-both-dead")) == 1
            _kill_our_carriers(run_["lease_id"])
            return
        assert [d["kind"] for d in mine] == ["steal", "reap", "markclosed"], mine
        assert mine[1]["extinct"] is True
        assert {p for p, _ in survivors} <= set(mine[1]["pids"])
        assert not [p for p, s in members if alive(p, s)]
        assert_extinct(run_["lease_id"], lease.cgroup_path)
        assert_lease(run_["lease_id"], reason="owner-lost")
        assert len(_session_ended_events("sess-both-dead")) == 1
    finally:
        sup.close()


def test_lease_contention_two_reconcilers(
    cgroup_mode: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two reconcilers (threads, separate connections) race over one dead-owner lease.

    Seed 003's lease-contention row: exactly one steals the lease, only that one
    signals anything (one kill, never two), and the lease is ended and reported once.
    """
    sup = Supervisor(1, "sess-contention", [])
    decoys: list[subprocess.Popen[bytes]] = []
    try:
        (run_,) = sup.runs
        lease_id = run_["lease_id"]
        # Foreign processes: no marker, and one carrying *another* lease's marker.
        env_other = {**os.environ, "TETHER_LEASE_ID": "f" * 32}
        env_none = {k: v for k, v in os.environ.items() if k != "TETHER_LEASE_ID"}
        decoys = [
            subprocess.Popen(["sleep", "600"], env=env_none, start_new_session=True),
            subprocess.Popen(["sleep", "600"], env=env_other, start_new_session=True),
        ]
        _kill_supervisor_and_keepers(sup)
        tree = run_["tree"]
        assert _wait_dead([(tree["root"]["pid"], tree["root"]["starttime"])], 1.0) == []
        targets = set(marker_carriers(lease_id))
        assert targets

        delivered: list[tuple[int, bytes | None, int]] = []
        lock = threading.Lock()
        real = reconcile_mod.signal_verified

        def recording(table: Any, ident: Any, sig: int, **kw: Any) -> bool:
            # Our witness of whose process it is, taken before the signal: the marker,
            # or -- when the environment cannot be read (a process mid-exec or dying)
            # -- being one of this test's own descendants with that very starttime.
            marker = table.environ_value(ident.pid, b"TETHER_LEASE_ID")
            st = _stat(ident.pid)
            ours = st is not None and st[2] == ident.starttime and ident.pid in descendants()
            ok = real(table, ident, sig, **kw)
            if ok:
                with lock:
                    delivered.append((ident.pid, marker if marker is not UNREADABLE else ours, sig))
                    signallers.add(threading.get_ident())
            return ok

        signallers: set[int] = set()
        monkeypatch.setattr(reconcile_mod, "signal_verified", recording)
        barrier = threading.Barrier(2)
        results: list[list[dict[str, Any]]] = []
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                with Registry() as reg:
                    barrier.wait()
                    out = reconcile(reg, grace=GRACE)
                with lock:
                    results.append(out)
            except BaseException as exc:
                with lock:
                    errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        assert len(results) == 2
        if cgroup_mode == "no-cgroup":
            _contention_without_proof(lease_id, run_["tree"], results, delivered)
            return
        # Every signal went to a process carrying this lease's marker; none to a decoy.
        assert delivered
        wrong = [d for d in delivered if d[1] not in (lease_id.encode(), True)]
        assert wrong == [], wrong
        decoy_pids = {d.pid for d in decoys}
        assert not decoy_pids & {p for p, _, _ in delivered}
        assert all(d.poll() is None for d in decoys)
        # Every long-lived member was reached, and nothing carrying the marker is left.
        # (Not the `shell` wrapper: it exits by itself once its child, signalled first,
        # is gone; nor the loop's short `sleep 0.1` children.)
        must = {k: m["pid"] for k, m in tree["members"].items() if k != "shell"}
        missed = {k: p for k, p in must.items() if p not in {p for p, _, _ in delivered}}
        assert not missed, missed
        assert not [p for p, s in tree_pids(tree) if alive(p, s)]
        assert_extinct(lease_id, run_["cgroup"])
        # One steal, one killer: the loser saw the steal fail and did nothing more.
        steals = [
            d for out in results for d in out if d["kind"] == "steal" and d["lease_id"] == lease_id
        ]
        # (The threads race for real: the second either lost the steal, or looked only
        # once the lease was already ended and planned nothing for it. The interleaving
        # where both plan first is pinned in the simulator.)
        assert [d for d in steals if not d.get("raced")], steals
        assert len([d for d in steals if not d.get("raced")]) == 1, steals
        assert len(signallers) == 1
        for out in results:
            mine = [d for d in out if d["lease_id"] == lease_id]
            if any(d.get("raced") for d in mine):
                assert all(d.get("raced") for d in mine), mine
        term_targets = [p for p, _, sig in delivered if sig == signal.SIGTERM]
        assert len(term_targets) == len(set(term_targets)), "a process was TERMed twice"
        # Closed once, reported once.
        lease = assert_lease(lease_id, reason="owner-lost")
        assert lease.stolen_from is not None
        with Registry() as reg:
            assert len(reg.events("sess-contention", kind="lease_stolen")) == 1
        ended = [d for out in results for d in out if d.get("session_ended")]
        assert len(ended) == 1
        assert len(_session_ended_events("sess-contention")) == 1
    finally:
        sup.close()
        for d in decoys:
            d.kill()  # our own unreaped children: Popen signals the exact process
            d.wait()


def _kill_our_carriers(lease_id: str) -> None:
    """SIGKILL what carries the lease's marker and is provably ours: a descendant of this
    test (the suite is a subreaper) with its starttime re-checked through a pidfd."""
    for _ in range(100):
        current = descendants()
        ours = {p: current[p] for p in marker_carriers(lease_id) if p in current}
        if not ours:
            return
        kill_verified(ours)
        time.sleep(0.02)


def _contention_without_proof(
    lease_id: str,
    tree: dict[str, Any],
    results: list[list[dict[str, Any]]],
    delivered: list[tuple[int, bytes | None, int]],
) -> None:
    """The race with no keeper and no cgroup left: nothing proves the escaped members
    belong to the run (issue 20, item 2), so neither reconciler signals anything; one
    steals the lease, reports the claimants as unproven, and ends the lease once."""
    assert delivered == []
    members = {k: (m["pid"], m["starttime"]) for k, m in tree["members"].items()}
    long_lived = {k: v for k, v in members.items() if k != "shell" and alive(*v)}
    assert long_lived
    decisions = [d for out in results for d in out if d["lease_id"] == lease_id]
    won = [d for d in decisions if d["kind"] == "steal" and not d.get("raced")]
    assert len(won) == 1, decisions
    (claims,) = [d for d in decisions if d["kind"] == "unproven" and not d.get("raced")]
    assert {p for p, _ in long_lived.values()} <= set(claims["pids"])
    assert all(alive(*v) for v in long_lived.values())
    lease = assert_lease(lease_id, state="lost")
    assert lease.stolen_from is not None
    assert len([d for d in decisions if d.get("session_ended")]) == 1
    assert len(_session_ended_events("sess-contention")) == 1
    _kill_our_carriers(lease_id)


def test_healthy_lease_left_alone_then_expired_lease_stolen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seed 003: a live, heartbeating supervisor's lease is never touched; once that
    supervisor stops (SIGSTOP) and its lease expires, reconcile steals it and reaps."""
    monkeypatch.setenv("TETHER_LEASE_HEARTBEAT_S", "0.1")
    monkeypatch.setenv("TETHER_LEASE_TTL_S", "1.0")
    monkeypatch.setenv("TETHER_NO_CGROUP", "1")
    sup = Supervisor(1, "sess-expiry", ["--members", "same,setsid"])
    try:
        (run_,) = sup.runs
        lease_id = run_["lease_id"]
        targets = tree_pids(run_["tree"])
        with Registry() as reg:
            first = reg.lease(lease_id)
            assert first is not None
            assert first.owner_instance_id
            assert first.lease_expires_at
            # Let a few beats pass: the holder renews its expiry on its own clock.
            deadline = time.monotonic() + 10
            while (lease := reg.lease(lease_id)) is not None and (
                lease.heartbeat_at is None or lease.heartbeat_at <= (first.heartbeat_at or 0)
            ):
                assert time.monotonic() < deadline, "no heartbeat renewed the lease"
                time.sleep(0.05)
            decisions = [d for d in reconcile(reg, grace=GRACE) if d["lease_id"] == lease_id]
        assert [d["kind"] for d in decisions] == ["skip"], decisions
        assert all(alive(p, s) for p, s in targets)
        assert_lease(lease_id, state="open")

        sup.signal(signal.SIGSTOP)  # alive but silent: its lease will lapse
        with Registry() as reg:
            metrics.attach(reg)
            deadline = time.monotonic() + 10
            while (lease := reg.lease(lease_id)) is not None and (
                lease.lease_expires_at is None or lease.lease_expires_at > time.time()
            ):
                assert time.monotonic() < deadline, "the lease never expired"
                time.sleep(0.1)
            decisions = [d for d in reconcile(reg, grace=GRACE) if d["lease_id"] == lease_id]
            assert [d["kind"] for d in decisions] == ["steal", "reap", "markclosed"], decisions
            assert "expired" in decisions[0]["why"]
            metrics.attach(None)
            assert reg.counters().get("run_lease_steal_total") == 1
            stolen = reg.lease(lease_id)
        assert stolen is not None
        assert stolen.stolen_from == first.owner_instance_id
        assert stolen.owner_instance_id != first.owner_instance_id
        assert _wait_dead(targets, 5.0) == []
    finally:
        sup.close()


def _escape_cgroup_prog(mount: str) -> list[str]:
    # A member that moves itself into the root cgroup (allowed to root), then idles.
    child = f"echo $$ > {mount}/cgroup.procs && echo moved $$ && exec sleep 600"
    return ["sh", "-c", f"sh -c '{child}' & wait"]


def test_cgroup_escape_marks_ownership_escape(
    monkeypatch: pytest.MonkeyPatch, project_dir: Path
) -> None:
    """A member that leaves the run's cgroup (as root) fails the run ownership-escape,
    is still reaped under the lease, and counts in run_ownership_escape_total."""
    why = _cgroup_capability()
    if why is not None:
        pytest.skip(f"cgroup v2 not writable: {why}")
    monkeypatch.delenv("TETHER_NO_CGROUP", raising=False)
    CgroupProbe.reset()
    mount = _os.find_cgroup2_mount()
    assert mount is not None

    async def main() -> None:
        with Registry() as reg:
            metrics.attach(reg)
            try:
                proc = await spawn_agent(spec(_escape_cgroup_prog(mount), project_dir), reg)
                assert proc.cgroup is not None
                lines = Lines(proc)
                (line,) = await lines.wait_lines(1)
                pid = int(line.split()[1])
                ident = (pid, starttime_of(pid))
                assert pid not in _os.current().cgroup_procs(proc.cgroup)
                report = await proc.aclose(TerminationReason.CLOSE)
                assert pid in report.escaped
                assert_clean(proc, report, "close", escape=True)
                assert not alive(*ident)
                assert reg.counters().get("run_ownership_escape_total") == 1
                assert reg.counters().get("run_exit_total{reason=ownership-escape}") == 1
            finally:
                metrics.attach(None)
                CgroupProbe.reset()

    run(main())


def test_setsid_escape_without_cgroup_is_marked(
    monkeypatch: pytest.MonkeyPatch, project_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Subreaper case: without a cgroup, a member that setsid-s out of the run's group
    and session is found by the keeper's walk, reaped, and marks the run; the warning
    log line carries the run id and the reason."""
    monkeypatch.setenv("TETHER_NO_CGROUP", "1")
    CgroupProbe.reset()
    prog = "setsid sleep 600 & echo up; wait"

    async def main() -> None:
        with Registry() as reg:
            metrics.attach(reg)
            try:
                proc = await spawn_agent(spec(["bash", "-c", prog], project_dir), reg)
                await Lines(proc).wait_lines(1)
                await asyncio.sleep(0.1)  # setsid forks before it execs sleep
                with caplog.at_level(logging.INFO, logger="tether"):
                    report = await proc.aclose(TerminationReason.MANUAL_CANCEL)
                assert_clean(proc, report, "manual-cancel", escape=True)
                assert reg.counters().get("run_ownership_escape_total") == 1
                lines = [r for r in caplog.records if r.getMessage() == "ownership_escape"]
                assert len(lines) == 1
                fields = lines[0].tether_fields  # type: ignore[attr-defined]
                assert fields["runId"] == proc.lease_id
                assert fields["reason"] == "ownership-escape"
                assert fields["pids"] == list(report.escaped)
            finally:
                metrics.attach(None)
                CgroupProbe.reset()

    run(main())


def test_counters_and_log_fields_move_with_their_events(
    monkeypatch: pytest.MonkeyPatch, project_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Seed 003's run counters move when their events happen, with the seed's label
    values, and every supervision line carries the run id and a reason."""
    monkeypatch.setenv("TETHER_NO_CGROUP", "1")
    CgroupProbe.reset()
    stubborn = "trap '' TERM; echo up; while :; do sleep 0.1; done"

    async def main() -> None:
        with Registry() as reg:
            metrics.attach(reg)
            try:
                with caplog.at_level(logging.INFO, logger="tether"):
                    overall = await spawn_agent(
                        spec(["bash", "-c", stubborn], project_dir, overall_timeout=0.3), reg
                    )
                    await asyncio.wait_for(overall.wait_ended(), 10)
                    silent = await spawn_agent(
                        spec(["sleep", "30"], project_dir, no_output_timeout=0.3), reg
                    )
                    await asyncio.wait_for(silent.wait_ended(), 10)
                counters = reg.counters()
            finally:
                metrics.attach(None)
                CgroupProbe.reset()
        assert counters["run_spawn_total"] == 2
        assert counters["run_timeout_total{type=overall}"] == 1
        assert counters["run_timeout_total{type=no_output}"] == 1
        assert counters["run_exit_total{reason=overall-timeout}"] == 1
        assert counters["run_exit_total{reason=no-output-timeout}"] == 1
        # Only the TERM-ignoring run needed SIGKILL.
        assert counters["run_cleanup_kill_total{mode=pgid}"] == 1
        lines = [r for r in caplog.records if r.name == "tether"]
        ours = {overall.lease_id, silent.lease_id}
        for name in ("spawn", "timeout", "cleanup", "extinct"):
            found = [r.tether_fields for r in lines if r.getMessage() == name]  # type: ignore[attr-defined]
            assert {f["runId"] for f in found} == ours, (name, found)
            assert all(f["reason"] for f in found), (name, found)
        timeouts = {
            r.tether_fields["runId"]: r.tether_fields  # type: ignore[attr-defined]
            for r in lines
            if r.getMessage() == "timeout"
        }
        assert timeouts[overall.lease_id]["type"] == "overall"
        assert timeouts[silent.lease_id]["reason"] == "no-output-timeout"

    run(main())


class _RecordingRegistry:
    """A Registry that records, in order, each lease write and the run state seen then."""

    def __init__(self, reg: Registry) -> None:
        self._reg = reg
        self.writes: list[tuple[str, dict[str, Any]]] = []
        self.proc: AgentProcess | None = None
        self.path = reg.path
        self.instance_id = reg.instance_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reg, name)

    def create_lease(self, **fields: Any) -> None:
        self.writes.append(("create", dict(fields)))
        self._reg.create_lease(**fields)

    def update_lease(self, lease_id: str, **fields: Any) -> None:
        self.writes.append(("update", dict(fields)))
        self._reg.update_lease(lease_id, **fields)


def test_run_record_starting_becomes_running_only_after_the_commit(project_dir: Path) -> None:
    """Seed 003: the run record is ``starting`` until the spawn succeeded and its identity
    was committed; ``running`` is written together with that identity, and the run
    reports RUNNING only after that write; the record carries the seed's fields."""

    async def main() -> None:
        with Registry() as real:
            reg = _RecordingRegistry(real)
            proc = await spawn_agent(spec(["sleep", "30"], project_dir, backend_id="mock"), reg)
            (kind, created), *_ = reg.writes
            assert kind == "create"
            assert created["run_state"] == "starting"
            assert "root_pid" not in created
            running = [f for k, f in reg.writes if f.get("run_state") == "running"]
            assert len(running) == 1
            assert running[0]["root_pid"] == proc.pid  # one commit: identity and state
            assert proc.is_running
            row = real.lease(proc.lease_id)
            assert row is not None
            assert (row.run_state, row.state, row.backend_id) == ("running", "open", "mock")
            assert row.owner_instance_id is not None
            assert row.lease_expires_at is not None
            assert row.lease_expires_at > row.created_at
            await proc.aclose(TerminationReason.CLOSE)
            row = real.lease(proc.lease_id)
            assert row is not None
            assert (row.run_state, row.state) == ("exited", "closed")
            assert row.updated_at >= row.created_at

    run(main())


def test_a_project_holding_a_tether_package_runs_no_code_in_the_keeper(
    project_dir: Path,
) -> None:
    """The keeper starts in the agent's working directory; a project there with a
    ``tether`` package of its own (a hostile repository, or Tether's own checkout at
    another version) must not be what the keeper imports: its interpreter is isolated
    (no cwd on its path, no PYTHON* variables, no site)."""
    planted = project_dir / "tether" / "supervise"
    planted.mkdir(parents=True)
    hijacked = project_dir / "hijacked"
    plant = f"open({str(hijacked)!r}, 'w').write('keeper code ran')\n"
    (project_dir / "tether" / "__init__.py").write_text(plant)
    (planted / "__init__.py").write_text(plant)
    (planted / "keeper.py").write_text(plant + "def run():\n    raise SystemExit(0)\n")
    env = {
        **os.environ,
        "PYTHONPATH": str(project_dir),
        "PYTHONSTARTUP": str(planted / "keeper.py"),
    }

    async def main() -> None:
        with Registry() as reg:
            proc = await spawn_agent(
                spec([sys.executable, "-I", "-c", "print('bye')"], project_dir, env=env), reg
            )
            report = await asyncio.wait_for(proc.wait_ended(), 10)
            assert report.exit_code == 0
            assert_clean(proc, report, "exit")

    run(main())
    assert not hijacked.exists(), "the project's tether package ran in the keeper"


def test_the_keeper_imports_no_typing_re_enum_or_ctypes() -> None:
    """The keeper is one per session, idle for most of its life: each module it imports
    is private memory (typing with re ~0.6 MiB, signal's enums ~0.3 MiB, ctypes' Python
    layer ~0.4 MiB)."""
    from tether.supervise import keeper_launch

    code = keeper_launch._KEEPER_BOOT.replace(
        "from tether.supervise.keeper import run; run()",
        "import tether.supervise.keeper; print(' '.join(sorted(sys.modules)))",
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, keeper_launch._TETHER_ROOT],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.split()  # fmt: skip
    assert "tether.supervise.keeper" in out
    for heavy in ("typing", "re", "enum", "site", "asyncio", "json", "signal", "ctypes"):
        assert heavy not in out, heavy


def test_an_agent_runs_under_uvloop(project_dir: Path) -> None:
    """A library user's application on uvloop (uvicorn's default loop) spawns agents
    too: uvloop's pipe transports are not asyncio's classes (an ``isinstance`` check on
    the agent's stdin failed every spawn)."""
    uvloop = pytest.importorskip("uvloop", reason="uvloop comes with the serve extra")

    async def main() -> None:
        with Registry() as reg:
            argv = [sys.executable, "-c", "import sys; print(sys.stdin.readline().upper())"]
            proc = await spawn_agent(spec(argv, project_dir), reg)
            proc.write(b"through uvloop\n")
            report = await asyncio.wait_for(proc.wait_ended(), 10)
            assert report.exit_code == 0
            assert_clean(proc, report, "exit")

    uvloop.run(main())
