"""Sessions owned by sessions, with real processes: an agent runs `tether` from its tree.

The mock agent's ``run CMD...`` verb runs a command from inside the agent's own process
tree, so the `tether` it runs is a requester that the kernel can place: below the
session's keeper, with ``TETHER_SESSION_KEY`` in its environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.state.registry import Registry

pytestmark = pytest.mark.integration

TETHER = [sys.executable, "-m", "tether"]


def tether(
    *args: str, cwd: Path, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [*TETHER, "--cwd", str(cwd), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    if check:
        assert r.returncode == 0, (args, r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    return r


def as_agent(project: Path, session: str, command: str) -> tuple[int, str]:
    """Have session ``session``'s agent run ``tether --cwd PROJECT <command>``; (exit, output)."""
    cli = " ".join([*TETHER, "--cwd", str(project)])
    r = tether(
        "--format", "quiet", "mock", "prompt", "-s", session, f"run {cli} {command}", cwd=project
    )
    head, _, body = r.stdout.partition("\n")
    assert head.startswith("exit="), r.stdout
    return int(head[len("exit=") :]), body


def keys(project: Path) -> dict[str, str]:
    r = tether("--format", "json", "mock", "sessions", "list", "--all", cwd=project)
    items = json.loads(r.stdout.splitlines()[-1])["sessions"]
    return {s["name"]: s["key"] for s in items}


def listed(output: str) -> list[str]:
    # the JSON answer is the last JSON line (warnings on stderr may follow it)
    last = [line for line in output.strip().splitlines() if line.startswith("{")][-1]
    data: dict[str, Any] = json.loads(last)
    return sorted(s["name"] for s in data["sessions"])


@pytest.fixture
def family(project_dir: Path) -> Any:
    """Sessions `parent` and `stranger` (operator-made); `parent`'s agent makes `child`."""
    for name in ("parent", "stranger"):
        tether("mock", "sessions", "new", "-s", name, cwd=project_dir)
    code, out = as_agent(project_dir, "parent", "mock sessions new -s child")
    assert code == 0, out
    try:
        yield keys(project_dir)
    finally:
        for name in ("stranger", "parent", "child"):
            tether("mock", "sessions", "close", "-s", name, cwd=project_dir, check=False)


def test_spawned_session_is_recorded_as_the_spawners_child(
    family: dict[str, str], project_dir: Path
) -> None:
    with Registry() as reg:
        child = reg.session(family["child"])
        stranger = reg.session(family["stranger"])
    assert child is not None
    assert stranger is not None
    assert (child.spawned_by, child.parent_session_key, child.owner_session_key) == (
        family["parent"],
        family["parent"],
        family["parent"],
    )
    assert stranger.spawned_by is None  # the operator's
    r = tether("mock", "sessions", "list", "--tree", cwd=project_dir)
    lines = r.stdout.splitlines()
    parent_at = next(i for i, line in enumerate(lines) if line.startswith("parent "))
    assert lines[parent_at + 1].startswith("└── child ")


def test_agent_sees_exactly_its_tree(family: dict[str, str], project_dir: Path) -> None:
    """Under the default `tree`, the agent lists itself and its child, not the stranger."""
    code, out = as_agent(project_dir, "parent", "--format json mock sessions list")
    assert code == 0, out
    assert listed(out) == ["child", "parent"]
    code, out = as_agent(project_dir, "parent", "mock status -s child")
    assert code == 0, out
    code, out = as_agent(project_dir, "parent", "mock status -s stranger")
    assert code == 5, out
    assert "visibility is tree" in out
    code, out = as_agent(project_dir, "parent", "mock sessions history -s stranger")
    assert code == 5, out


def test_child_cannot_reach_its_parent_under_tree(
    family: dict[str, str], project_dir: Path
) -> None:
    code, out = as_agent(project_dir, "child", "--format json mock sessions list")
    assert code == 0, out
    assert listed(out) == ["child"]
    code, out = as_agent(project_dir, "child", "mock prompt -s parent hello")
    assert code == 5, out


