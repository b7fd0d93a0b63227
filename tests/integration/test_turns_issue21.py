"""Issue 21 items 8 and 13: a turn whose cancel is ignored ends; metrics as named.

Real CLI processes, real owners, the mock agent (helpers shared with ``test_owner.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.integration.test_owner import Cli, cli, finish, mock, wait_for

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
