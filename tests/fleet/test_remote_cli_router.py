"""The CLI against a fleet router (``TETHER_SERVER`` = the router): the same commands as
against a gateway, sessions found by (agent, cwd, name) among the router's own ids, and
``sessions rehome`` moving a session off a host that died."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._cli import run_tether
from tests.conftest import python_env
from tests.fleet.test_fleet_e2e import USER_TOKEN, Processes, procs

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = [
    pytest.mark.fleet,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(240),
]
__all__ = ["procs"]  # the fixture, imported for pytest


def test_the_cli_through_a_router_and_a_rehome(procs: Processes, project_dir: Path) -> None:
    """Create, prompt, list, status and history through a router; re-homing is refused
    while the session's host is up, then moves it once that host is gone, and the same
    name prompts the new session."""
    procs.host("h1")
    procs.host("h2")
    router = procs.router()
    env = {**python_env(), "TETHER_SERVER": router.url, "TETHER_TOKEN": USER_TOKEN}

    def cli(*args: str) -> tuple[int, str, str]:
        r = run_tether(*args, cwd=project_dir, env=env, timeout=120)
        assert "Traceback" not in r.stderr, r.stderr
        return r.returncode, r.stdout, r.stderr

    code, out, err = cli("mock", "sessions", "new", "-s", "fleet")
    assert (code, "created" in out) == (0, True), err
    code, out, err = cli("mock", "-s", "fleet", "prompt", "echo through the router")
    assert (code, out.splitlines()[0]) == (0, "through the router"), err
    code, out, _ = cli("--format", "json", "mock", "sessions", "list")
    [listed] = json.loads(out)["sessions"]
    sid, home = listed["id"], listed["hostId"]
    assert listed["name"] == "fleet"
    code, out, _ = cli("mock", "-s", "fleet", "status")
    assert (code, "status:" in out) == (0, True)
    code, out, _ = cli("mock", "-s", "fleet", "sessions", "history")
    assert "echo through the router" in out

    code, _out, err = cli("mock", "-s", "fleet", "sessions", "rehome")
    assert code == 1
    assert "is up" in err  # HOST_AVAILABLE: a live host's session is not lost

    lost = procs.hosts[home]
    lost.proc.kill()  # the host process we started, by its pid
    lost.stop()
    code, out, err = cli("--format", "json", "mock", "sessions", "rehome", sid[:16])
    assert code == 0, err
    moved = json.loads(out)
    assert (moved["action"], moved["rehomedFrom"], moved["fromHost"]) == (
        "session_rehomed",
        sid,
        home,
    )
    assert moved["hostId"] != home
    code, out, err = cli("mock", "-s", "fleet", "prompt", "echo on the new host")
    assert (code, out.splitlines()[0]) == (0, "on the new host"), err
    code, out, err = cli("mock", "-s", "fleet", "sessions", "close")
    assert code == 0, err
