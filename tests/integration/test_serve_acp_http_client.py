"""sandbox-agent's own ACP-over-HTTP client, npm ``acp-http-client`` 0.4.2 (written by
others), against a real ``tether serve`` at ``/v1/acp/{serverId}``.

The client is installed pinned by the benchmark's npm installer into
``bench/.acp-http-client`` (git-ignored, cached); without Node or npm, or when the
install fails (no registry), the test skips with the reason. A small ESM script
(``acp_http_client.mjs``) drives the client's public API -- initialize, session/new,
prompts (an echo, a stream, one whose tool call asks permission, which the client
grants), session/cancel, session/list, then ``disconnect()`` (its DELETE) -- and prints
what it got and every envelope both ways, which are checked against the schema here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.acp_schema import schema_errors
from tests.conftest import python_env
from tests.integration._bench import bench_run
from tests.integration._serve import Gateway, gateway

__all__ = ["gateway"]

pytestmark = [pytest.mark.integration, pytest.mark.realagents]

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.4.2"
CLIENT_DIR = ROOT / "bench" / ".acp-http-client"
ENTRY = CLIENT_DIR / "node_modules" / "acp-http-client" / "dist" / "index.js"
SCRIPT = Path(__file__).with_name("acp_http_client.mjs")
SERVER = "/v1/acp/js-1"


@pytest.fixture(scope="module")
def acp_http_client() -> Path:
    bench = bench_run()
    tool = bench.Tool(ROOT / "bench")
    bench.npm_install(tool, CLIENT_DIR, "acp-http-client", VERSION, ENTRY)
    if not tool.available:
        pytest.skip(tool.reason)
    return ENTRY


def _check_envelopes(envelopes: list[dict[str, Any]]) -> None:
    """Every frame both ways against the schema; responses by the method they answer."""
    asked: dict[tuple[str, Any], str] = {}  # (who asked, id) -> method
    for item in envelopes:
        frame, outbound = item["envelope"], item["direction"] == "outbound"
        sender = "client" if outbound else "agent"
        if "method" in frame and "id" in frame:
            asked[(sender, frame["id"])] = frame["method"]
        answered = None
        if "method" not in frame:
            answered = asked.get(("agent" if outbound else "client", frame["id"]))
            assert answered is not None, f"a response to nothing: {frame}"
        assert schema_errors(frame, sender, answered) == [], frame


def test_sandbox_agents_client_against_tether(
    acp_http_client: Path, gateway: Gateway, project_dir: Path
) -> None:
    """The client's whole life against Tether: answers in the POSTs, updates on the SSE
    stream, a permission question answered through it, a cancel, a clean DELETE."""
    config = {
        "module": str(acp_http_client),
        "baseUrl": gateway.url,
        "token": gateway.token,
        "path": SERVER,
        "cwd": str(project_dir),
    }
    r = subprocess.run(
        ["node", str(SCRIPT), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=python_env(),
        check=False,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "error" not in out, out["error"]
    assert "ACP write error" not in r.stderr, r.stderr
    assert out["initialize"]["protocolVersion"] == 1
    assert out["stops"] == {
        "echo": "end_turn",
        "stream": "end_turn",
        "permission": "end_turn",
        "cancelled": "cancelled",
    }
    assert [f"part {i}\n" for i in range(5)] == [t for t in out["texts"] if t.startswith("part")]
    assert out["texts"].count("hi") == 1  # no duplicate across POST and stream
    [ask] = out["asked"]
    assert ask["sessionId"] == out["sessionId"]
    assert ask["toolCall"]["title"] == "mock edit"
    assert out["sessionId"] in [s["sessionId"] for s in out["list"]["sessions"]]
    _check_envelopes(out["envelopes"])
    # One stream for the whole life: its GET raced the first POST and waited for the
    # server instead of a 204 (which ends this client's stream until its next POST).
    gets = [x for x in out["http"] if x["method"] == "GET"]
    assert [(x["status"], x["type"].split(";")[0]) for x in gets] == [(200, "text/event-stream")]
    for x in out["http"]:
        if x["method"] == "POST":
            assert x["status"] == 202 or (x["status"], x["type"]) == (200, "application/json")
    assert out["http"][-1]["method"] == "DELETE"
    assert out["http"][-1]["status"] == 204
    # disconnect() sent DELETE: the server is closed (a stream of it has nothing more)
    assert out["disconnected"] is True
    assert gateway.http.get(SERVER).status_code == 204
