"""A turn's caller is answered once the turn's end is stored, never before.

Before, the owner sent a turn's answer and then journaled its end: a caller told
``end_turn`` whose owner was killed a moment later found the same turn ``owner-lost`` in
the journal, and a history read right after the answer could find it still running.
Here the state database's write lock is held (as another writer or a slow disk would
hold it) from the moment the turn runs: the agent's last chunk reaches the caller, but
the answer waits until the turn's end can be stored, and then the journal has it.
"""

from __future__ import annotations

import os
import select
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.integration._journal import count, journal_entries, journal_when

from tether import operations, paths

pytestmark = pytest.mark.integration

HOLD_S = 1.5  # how long the answer must stay back once the agent's last chunk is out


def _tether(*args: str, cwd: Path) -> list[str]:
    return [sys.executable, "-m", "tether", "--cwd", str(cwd), *args]


def test_the_answer_waits_for_the_turns_end_to_be_stored(project_dir: Path) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("IS_SANDBOX", None)
    assert (
        subprocess.run(_tether("mock", "sessions", "new", cwd=project_dir), env=env).returncode == 0
    )
    warm = subprocess.run(_tether("mock", "prompt", "echo warm", cwd=project_dir), env=env)
    assert warm.returncode == 0
    key = operations.list_sessions()[0]["key"]
    journal_when(key, count("turn_ended", 1))
    proc = subprocess.Popen(
        _tether("mock", "prompt", "sleep 300 ; echo last words", cwd=project_dir),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lock: sqlite3.Connection | None = None
    try:
        # The turn is admitted and running (its start is stored): now hold the lock.
        entries = journal_when(key, count("turn_started", 2))
        assert sum(e["kind"] == "turn_started" for e in entries) == 2
        lock = sqlite3.connect(paths.state_db(), timeout=10.0, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        assert proc.stdout is not None
        out = b""
        while b"last words" not in out:  # the agent's last chunk, relayed at once (no newline)
            ready, _, _ = select.select([proc.stdout], [], [], 30.0)
            assert ready, f"no last chunk: {out!r}"
            data = os.read(proc.stdout.fileno(), 65536)
            assert data, f"the prompt ended early: {out!r}"
            out += data
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:
            assert proc.poll() is None, "answered before the turn's end could be stored"
            time.sleep(0.05)
        stored = [e for e in journal_entries(key) if e["kind"] == "turn_ended"]
        assert len(stored) == 1  # the lock holds the second one back
        lock.execute("ROLLBACK")
        lock.close()
        lock = None
        rest, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert b"[done] end_turn" in out + rest + err
        # The answer came: the journal has the turn's end, without any waiting here.
        ended = [e for e in journal_entries(key) if e["kind"] == "turn_ended"]
        assert [e.get("stopReason") for e in ended] == ["end_turn", "end_turn"]
    finally:
        if lock is not None:
            lock.execute("ROLLBACK")
            lock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for record in operations.list_sessions():
            operations.close_session(record["key"])
