"""One configuration, five doors, one set of owner settings (issue 22, settings drift).

Each door built a session's owner settings from the configuration with its own key set
(the CLI 15 keys, the gateway 8, the library 2, the MCP bridge none); now every door
calls :func:`tether.operations.settings`. Here one config file sets every owner key to
a value that is not its default, a session is created from each door -- the CLI, a
real ``tether serve`` (``POST /v1/sessions`` and its ACP route), the library, ``tether
acp`` and the MCP bridge (``sessions_spawn`` called by an agent through ``tether mcp``)
-- and each session's ``status`` shows the same effective settings, each the configured
value.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests._cli import run_tether
from tests.integration._acp_peer import AcpPeer
from tests.integration._serve import Gateway, spawn_gateway

import tether
from tether import operations

pytestmark = pytest.mark.integration

MOCK = f"{sys.executable} -m tether.testing.mock_agent"

CONFIG = """\
ttl = 1234
defaultPermissions = "approve-all"
permissionPolicy = "deny-all"
permissionTimeout = 77
turnTimeout = 555
ownerMaxLifetime = 99999
queueMaxDepth = 7
livenessInterval = 11
handshakeTimeout = 22
promptMaxBytes = 2097152
frameMaxBytes = 4194304
abandonedTurnGrace = 3
cancelGrace = 4
rateLimitHold = 60
ownerUnresponsiveAfter = 45
journalMaxEntries = 5000
journalMaxBytes = 10000000
journalMaxAge = 86400
terminalOutputLimit = 4096
terminalPty = true
mcpBridge = true
mcpServers = [{ name = "extra", command = "true" }]
"""

# What every session's owner goes by (status "settings"), whichever door made it.
EXPECTED = {
    "idle_ttl": 1234.0,
    "permission_mode": "approve-all",
    "permission_policy": "deny-all",
    "permission_timeout": 77.0,
    "auth_policy": "skip",
    "turn_timeout": 555.0,
    "max_lifetime": 99999.0,
    "queue_max_depth": 7,
    "liveness_interval": 11.0,
    "handshake_timeout": 22.0,
    "max_frame_bytes": 2097152,
    "agent_frame_bytes": 4194304,
    "abandoned_turn_grace": 3.0,
    "cancel_grace": 4.0,
    "rate_limit_hold": 60.0,
    "unresponsive_after": 45.0,
    "journal_max_entries": 5000,
    "journal_max_bytes": 10000000,
    "journal_max_age": 86400.0,
    "journal_frames": True,
    "terminal": True,
    "terminal_output_limit": 4096,
    "terminal_pty": True,
    "mcp_bridge": True,
    # Per door by design: the ACP door adds the servers its client names in session/new
    # (none here), so every session has the configured one.
    "mcp_servers": ["extra"],
    "fs": True,
}


@pytest.fixture
def configured(tether_home: Path) -> Iterator[Path]:
    """The user config file of this home (every door reads it); at the end, every
    session of the home closed (with proof of its tree)."""
    (tether_home / "config.toml").write_text(CONFIG)
    try:
        yield tether_home
    finally:
        for record in operations.list_sessions():
            operations.close_session(record["key"])


def _status(key: str, project: Path) -> dict[str, Any]:
    """``tether status --key KEY --format json``: the CLI's status of any door's session."""
    r = run_tether("--format", "json", "status", "--key", key, cwd=project)
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def _from_cli(project: Path) -> str:
    r = run_tether("mock", "sessions", "new", "-s", "cli", cwd=project)
    assert r.returncode == 0, r.stderr
    r = run_tether("--format", "json", "mock", "status", "-s", "cli", cwd=project)
    assert r.returncode == 0, r.stderr
    return str(json.loads(r.stdout)["sessionKey"])


def _from_gateway(gateway: Gateway, project: Path) -> str:
    return gateway.ensure(project, name="http")


def _from_acp_over_http(gateway: Gateway, project: Path) -> str:
    """The gateway's ACP route (``/v1/acp/{serverId}``): ``session/new`` in a POST."""

    def rpc(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        frame = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        r = gateway.http.post("/v1/acp/srv-1?agent=mock", json=frame)
        assert r.status_code == 200, r.text
        return dict(r.json()["result"])

    rpc(1, "initialize", {"protocolVersion": 1})
    return str(rpc(2, "session/new", {"cwd": str(project), "mcpServers": []})["sessionId"])


def _from_library(project: Path) -> str:
    async def create() -> str:
        async with tether.Client() as client:
            session = await client.ensure_session("mock", cwd=project, name="lib")
            return session.key

    return asyncio.run(create())


def _from_acp_door(project: Path) -> str:
    door = AcpPeer(project, MOCK)
    try:
        door.initialize()
        return door.new_session()  # the ACP sessionId is the session key
        door.disconnect()  # the door goes; its session stays warm
    finally:
        door.kill()  # reaped (if still running), its pipes closed


def _from_mcp_bridge(project: Path) -> str:
    """The CLI session's agent (handed `tether mcp`: mcpBridge) spawns a session."""
    args = json.dumps({"agent": "mock", "name": "mcp"})
    r = run_tether(
        "--format", "quiet", "mock", "prompt", "-s", "cli",
        f"mcp-call tether sessions_spawn {args}", cwd=project,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert not answer["result"].get("isError"), answer
    return str(answer["result"]["structuredContent"]["sessionKey"])


def test_issue22_every_door_gives_a_session_the_same_owner_settings(
    configured: Path, project_dir: Path
) -> None:
    """Sessions made from the CLI, the gateway (REST and ACP over HTTP), the library,
    the ACP door and the MCP bridge with one configuration: each owner goes by every
    configured value (status ``settings``, in JSON from the CLI and the gateway, and in
    the CLI's text)."""
    gateway = spawn_gateway(configured)
    try:
        keys = {"cli": _from_cli(project_dir), "http": _from_gateway(gateway, project_dir)}
        keys["acp-http"] = _from_acp_over_http(gateway, project_dir)
        keys["library"] = _from_library(project_dir)
        keys["acp"] = _from_acp_door(project_dir)
        keys["mcp"] = _from_mcp_bridge(project_dir)
        assert len(set(keys.values())) == len(keys)
        seen = {door: _status(key, project_dir)["settings"] for door, key in keys.items()}
        assert seen == dict.fromkeys(keys, EXPECTED)
        over_http = gateway.http.get(f"/v1/sessions/{keys['http']}")
        assert over_http.status_code == 200, over_http.text
        assert over_http.json()["status"]["settings"] == EXPECTED
        text = run_tether("status", "--key", keys["library"], cwd=project_dir)
        assert text.returncode == 0, text.stderr
        assert "idle_ttl=1234" in text.stdout
        assert "queue_max_depth=7" in text.stdout
    finally:
        gateway.stop()
