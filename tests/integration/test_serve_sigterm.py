"""A single-host gateway (no fleet) stopped by SIGTERM never cuts a running turn: the
gateway holds no session state, and the session's owner, which runs the turn, outlives
it (issue 25: a drain's grace is a fleet host's; here nothing needs one)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.integration._serve import spawn_gateway

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_a_sigterm_to_a_single_gateway_lets_the_running_turn_finish(
    tether_home: Path, project_dir: Path
) -> None:
    gw = spawn_gateway(tether_home)
    sid = gw.ensure(project_dir, "long")
    rid = gw.prompt(sid, "sleep 1500 ; echo finished anyway")["requestId"]
    assert gw.stop() in (0, -15)  # SIGTERM to the gateway we started; uvicorn re-raises it
    again = spawn_gateway(tether_home)
    try:
        deadline = time.monotonic() + 60
        turn: dict[str, object] = {}
        while not turn.get("stopReason"):
            assert time.monotonic() < deadline, "the turn never ended"
            turns = again.http.get(f"/v1/sessions/{sid}/history").json()["turns"]
            turn = next((t for t in turns if t["requestId"] == rid), {})
            time.sleep(0.05)
        assert turn["stopReason"] == "end_turn"
        text = again.http.get(f"/v1/sessions/{sid}/transcript").text
        assert "finished anyway" in text
    finally:
        again.close_all()
        again.stop()