def test_visibility_all_widens_to_the_same_agent(
    family: dict[str, str], project_dir: Path, tether_home: Path
) -> None:
    # The project's file may not widen the operator's policy: still `tree` ...
    (project_dir / ".tether.toml").write_text('[sessions]\nvisibility = "all"\n')
    code, out = as_agent(project_dir, "child", "--format json mock sessions list")
    assert code == 0, out
    assert listed(out) == ["child"]
    assert "is wider than 'tree' and is ignored" in out
    # ... the operator's (user) file does.
    (tether_home / "config.toml").write_text('[sessions]\nvisibility = "all"\n')
    code, out = as_agent(project_dir, "child", "--format json mock sessions list")
    assert code == 0, out
    assert listed(out) == ["child", "parent", "stranger"]


def test_forged_claim_from_outside_gets_self(family: dict[str, str], project_dir: Path) -> None:
    """A caller outside every tree claiming `parent` sees `parent` alone -- not its child."""
    env = {**os.environ, "TETHER_SESSION_KEY": family["parent"]}
    r = tether("--format", "json", "mock", "sessions", "list", cwd=project_dir, env=env)
    assert listed(r.stdout) == ["parent"]
    r = tether("mock", "status", "-s", "child", cwd=project_dir, env=env, check=False)
    assert r.returncode == 5, r.stderr
    assert "unproven" in r.stderr


def test_forged_claim_inside_a_tree_gets_its_own_session_only(
    family: dict[str, str], project_dir: Path
) -> None:
    """The parent's agent claiming the stranger's key is the parent, clamped to self."""
    forged = f"env TETHER_SESSION_KEY={family['stranger']} " + " ".join(TETHER)
    prompt = f"run {forged} --cwd {project_dir} --format json mock sessions list"
    r = tether("--format", "quiet", "mock", "prompt", "-s", "parent", prompt, cwd=project_dir)
    assert r.stdout.startswith("exit=0"), r.stdout
    assert listed(r.stdout.partition("\n")[2]) == ["parent"]


def test_closing_the_parent_closes_its_children_first(
    family: dict[str, str], project_dir: Path
) -> None:
    # The child's agent must be running for "leaves no process" to mean something.
    tether("mock", "prompt", "-s", "child", "echo up", cwd=project_dir)
    with Registry() as reg:
        child_leases = [x for x in reg.leases(session_key=family["child"]) if x.state == "open"]
    assert child_leases
    r = tether("--format", "json", "mock", "sessions", "close", "-s", "parent", cwd=project_dir)
    result = json.loads(r.stdout.splitlines()[-1])
    assert [c["sessionKey"] for c in result["closedChildren"]] == [family["child"]]
    assert result["survivors"] == []
    with Registry() as reg:
        child = reg.session(family["child"])
        assert child is not None
        assert child.state == "closed"
        for lease in child_leases:
            after = reg.lease(lease.lease_id)
            assert after is not None
            assert after.state == "closed"
    for lease in child_leases:
        assert lease.keeper_pid is not None
        assert not Path(f"/proc/{lease.keeper_pid}").exists() or _is_zombie(lease.keeper_pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] in "ZX"


# --- delegation through MCP -----------------------------------------------------------------


def mcp_call(project: Path, session: str, server: str, tool: str, args: dict[str, Any]) -> Any:
    """Have ``session``'s agent call ``tool`` on MCP server ``server``; the JSON-RPC answer."""
    from mcp_types import jsonrpc_message_adapter
    from mcp_types.methods import validate_server_result

    text = f"mcp-call {server} {tool} {json.dumps(args)}"
    r = tether("--format", "quiet", "mock", "prompt", "-s", session, text, cwd=project)
    assert not r.stdout.startswith("mcp-call failed"), r.stdout
    answer = json.loads(r.stdout)
    jsonrpc_message_adapter.validate_python(answer)
    validate_server_result("tools/call", "2025-06-18", answer["result"])
    return answer["result"]


