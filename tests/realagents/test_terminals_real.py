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
from tests.realagents.test_exec_real import chunks_text, exec_tool_prompt

pytestmark = pytest.mark.realagents


@pytest.mark.parametrize("offered", [True, False], ids=["terminals", "no-terminal"])
def test_exec_claude_runs_its_bash_tool_itself_with_or_without_terminals(
    offered: bool,
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
) -> None:
    """The capability follows --no-terminal; either way claude runs Bash itself (no
    terminal/create) and the tool's effect is there."""
    flags = () if offered else ("--no-terminal",)
    frames = exec_tool_prompt(claude_agent_cmd, claude_agent_env, project_dir, *flags)
    init = next(f for f in frames if f.get("method") == "initialize")
    assert init["params"]["clientCapabilities"]["terminal"] is offered
    assert [f["method"] for f in frames if str(f.get("method", "")).startswith("terminal/")] == []
    assert (project_dir / "out.txt").read_text().strip() == "hi"
    assert "fake-claude: tool result ok" in chunks_text(frames)
