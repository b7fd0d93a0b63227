"""Terminals offered to a real agent: claude-agent-acp 0.101.0 with ``terminal: true``.

What this pins (November 2026): claude-agent-acp 0.101.0 does not call
``terminal/create`` even when the client offers terminals -- it runs its Bash tool
itself and reports it through ``_meta.terminal_*`` display extensions -- and offering
them changes nothing for it: the tool still runs after the permission request, and
every frame Tether sends validates. (codex-acp 2.6.0, gemini-cli 0.61.0 and opencode
1.18.33 bundle the SDK's ``createTerminal`` but never call it either; see the README's
"Terminals".) The day an adapter starts creating terminals, the first assertion below
fails: turn this into a test of its terminals then. Tether's terminals themselves are
tested with the mock agent (``tests/integration/test_terminals.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.realagents.fake_anthropic import FakeAnthropic
from tests.realagents.test_exec_real import (
    TOOL_PROMPT,
    check_frames,
    chunks_text,
    ndjson,
    run_tether,
    tether_env,
)

pytestmark = pytest.mark.realagents


def test_exec_claude_with_terminals_offered_runs_its_bash_tool_itself(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
) -> None:
    """terminal: true is advertised; claude runs Bash itself (no terminal/create)."""
    rc, out, err, _ = run_tether(
        ["--agent", claude_agent_cmd[0], "--approve-all", "--format", "json", "exec", TOOL_PROMPT],
        tether_env(claude_agent_env),
        project_dir,
    )
    assert rc == 0, err
    frames = ndjson(out)
    check_frames(frames)
    init = next(f for f in frames if f.get("method") == "initialize")
    assert init["params"]["clientCapabilities"]["terminal"] is True
    assert [f["method"] for f in frames if str(f.get("method", "")).startswith("terminal/")] == []
    assert (project_dir / "out.txt").read_text().strip() == "hi"
    assert "fake-claude: tool result ok" in chunks_text(frames)
