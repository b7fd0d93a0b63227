"""MCP servers for session/new: normalised to ACP's McpServer shapes (schema-checked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.acp_schema import schema_errors

from tether import mcp_servers as bridge
from tether.errors import UsageError


def test_map_form_and_list_form_normalise_to_acp() -> None:
    servers = bridge.normalize(
        {
            "mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "server-fs"], "env": {"K": "v"}},
                "web": {"type": "sse", "url": "http://127.0.0.1:9/sse", "headers": {"A": "b"}},
            }
        }
    )
    assert servers == [
        {
            "name": "fs",
            "command": "npx",
            "args": ["-y", "server-fs"],
            "env": [{"name": "K", "value": "v"}],
        },
        {
            "type": "sse",
            "name": "web",
            "url": "http://127.0.0.1:9/sse",
            "headers": [{"name": "A", "value": "b"}],
        },
    ]
    assert bridge.normalize(servers) == servers


def test_servers_for_adds_the_bridge_last_and_names_win() -> None:
    mine = {"name": "tether", "command": "mine", "args": [], "env": []}
    out = bridge.servers_for({"mcp_servers": [mine], "mcp_bridge": True}, "key-1")
    assert len(out) == 1
    assert out[0]["args"][-2:] == ["--session-key", "key-1"]
    assert bridge.servers_for({}, "k") == []


def test_session_new_params_validate_against_the_acp_schema() -> None:
    servers = bridge.servers_for(
        {"mcp_servers": [{"name": "w", "url": "http://x", "type": "http"}], "mcp_bridge": True}, "k"
    )
    frame = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "session/new",
        "params": {"cwd": "/tmp", "mcpServers": servers},
    }
    assert schema_errors(frame, "client") == []


@pytest.mark.parametrize(
    "content",
    ["not json", json.dumps({"mcpServers": {"x": {"args": []}}}), json.dumps([{"command": "c"}])],
)
def test_bad_mcp_config_is_a_usage_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(content)
    with pytest.raises(UsageError):
        bridge.load_mcp_config(str(path))


def test_missing_mcp_config_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        bridge.load_mcp_config(str(tmp_path / "nope.json"))
