"""Issue 9 item 3 (seed 002): no update of an abandoned turn ever reaches another turn.

Real CLI processes, real owners, the mock agent (helpers shared with ``test_owner.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.integration.test_owner import MOCK_ARGV, Cli, cli, mock

pytestmark = pytest.mark.integration

__all__ = ["cli", "mock"]  # fixtures, imported for pytest


def chunks(stdout: str) -> str:
    """The assistant text of a ``--format json`` turn."""
    out = []
    for line in stdout.splitlines():
        frame = json.loads(line)
        update = frame.get("params", {}).get("update", {}) if isinstance(frame, dict) else {}
        if update.get("sessionUpdate") == "agent_message_chunk":
            out.append(update["content"]["text"])
    return "".join(out)


def test_issue9_item3_late_answer_text_never_reaches_the_next_turn(mock: Cli) -> None:
    """`--timeout 1 prompt "late 5000 OLD"` then at once `prompt "sleep 4000 ; echo NEW"`:
    the second prints NEW and nothing of OLD (it waits for the agent's late answer)."""
    mock.run("--timeout", "1", "prompt", "late 5000 OLD", rc=3)
    text = mock.run("prompt", "sleep 4000 ; echo NEW")
    assert "NEW" in text.stdout
    assert "OLD" not in text.stdout, text.stdout
    mock.run("--timeout", "1", "prompt", "late 5000 OLD", rc=3)
    frames = mock.run("prompt", "sleep 4000 ; echo NEW", fmt="json")
    assert chunks(frames.stdout) == "NEW"
    assert "OLD" not in frames.stdout


def _grace(project: Path, seconds: float) -> None:
    (project / ".tether.toml").write_text(f"abandonedTurnGrace = {seconds}\n")


def _agent(*flags: str) -> list[str]:
    return ["--agent", " ".join([*MOCK_ARGV, *flags])]


def test_issue9_item3_unanswered_abandoned_turn_restarts_and_resumes(
    cli: Callable[..., Cli], project_dir: Path
) -> None:
    """An agent that never answers an abandoned turn (`hang`) is restarted after the
    grace; the session is resumed (session/load) and the next turn runs on the new agent."""
    _grace(project_dir, 1)
    c = cli(_agent("--load-session"))
    c.run("sessions", "new")
    c.run("--timeout", "1", "prompt", "hang", rc=3)
    before = c.status()
    out = c.run("prompt", "echo NEW", fmt="json")
    assert chunks(out.stdout) == "NEW"
    after = c.status()
    assert after["agentPid"] != before["agentPid"]
    assert after["acpSessionId"] == before["acpSessionId"]  # resumed, not a new session
    assert "conversation_restarted" not in out.stdout
    ended = [e for e in c.history() if e["kind"] == "agent_run_ended"]
    assert ended[-1]["payload"]["leaseId"] == before["leaseId"]
    assert ended[-1]["payload"]["message"] == "agent run ended: unresponsive"
    assert ended[-1]["payload"]["survivors"] == []


def test_issue9_item3_restart_without_resume_says_the_conversation_restarted(
    cli: Callable[..., Cli], project_dir: Path
) -> None:
    """If the restarted agent cannot resume the session, the turn's output says so."""
    _grace(project_dir, 1)
    c = cli(_agent())
    c.run("sessions", "new")
    c.run("--timeout", "1", "prompt", "hang", rc=3)
    text = c.run("prompt", "echo NEW")
    assert "NEW" in text.stdout
    assert "restarted" in text.stderr, text.stderr
    c.run("--timeout", "1", "prompt", "hang", rc=3)
    out = c.run("prompt", "echo NEW", fmt="json")
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert any(r.get("action") == "conversation_restarted" for r in records), records
    assert chunks(out.stdout) == "NEW"
