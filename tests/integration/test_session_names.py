"""Names cannot forge output (issue 20, item 7): every door refuses a session name with
control characters, the CLI escapes what it prints from the state, and a session can be
addressed by its key (``--key``) whatever its name, agent or door."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests._cli import run_tether
from tests.integration._acp_peer import AcpPeer, peer
from tests.integration._serve import Gateway, gateway

from tether import paths

pytestmark = pytest.mark.integration
__all__ = ["gateway", "peer"]  # the fixtures, imported for pytest

tether = run_tether
FORGING = ["a\nb", "x\x1b[2Jy", "tab\there", "bidi\u202eevil", "cr\rover"]  # NUL: no argv holds one


def _keys(project: Path) -> dict[str, str]:
    r = tether("--format", "json", "sessions", "list", "--all", cwd=project)
    assert r.returncode == 0, r.stderr
    return {s["name"]: s["key"] for s in json.loads(r.stdout)["sessions"]}


@pytest.mark.parametrize("name", FORGING)
def test_cli_refuses_a_forging_name(project_dir: Path, name: str) -> None:
    """`sessions new -s $'a\\nb'`: exit 2, a clear line, no session (and nothing started)."""
    r = tether("mock", "sessions", "new", "-s", name, cwd=project_dir)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "refused in names" in r.stderr
    assert "\n" not in r.stderr.rstrip("\n").replace("\ntry `tether --help`", "")
    assert "\x1b" not in r.stderr
    assert _keys(project_dir) == {}


def test_gateway_refuses_a_forging_name(gateway: Gateway, project_dir: Path) -> None:
    """`POST /v1/sessions` with a newline or a NUL in the name: 422 BAD_VALUE, no session."""
    for name in ("a\nb", "nul\x00"):
        r = gateway.http.post(
            "/v1/sessions", json={"agent": "mock", "cwd": str(project_dir), "name": name}
        )
        assert r.status_code == 422, r.text
        assert "refused in names" in r.json()["detail"]
    assert gateway.http.get("/v1/sessions").json()["sessions"] == []


def test_mcp_bridge_refuses_a_forging_name(project_dir: Path) -> None:
    """The bridge's `sessions_spawn` writes the row itself before starting the owner:
    the name check under it refuses, and no row is left."""
    from tether.errors import InvalidName
    from tether.mcp import tools
    from tether.state.registry import Registry

    with pytest.raises(InvalidName):
        tools.sessions_spawn(
            {"agent": "mock", "name": "w\x1b]0;pwned\x07", "cwd": str(project_dir)}
        )
    with Registry() as reg:
        assert reg.sessions() == []


def test_a_stored_name_cannot_forge_a_row(project_dir: Path) -> None:
    """A row written before names were checked (or by hand) prints as one escaped row."""
    r = tether("mock", "sessions", "new", "-s", "plain", cwd=project_dir)
    assert r.returncode == 0, r.stderr
    try:
        with sqlite3.connect(paths.state_db()) as db:
            db.execute("UPDATE sessions SET name = ? WHERE name = 'plain'", ("a\nforged\x1b[31m",))
        listed = tether("sessions", "list", cwd=project_dir)
        assert listed.returncode == 0, listed.stderr
        assert len(listed.stdout.splitlines()) == 1, listed.stdout
        assert listed.stdout.startswith("a\\nforged\\x1b[31m\t")
        key = _keys(project_dir)["a\nforged\x1b[31m"]
        shown = tether("sessions", "show", "--key", key[:10], cwd=project_dir)
        assert shown.returncode == 0, shown.stderr
        assert "\x1b" not in shown.stdout
        assert "name:               a\\nforged\\x1b[31m" in shown.stdout
    finally:
        for key in _keys(project_dir).values():
            tether("sessions", "close", "--key", key, cwd=project_dir)


def test_key_prefix_addresses_a_session(project_dir: Path) -> None:
    """`--key PREFIX` finds the one session whose key starts with it: status, history, close."""
    r = tether("mock", "sessions", "new", "-s", "work", cwd=project_dir)
    assert r.returncode == 0, r.stderr
    key = _keys(project_dir)["work"]
    try:
        status = tether("--format", "json", "status", "--key", key[:8], cwd=project_dir)
        assert status.returncode == 0, status.stderr
        history = tether("sessions", "history", "--key", key[:8], cwd=project_dir)
        assert (history.returncode, history.stdout) == (0, "no turns yet\n"), history.stderr
        sent = tether("--format", "quiet", "prompt", "--key", key, "echo by key", cwd=project_dir)
        assert (sent.returncode, sent.stdout) == (0, "by key\n"), sent.stderr
        both = tether("mock", "status", "-s", "work", "--key", key[:8], cwd=project_dir)
        assert both.returncode == 2
        missing = tether("sessions", "close", "--key", "0" * 64, cwd=project_dir)
        assert missing.returncode == 4, missing.stderr
    finally:
        closed = tether("sessions", "close", "--key", key[:8], cwd=project_dir)
    assert closed.returncode == 0, closed.stderr
    assert _keys(project_dir) == {"work": key}
    assert tether("sessions", "show", "--key", key, cwd=project_dir).stdout.count("closed") >= 1


def test_acp_door_session_is_reachable_by_key(
    peer: Callable[..., AcpPeer], project_dir: Path
) -> None:
    """`tether acp --agent CMD` names its sessions `acp-…` under a raw-command scope: the
    CLI reaches one by its key (the ACP door takes no name from its client; its generated
    name goes through the same check as every other door's)."""
    door = peer()
    door.initialize()
    sid = door.new_session()
    prefix = sid[:12]
    shown = tether("--format", "json", "sessions", "show", "--key", prefix, cwd=project_dir)
    assert shown.returncode == 0, shown.stderr
    record: dict[str, Any] = json.loads(shown.stdout)
    assert record["key"] == sid
    assert record["name"].startswith("acp-")
    closed = tether("sessions", "close", "--key", prefix, cwd=project_dir)
    assert closed.returncode == 0, closed.stderr
