"""What people read: records without reprs, agent failures that say what happened.

Issue 9, item 15, from the shell with real owners and real (misbehaving) agents.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest
from tests._cli import run_tether

pytestmark = pytest.mark.integration

MISBEHAVING = Path(__file__).resolve().parents[1] / "fake_agents" / "misbehaving.py"


tether = run_tether


def test_status_show_and_history_print_no_python_reprs(project_dir: Path) -> None:
    """After a prompt and a close, text-mode status, show and history contain no dict repr."""
    assert tether("mock", "sessions", "new", cwd=project_dir).returncode == 0
    try:
        assert tether("mock", "prompt", "echo hi", cwd=project_dir).returncode == 0
    finally:
        assert tether("mock", "sessions", "close", cwd=project_dir).returncode == 0
    for args in (("status",), ("sessions", "show"), ("sessions", "history")):
        r = tether("mock", *args, cwd=project_dir)
        assert r.returncode == 0, r.stderr
        assert "{'" not in r.stdout, (args, r.stdout)
        assert "None" not in r.stdout, (args, r.stdout)
    history = tether("mock", "sessions", "history", cwd=project_dir).stdout
    assert "end_turn    echo hi" in history, history
    read = tether("mock", "sessions", "read", cwd=project_dir).stdout
    assert "[session ended] closed (by daemon)" in read


def test_agent_that_closes_stdout_but_lives_is_described(project_dir: Path) -> None:
    """An agent alive without its stdout is reported as such, not as exit_code=None; its
    tree is ended (the suite's leak check)."""
    agent = shlex.join([sys.executable, str(MISBEHAVING), "close-stdout"])
    r = tether("--agent", agent, "exec", "hi", cwd=project_dir)
    assert r.returncode == 1
    assert "closed its stdout but is still running" in r.stderr
    assert "exit_code=None" not in r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the IS_SANDBOX failure happens only as root")
def test_claude_sandbox_failure_names_the_variable(project_dir: Path) -> None:
    """The claude-agent-acp failure with IS_SANDBOX=yes as root names IS_SANDBOX; without
    the variable there is no such hint."""
    agent = shlex.join([sys.executable, str(MISBEHAVING), "claude-sandbox"])
    with_var = tether(
        "--agent", agent, "exec", "hi", cwd=project_dir, env={**os.environ, "IS_SANDBOX": "yes"}
    )
    assert with_var.returncode == 1
    assert "hint: " in with_var.stderr
    assert "IS_SANDBOX=yes" in with_var.stderr
    env = {k: v for k, v in os.environ.items() if k != "IS_SANDBOX"}
    without = tether("--agent", agent, "exec", "hi", cwd=project_dir, env=env)
    assert without.returncode == 1
    assert "IS_SANDBOX" not in without.stderr
