"""An agent defined in the configuration works everywhere a built-in name does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests._cli import run_tether


def test_an_implicit_prompt_names_a_configured_agent(tether_home: Path, project_dir: Path) -> None:
    """`tether NAME "text"` with `[agents.NAME]` in the project's config prompts NAME's
    session (it was read as the prompt "NAME text" to the default agent)."""
    argv = [sys.executable, "-m", "tether.testing.mock_agent"]
    (project_dir / ".tether.toml").write_text(f"[agents.mine]\nargv = {json.dumps(argv)}\n")
    missing = run_tether("mine", "echo hi", cwd=project_dir)
    assert missing.returncode == 4
    assert "no session for mine" in missing.stderr
    try:
        assert run_tether("mine", "sessions", "new", cwd=project_dir).returncode == 0
        done = run_tether("mine", "echo hello there", cwd=project_dir)
        assert done.returncode == 0, done.stderr
        assert "hello there" in done.stdout
        # a word that is no agent's name is still the default agent's prompt
        other = run_tether("--format", "json", "nobody", "echo hi", cwd=project_dir)
        assert "no session for" in other.stderr
        assert "nobody" not in other.stderr.split("no session for")[1].split()[0]
    finally:
        run_tether("mine", "sessions", "close", cwd=project_dir)
