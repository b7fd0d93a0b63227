"""Text-mode records are for people, not Python reprs (issue 9, item 15)."""

from __future__ import annotations

import pytest

from tether import errors
from tether.cli import _render

NOW = 1_795_436_700.0
END = {
    "reason": "terminated",
    "terminatedBy": "daemon",
    "message": "agent run ended: close (close)",
    "exitCode": 0,
    "signal": None,
    "stderrTail": "",
    "survivors": [],
    "killMode": "exit",
}


def test_status_snapshot_has_no_python_reprs() -> None:
    """Nested tables, times, durations and None read as text: no braces, quotes or None."""
    text = _render.fields(
        {
            "action": "status_snapshot",
            "status": "closed",
            "ownerPid": None,
            "uptimeS": 243.5,
            "lastPromptTime": NOW - 3,
            "lastEnd": END,
            "counters": {"run_spawn_total": 1},
            "stopping": False,
        },
        now=NOW,
    )
    for bad in ("{", "'", "None", "False", "action"):
        assert bad not in text, text
    lines = dict(line.split(":", 1) for line in text.splitlines())
    assert lines["owner pid"].strip() == "-"
    assert lines["uptime"].strip() == "4 min 3 s"
    assert lines["last prompt time"].strip().endswith("(3 s ago)")
    assert lines["last end"].strip() == (
        "terminated by the daemon: agent run ended: close (close); exit code 0"
    )
    assert lines["counters"].strip() == "run_spawn_total=1"
    assert lines["stopping"].strip() == "no"


@pytest.mark.parametrize(
    ("environ", "euid", "hinted"),
    [
        pytest.param({"IS_SANDBOX": "yes"}, 0, True, id="root-sandbox"),
        pytest.param({"IS_SANDBOX": "1"}, 0, False, id="value-1-is-fine"),
        pytest.param({}, 0, False, id="unset"),
        pytest.param({"IS_SANDBOX": "yes"}, 1000, False, id="not-root"),
    ],
)
def test_claude_sandbox_failure_gets_a_hint(
    environ: dict[str, str], euid: int, hinted: bool
) -> None:
    """claude-agent-acp's exit-1-as-root-with-IS_SANDBOX=yes failure names the variable."""
    exc = errors.AgentRequestError(
        "session/new failed: Internal error (code -32603)",
        acp={"code": -32603, "data": {"details": "Claude Code process exited with code 1"}},
    )
    _render.add_hint(exc, environ, euid)
    assert ("IS_SANDBOX" in exc.message) is hinted
