"""acpx 0.19.1 (npm, written by others) with ``tether acp --agent mock`` as its agent.

acpx is installed, pinned, by the benchmark's installer into ``bench/.acpx``; without
Node or npm (or when the install fails) the test skips with the reason. acpx runs with
its own ``HOME`` under ``tmp_path``.

acpx 0.19.1 refuses to retire its queue owner ("its process birth identity is
unverified") when that owner was re-parented to a subreaper other than init -- which
the suite is. So while acpx runs, this test stops being a subreaper, and proves the
absence of leftovers itself: every process acpx started carries a marker in its
environment; at the end none may be alive (the bench's marker scan, by pid and
starttime; a survivor is SIGKILLed through a pidfd and fails the test).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration._bench import bench_run

from tether import operations

pytestmark = [pytest.mark.integration, pytest.mark.realagents]

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0
MARK = "TETHER_ACPX_TEST_RUN"
PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture(scope="module")
def acpx_cli() -> Path:
    bench = bench_run()
    tool = bench.Acpx(ROOT / "bench")
    bench.install_acpx(tool)
    if not tool.available:
        pytest.skip(tool.reason)
    return Path(bench.ACPX_CLI)


class Acpx:
    """acpx with ``tether acp --agent mock`` as its agent, in a private HOME."""

    def __init__(self, cli: Path, home: Path, cwd: Path) -> None:
        (home / "tmp").mkdir(parents=True)
        self.env = dict(os.environ, HOME=str(home), TMPDIR=str(home / "tmp"))
        self.cwd = cwd
        agent = f"{sys.executable} -m tether acp --agent mock"
        self.base = ["node", str(cli), "--agent", agent, "--approve-all", "--cwd", str(cwd)]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.base, *args],
            env=self.env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.base, *args],
            env=self.env,
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def _set_subreaper(on: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


@pytest.fixture
def acpx(acpx_cli: Path, tmp_path: Path, project_dir: Path) -> Iterator[Acpx]:
    bench = bench_run()
    marker = uuid.uuid4().hex
    tool = Acpx(acpx_cli, tmp_path / "acpx-home", project_dir)
    tool.env[MARK] = marker
    _set_subreaper(False)
    try:
        yield tool
    finally:
        tool.run("sessions", "close")
        for record in operations.list_sessions():
            operations.close_session(record["key"])
        deadline = time.monotonic() + 15.0
        while (left := bench.marker_scan(MARK, marker)) and time.monotonic() < deadline:
            time.sleep(0.1)  # a poll with a deadline: owners finish shutting down
        survivors = {pid: bench.describe(pid) for pid in left}
        for pid, start in left.items():
            bench.kill_verified(pid, start)
        _set_subreaper(True)
        assert not survivors, f"processes acpx or tether started survived: {survivors}"


def _a_prompt_runs() -> bool:
    return any(
        operations.status(r["key"]).get("currentKind") == "prompt"
        for r in operations.list_sessions()
    )


def test_acpx_uses_tether_acp_as_its_agent(acpx: Acpx) -> None:
    """acpx exec, sessions new, prompt, cancel and sessions close through `tether acp`:
    the turn's text arrives, a cancel ends the turn `cancelled`, the close closes the
    Tether session."""
    one = acpx.run("exec", "echo one shot")
    assert one.returncode == 0, one.stderr
    assert "one shot" in one.stdout
    new = acpx.run("sessions", "new")
    assert new.returncode == 0, new.stderr
    hi = acpx.run("prompt", "echo hi there")
    assert hi.returncode == 0, hi.stderr
    assert "hi there" in hi.stdout
    long = acpx.start("prompt", "echo go ; sleep 60000")
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not _a_prompt_runs():  # a poll with a deadline: the turn reached the owner
            assert long.poll() is None, long.communicate()
            assert time.monotonic() < deadline, "the prompt never started"
            time.sleep(0.05)
        cancel = acpx.run("cancel")
        assert cancel.returncode == 0, cancel.stderr
        out, err = long.communicate(timeout=TIMEOUT_S)
    finally:
        if long.poll() is None:
            long.kill()
            long.communicate()
    assert long.returncode == 0, err
    assert "cancelled" in out
    closed = acpx.run("sessions", "close")
    assert closed.returncode == 0, closed.stderr
    states = [r["state"] for r in operations.list_sessions(include_closed=True)]
    assert states.count("closed") == 1  # the one acpx closed; exec's session stays warm
