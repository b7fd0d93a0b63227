"""What the gateway says about a session, against a real gateway: the record as the CLI
shows it (its instance id too), who is attached, and the terminate route always served."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import python_env
from tests.integration._serve import Gateway, gateway

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = pytest.mark.integration
__all__ = ["gateway"]


def test_a_session_record_names_its_instance_and_who_is_attached(
    gateway: Gateway, project_dir: Path
) -> None:
    sid = gateway.ensure(project_dir, name="rec")
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "--cwd",
            str(project_dir),
            "--format",
            "json",
            "mock",
            "sessions",
            "show",
            "-s",
            "rec",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**python_env(), "TETHER_HOME": str(gateway.home)},
    )
    assert shown.returncode == 0, shown.stderr
    instance = json.loads(shown.stdout.splitlines()[-1])["instanceId"]
    assert len(instance) == 32
    rid = gateway.prompt(sid, "echo hi")["requestId"]
    with gateway.http.stream("GET", f"/v1/sessions/{sid}/events?from=1") as stream:
        for line in stream.iter_lines():  # the stream is open: the gateway watches
            if rid in line and '"turn_ended"' in line:
                break
        record = gateway.http.get(f"/v1/sessions/{sid}").json()
    assert record["instanceId"] == instance
    gateway_pid = gateway.http.get("/v1/health").json()["pid"]
    assert {"pid": gateway_pid, "uid": os.getuid(), "door": "http", "roles": ["watcher"]} in (
        record["status"]["attached"]
    )


def test_the_terminate_route_is_always_served_and_described(gateway: Gateway) -> None:
    assert "/v1/sessions/{id}/terminate" in gateway.http.get("/v1/openapi.json").json()["paths"]
    assert "terminate" not in gateway.http.get("/v1/health").json()  # nothing to detect
    r = gateway.http.post("/v1/sessions/" + "0" * 64 + "/terminate")
    assert r.status_code == 404, r.text  # a route (an unknown session), not a 405
