"""Run the ``tether`` CLI as a user would: a real process, its output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_tether(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m tether --cwd CWD ARGS…`` with our environment (or ``env``)."""
    return subprocess.run(
        [sys.executable, "-m", "tether", "--cwd", str(cwd), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ if env is None else env,
    )
