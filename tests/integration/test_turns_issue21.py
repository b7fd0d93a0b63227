"""Issue 21 items 8 and 13: a turn whose cancel is ignored ends; metrics as named.

Real CLI processes, real owners, the mock agent (helpers shared with ``test_owner.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.integration.test_owner import MOCK_ARGV, Cli, alive, cli, finish, mock, wait_for

pytestmark = pytest.mark.integration

__all__ = ["cli", "mock"]  # fixtures, imported for pytest


def _owner_lines(tether_home: Path) -> list[dict[str, object]]:
    (log,) = (tether_home / "logs").glob("owner-*.log")
    return [json.loads(ln) for ln in log.read_text().splitlines() if ln.startswith("{")]


def test_issue21_item13_a_departing_callers_cancel_is_counted_and_logged(
    mock: Cli, tether_home: Path
) -> None:
    """A prompter that goes away mid-turn: its cancel is in cancel_total{outcome}, and
    the `caller_left` line names the turn as every other line does (`requestId`)."""
    caller = mock.popen("prompt", "sleep 30000")
    active = mock.wait_active()
    caller.kill()  # our own child
    finish(caller)
    wait_for(lambda: mock.status()["status"] == "idle", "the turn to end")
    wait_for(
        lambda: mock.json("metrics")["counters"]["cancel_total{outcome=success}"] == 1,
        "the departing caller's cancel to be counted",
    )
    (left,) = [ln for ln in _owner_lines(tether_home) if ln.get("event") == "caller_left"]
    assert left["requestId"] == active["currentRequest"]
    assert "request_id" not in left
    status = mock.status()
    assert "counters" not in status  # not the session's: they are everyone's
    assert status["globalCounters"]["cancel_total{outcome=success}"] == 1


def test_issue21_item8_an_agent_that_ignores_cancel_is_retired_and_the_session_goes_on(
    cli: Callable[..., Cli], project_dir: Path
) -> None:
    """`prompt "hang"`, then `cancel`: after cancelGrace the turn ends `cancelled`, the
    cancel says the agent did not honour it, the run is retired (agent_run_ended
    `unresponsive`, with proof), and the next prompt runs on a fresh agent that resumed
    the same ACP session."""
    (project_dir / ".tether.toml").write_text("cancelGrace = 1\n")
    c = cli(["--agent", " ".join([*MOCK_ARGV, "--load-session"])])
    c.run("sessions", "new")
    caller = c.popen("prompt", "hang")
    before = c.wait_active()
    said = c.run("cancel").stdout
    assert said.startswith("cancelled; the agent did not end the turn within 1 s"), said
    rc, out, err = finish(caller)
    assert rc == 0, err
    assert "[done] cancelled" in out
    assert not alive(before["agentPid"])  # retired: its tree ended
    after = c.run("prompt", "echo NEW").stdout
    assert "NEW" in after
    now = c.status()
    assert now["agentPid"] != before["agentPid"]
    assert now["acpSessionId"] == before["acpSessionId"]  # resumed, not a new session
    (ended,) = [e["payload"] for e in c.history("turn")][:1]
    assert ended["cancel"] == {
        "honoured": False,
        "agentRetired": True,
        "stopReason": "cancelled",
        "graceS": 1.0,
    }
    (run_end,) = [e["payload"] for e in c.history("agent_run_ended")]
    assert run_end["leaseId"] == before["leaseId"]
    assert run_end["message"] == "agent run ended: unresponsive"
    assert run_end["survivors"] == []
    counters = c.json("metrics")["counters"]
    assert counters["cancel_total{outcome=not-honoured}"] == 1
    shown = c.run("sessions", "watch", "--from", "1", "--no-follow").stdout
    assert "[done] cancelled (the agent ignored the cancel: restarted)" in shown, shown


def test_issue21_item8_cancel_says_an_honoured_cancel_was_honoured(mock: Cli) -> None:
    """A cancel the agent honours: `cancel` says plain `cancelled`, and its JSON says
    honoured; the agent stays warm."""
    caller = mock.popen("prompt", "sleep 30000")
    active = mock.wait_active()
    result = mock.json("cancel")
    assert result["cancelled"] is True
    assert result["honoured"] is True
    assert result["agentRetired"] is False
    assert finish(caller)[0] == 0
    again = mock.popen("prompt", "sleep 30000")
    mock.wait_active()
    assert mock.run("cancel").stdout == "cancelled; the agent ended the turn\n"
    assert finish(again)[0] == 0
    assert mock.status()["agentPid"] == active["agentPid"]
