"""Delegation with an agent written by others: claude-agent-acp calls the bridge's tools.

claude-agent-acp 0.49.0, against the loopback fake Messages API, is handed ``tether mcp``
in ``session/new`` (``--mcp-bridge``). The fake model answers a prompt containing
``TOOL:<name>:<json>`` with that tool use, so the agent really calls
``mcp__tether__sessions_spawn`` and then ``mcp__tether__sessions_send`` through Claude
Code's own MCP client. The child session (the bundled mock agent) runs, answers, and is
recorded and listed under its parent; closing the parent closes it first. Spawning
another agent's session is agent-to-agent delegation, so the project's config allows it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.realagents.fake_anthropic import FakeAnthropic
from tests.realagents.test_owner_real import Cli, tether_env
from tether.state.registry import Registry

pytestmark = pytest.mark.realagents


def test_claude_spawns_and_prompts_a_child_through_the_bridge(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
) -> None:
    cli = Cli(claude_agent_cmd[0], tether_env(claude_agent_env), project_dir)
    # Claude spawning a mock session is agent-to-agent: the policy must allow both agents
    # (the claude session's agent id is its command, as given to --agent).
    (Path(os.environ["TETHER_HOME"]) / "config.toml").write_text(
        '[agentToAgent]\nenabled = true\nallow = ["*claude-agent-acp*", "mock"]\n'
    )
    ensured = cli.ok("--approve-all", "--mcp-bridge", "--format", "json", "sessions", "new")
    parent_key = ensured.json_last()["sessionKey"]
    try:
        spawn = {"agent": "mock", "name": "kid", "message": "echo hi from kid"}
        ran = cli.ok("prompt", f"TOOL:mcp__tether__sessions_spawn:{json.dumps(spawn)}", timeout=90)
        assert "fake-claude: tool result ok" in ran.out, ran.out + ran.err
        with Registry() as reg:
            kids = [s for s in reg.sessions() if s.name == "kid"]
        assert len(kids) == 1, [s.name for s in kids]
        kid = kids[0]
        assert (kid.spawned_by, kid.parent_session_key, kid.agent_id) == (
            parent_key,
            parent_key,
            "mock",
        )
        send = {"sessionKey": kid.key, "message": "echo again from kid"}
        ran = cli.ok("prompt", f"TOOL:mcp__tether__sessions_send:{json.dumps(send)}", timeout=90)
        assert "fake-claude: tool result ok" in ran.out, ran.out + ran.err
        assert "again from kid" in ran.out, ran.out
        with Registry() as reg:
            after = reg.session(kid.key)
        assert after is not None
        assert after.last_prompt_at is not None
        tree = cli.ok("sessions", "list", "--tree").out.splitlines()
        at = next(i for i, line in enumerate(tree) if f"{parent_key[:12]}" in line)
        assert tree[at + 1].startswith("└── kid [mock]"), tree
        closed = cli.ok("--format", "json", "sessions", "close").json_last()
        assert [c["sessionKey"] for c in closed["closedChildren"]] == [kid.key]
        assert closed["survivors"] == []
    finally:
        cli.run("--format", "json", "sessions", "close")
