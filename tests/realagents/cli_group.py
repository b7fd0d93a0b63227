"""Run the ``tether`` CLI in its own process group, so a test can always end what it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests import _tiers

TETHER = Path(sys.executable).with_name("tether")


@contextmanager
def tether(args: list[str], env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    """Start ``tether <args>`` in its own process group; kill that group if it outlives us."""
    if not TETHER.exists():
        _tiers.unavailable(
            "realagents", f"realagents: {TETHER} is not installed (pip install -e .)"
        )
    proc = subprocess.Popen(
        [str(TETHER), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        text=True,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                os.killpg(proc.pid, signal.SIGKILL)  # leader unreaped: the pgid is ours
        except (ChildProcessError, ProcessLookupError):
            pass
        proc.communicate(timeout=10)