def test_bridge_spawn_send_list_end_to_end(project_dir: Path) -> None:
    """An agent handed `tether mcp` spawns a child, prompts it, and lists its tree."""
    tether("--mcp-bridge", "mock", "sessions", "new", "-s", "boss", cwd=project_dir)
    tether("mock", "sessions", "new", "-s", "stranger", cwd=project_dir)
    try:
        spawned = mcp_call(
            project_dir,
            "boss",
            "tether",
            "sessions_spawn",
            {"agent": "mock", "name": "worker", "message": "echo ready to work"},
        )
        assert not spawned.get("isError"), spawned
        child_key = spawned["structuredContent"]["sessionKey"]
        assert spawned["structuredContent"]["reply"]["text"] == "ready to work"
        sent = mcp_call(
            project_dir,
            "boss",
            "tether",
            "sessions_send",
            {"sessionKey": child_key, "message": "echo again"},
        )
        assert sent["structuredContent"]["text"] == "again"
        seen = mcp_call(project_dir, "boss", "tether", "sessions_list", {})
        names = sorted(s["name"] for s in seen["structuredContent"]["sessions"])
        assert names == ["boss", "worker"]
        keys_now = keys(project_dir)
        denied = mcp_call(
            project_dir,
            "boss",
            "tether",
            "session_status",
            {"sessionKey": keys_now["stranger"]},
        )
        assert denied["isError"] is True
        assert "visibility is tree" in denied["content"][0]["text"]
        with Registry() as reg:
            worker = reg.session(child_key)
        assert worker is not None
        assert worker.spawned_by == keys_now["boss"]
    finally:
        for name in ("stranger", "boss", "worker"):
            tether("mock", "sessions", "close", "-s", name, cwd=project_dir, check=False)


def test_users_mcp_servers_reach_session_new(project_dir: Path, tmp_path: Path) -> None:
    """`--mcp-config FILE` servers are passed to the agent (here: a `tether mcp` named mine)."""
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "mine": {
                        "command": sys.executable,
                        "args": ["-m", "tether", "mcp"],
                        "env": {"TETHER_HOME": os.environ["TETHER_HOME"]},
                    }
                }
            }
        )
    )
    tether("--mcp-config", str(config), "mock", "sessions", "new", "-s", "u", cwd=project_dir)
    try:
        seen = mcp_call(project_dir, "u", "mine", "sessions_list", {})
        # No --session-key: the kernel alone proves the caller is session u's agent.
        assert [s["name"] for s in seen["structuredContent"]["sessions"]] == ["u"]
    finally:
        tether("mock", "sessions", "close", "-s", "u", cwd=project_dir, check=False)


def test_exec_passes_the_users_mcp_servers(project_dir: Path, tmp_path: Path) -> None:
    """`exec --mcp-config`: the one-shot agent gets the server too, and acts as its own run."""
    from mcp_types.methods import validate_server_result

    config = tmp_path / "mcp.json"
    server = {"command": sys.executable, "args": ["-m", "tether", "mcp"]}
    config.write_text(json.dumps({"mcpServers": {"mine": server}}))
    tether("mock", "sessions", "new", "-s", "operators", cwd=project_dir)
    try:
        r = tether(
            "--mcp-config",
            str(config),
            "--format",
            "quiet",
            "mock",
            "exec",
            "mcp-call mine sessions_list {}",
            cwd=project_dir,
        )
        answer = json.loads(r.stdout)
        validate_server_result("tools/call", "2025-06-18", answer["result"])
        # The exec run is a requester with no session row: it sees no one else's session.
        assert answer["result"]["structuredContent"] == {"sessions": []}
    finally:
        tether("mock", "sessions", "close", "-s", "operators", cwd=project_dir, check=False)
