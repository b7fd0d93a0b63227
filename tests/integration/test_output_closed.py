"""Issue 9 item 1: a closed stdout is the user leaving, not a hang.

The real CLI writes to a real pipe that we close after reading one line, as
``tether ... | head -1`` does. It must exit by itself (the backstop timeout is never
reached when things work), with status 141, with nothing on stderr but its banner, and
leave no process (the suite's leak check).
"""

from __future__ import annotations

import subprocess
import tempfile

import pytest
from tests.integration.test_owner import RUN_TIMEOUT, Cli, cli, mock, wait_for

pytestmark = pytest.mark.integration

__all__ = ["cli", "mock"]  # fixtures, imported for pytest


def head_1(c: Cli, *args: str, fmt: str) -> tuple[int, str]:
    """Run ``tether ARGS | head -1``: read one line, close the pipe; (status, stderr)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            c.argv(*args, fmt=fmt),
            env=c.env,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        try:
            assert proc.stdout.readline()
            proc.stdout.close()
            rc = proc.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("tether did not exit after its stdout was closed")
        err.seek(0)
        return rc, err.read()


def quiet(stderr: str) -> bool:
    """No error and no warning: only the agent's bring-up banners (`[tether] starting…`,
    `[tether] session/new`…), which come before stdout closed."""
    lines = [
        line
        for line in stderr.splitlines()
        if not line.startswith("[tether] ") or line.startswith("[tether] warning")
    ]
    return lines == []


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_issue9_item1_exec_with_closed_stdout_exits_141(cli: object, fmt: str) -> None:
    """`exec "stream 200000 x" | head -1` exits 141 quietly and tears the tree down."""
    assert callable(cli)
    c = cli()
    rc, err = head_1(c, "exec", "stream 200000 x", fmt=fmt)
    assert rc == 141, err
    assert quiet(err), err


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_issue9_item1_prompt_with_closed_stdout_exits_141(mock: Cli, fmt: str) -> None:
    """`prompt "stream 200000 x" | head -1` exits 141 quietly; the turn is cancelled and
    the session serves the next prompt."""
    rc, err = head_1(mock, "prompt", "stream 200000 x", fmt=fmt)
    assert rc == 141, err
    assert quiet(err), err
    wait_for(lambda: mock.status()["currentRequest"] is None, "the turn to end")
    assert mock.history("turn")[-1]["payload"]["stopReason"] == "cancelled"
    assert "after" in mock.run("prompt", "echo after").stdout


def test_issue21_item10_json_watch_exits_141_when_head_has_left(mock: Cli) -> None:
    """`sessions watch --format json | head -3` exits 141 at its next write once head has
    gone, when the entries come at a human pace (one short turn at a time): a closed
    stdout is the user leaving, not the owner going away."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            mock.argv("sessions", "watch", fmt="json"),
            env=mock.env,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        try:
            wait_for(lambda: mock.status()["watchers"] == 1, "the watcher to attach")
            mock.run("prompt", "echo one")
            for _ in range(3):
                assert proc.stdout.readline()
            proc.stdout.close()  # head -3 has what it wanted and leaves
            # More entries, one every 300 ms (a human pace), for as long as it takes.
            mock.run("prompt", " ; ".join(f"echo {i} ; sleep 300" for i in range(8)))
            rc = proc.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("the watcher did not exit after its stdout was closed")
        err.seek(0)
        assert rc == 141, err.read()
