"""The owner checks who its IPC peer is: a raw client inside an agent tree gets no more
than the CLI would give it, and the sandbox flag and the agent-to-agent spawn rule hold
with real processes.

A raw client (``tests/fake_agents/raw_ipc.py``) speaks IPC itself and skips the CLI's
check; the mock agent's ``run`` verb runs it from inside the agent's own process tree.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_acp_newer_methods import mock_full as mock_full  # the fixture
from tests.integration.test_delegation import TETHER, as_agent, keys, listed, tether
from tests.integration.test_delegation import family as family  # the fixture
from tests.integration.test_owner import Cli

from tether.state.registry import Registry

pytestmark = pytest.mark.integration

RAW = Path(__file__).resolve().parent.parent / "fake_agents" / "raw_ipc.py"


def raw_argv(key: str, kind: str, payload: dict[str, Any] | None = None) -> list[str]:
    return [sys.executable, str(RAW), key, kind, json.dumps(payload or {})]


def run_as_agent(project: Path, session: str, argv: list[str]) -> str:
    """Have ``session``'s agent run ``argv`` from its tree; its output (it must exit 0)."""
    r = tether(
        "--format", "quiet", "mock", "prompt", "-s", session, f"run {shlex.join(argv)}", cwd=project
    )
    head, _, body = r.stdout.partition("\n")
    assert head == "exit=0", r.stdout
    return body


def raw_as_agent(
    project: Path, session: str, key: str, kind: str, payload: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Have ``session``'s agent send one raw IPC request to ``key``'s owner."""
    body = run_as_agent(project, session, raw_argv(key, kind, payload))
    answer: dict[str, Any] = json.loads(body.strip().splitlines()[-1])
    return answer


def agent_ok(project: Path, session: str, command: str) -> str:
    """``as_agent`` that must succeed; its output."""
    code, out = as_agent(project, session, command)
    assert code == 0, out
    return out


def close_all(project: Path, *names: str) -> None:
    for name in names:
        tether("mock", "sessions", "close", "-s", name, cwd=project, check=False)


@pytest.mark.usefixtures("family")
def test_raw_client_in_a_tree_is_refused_what_the_rules_deny(project_dir: Path) -> None:
    """Prompt, status, watch, cancel and close of the stranger: VisibilityDenied, by rule."""
    fam = keys(project_dir)
    stranger = fam["stranger"]
    for kind, payload in (
        ("prompt", {"prompt": [{"type": "text", "text": "echo pwned"}]}),
        ("status", {}),
        ("watch", {"fromSeq": 1, "follow": False}),
        ("cancel", {}),
        ("set_mode", {"modeId": "plan"}),
        ("terminate", {}),
        ("close", {}),
    ):
        answer = raw_as_agent(project_dir, "parent", stranger, kind, payload)
        error = answer.get("error")
        assert error is not None, (kind, answer)
        assert error["type"] == "VisibilityDenied", (kind, error)
        assert error["fields"]["rule"] == "visibility=tree", (kind, error)
        assert error["fields"]["requester"] == fam["parent"], (kind, error)
    with Registry() as reg:
        row = reg.session(stranger)
        assert row is not None
        assert row.state == "open"  # the close never ran
    r = tether("--format", "json", "mock", "sessions", "read", "-s", "stranger", cwd=project_dir)
    assert "pwned" not in r.stdout  # nor did the prompt


@pytest.mark.usefixtures("family")
def test_raw_client_reaches_what_the_rules_allow(project_dir: Path) -> None:
    """The parent's agent prompts its own child through the raw client: the child answers."""
    fam = keys(project_dir)
    answer = raw_as_agent(
        project_dir,
        "parent",
        fam["child"],
        "prompt",
        {"prompt": [{"type": "text", "text": "echo hello child"}]},
    )
    assert answer.get("result", {}).get("stopReason") == "end_turn", answer


@pytest.mark.usefixtures("family")
def test_a_forged_cascade_claim_does_not_open_the_stranger(project_dir: Path) -> None:
    """`cascadeFrom` names the requester's own session, but the stranger is not its family."""
    fam = keys(project_dir)
    answer = raw_as_agent(
        project_dir, "parent", fam["stranger"], "close", {"cascadeFrom": fam["parent"]}
    )
    assert answer.get("error", {}).get("type") == "VisibilityDenied", answer


@pytest.mark.usefixtures("family")
def test_the_operators_raw_client_is_not_checked(project_dir: Path) -> None:
    """Outside every agent tree the peer is the operator: the owner lets it drive anything."""
    fam = keys(project_dir)
    import subprocess

    r = subprocess.run(
        raw_argv(fam["stranger"], "status"), capture_output=True, text=True, check=True
    )
    answer = json.loads(r.stdout)
    assert answer["result"]["sessionKey"] == fam["stranger"], answer


@pytest.mark.usefixtures("family")
@pytest.mark.parametrize("how", ["close", "terminate"])
def test_a_requester_closing_its_child_closes_the_grandchild_too(
    project_dir: Path, how: str
) -> None:
    """The grandchild is outside the parent's (non-transitive) tree, but inside the child's
    lifetime: its owner accepts the cascade's close and leaves no session open."""
    fam = keys(project_dir)
    tether(
        "--format",
        "quiet",
        "mock",
        "prompt",
        "-s",
        "child",
        "run "
        + " ".join([*TETHER, "--cwd", str(project_dir), "mock", "sessions", "new", "-s", "grand"]),
        cwd=project_dir,
    )
    grand = keys(project_dir)["grand"]
    try:
        # The grandchild's owner is live: the cascade must go through its door check.
        status = tether("--format", "json", "mock", "status", "-s", "grand", cwd=project_dir)
        assert json.loads(status.stdout.splitlines()[-1])["ownerPid"]
        code, out = as_agent(project_dir, "parent", f"--format json mock sessions {how} -s child")
        assert code == 0, out
        result = json.loads(out.strip().splitlines()[-1])
        assert result["closedChildren"] == [{"sessionKey": grand, "survivors": []}], result
        with Registry() as reg:
            for key in (grand, fam["child"]):
                row = reg.session(key)
                assert row is not None
                assert row.state == "closed"
    finally:
        close_all(project_dir, "grand")


# --- sandboxed sessions ---------------------------------------------------------------------


def test_a_sandboxed_session_is_clamped_to_its_tree(project_dir: Path, tether_home: Path) -> None:
    """With visibility = all, a plain session sees every mock session; a sandboxed one sees
    only itself and what it spawned -- and what it spawns is sandboxed too."""
    (tether_home / "config.toml").write_text('[sessions]\nvisibility = "all"\n')
    tether("mock", "sessions", "new", "-s", "open", cwd=project_dir)
    tether("mock", "sessions", "new", "-s", "box", "--sandboxed", cwd=project_dir)
    try:
        assert listed(agent_ok(project_dir, "open", "--format json mock sessions list")) == [
            "box",
            "open",
        ]
        agent_ok(project_dir, "box", "mock sessions new -s boxkid")
        assert listed(agent_ok(project_dir, "box", "--format json mock sessions list")) == [
            "box",
            "boxkid",
        ]
        code, out = as_agent(project_dir, "box", "mock status -s open")
        assert code == 5, out
        assert "sandboxed" in out
        # The owner applies the same clamp to a raw client from the box.
        answer = raw_as_agent(project_dir, "box", keys(project_dir)["open"], "status")
        assert answer.get("error", {}).get("fields", {}).get("rule") == "visibility=tree", answer
        r = tether("--format", "json", "mock", "sessions", "list", cwd=project_dir)
        rows = {s["name"]: s for s in json.loads(r.stdout.splitlines()[-1])["sessions"]}
        assert (rows["box"]["sandboxed"], rows["boxkid"]["sandboxed"]) == (True, True)
        assert rows["open"]["sandboxed"] is False
        text = tether("mock", "sessions", "list", cwd=project_dir).stdout.splitlines()
        assert next(line for line in text if line.startswith("box\t")).endswith(", sandboxed")
    finally:
        close_all(project_dir, "box", "boxkid", "open")


def test_sandboxed_cannot_be_added_to_an_open_session(project_dir: Path) -> None:
    tether("mock", "sessions", "new", "-s", "plain", cwd=project_dir)
    try:
        r = tether(
            "mock", "sessions", "ensure", "-s", "plain", "--sandboxed", cwd=project_dir, check=False
        )
        assert r.returncode == 2, r.stderr
        assert "sessions new --sandboxed" in r.stderr
    finally:
        close_all(project_dir, "plain")


# --- the agent-to-agent policy limits spawning ----------------------------------------------


def _other_agent_config(project: Path, a2a: str, *, operator: bool = True) -> None:
    """The agent `other` in the project's file; the agent-to-agent policy in the
    operator's (user) file, or (``operator=False``) in the project's, which cannot widen."""
    argv = json.dumps([sys.executable, "-m", "tether.testing.mock_agent"])
    agents = f"[agents.other]\nargv = {argv}\n"
    (project / ".tether.toml").write_text(agents if operator else agents + a2a)
    (Path(os.environ["TETHER_HOME"]) / "config.toml").write_text(a2a if operator else "")


def test_spawning_another_agents_session_needs_agent_to_agent(project_dir: Path) -> None:
    _other_agent_config(project_dir, "")
    tether("mock", "sessions", "new", "-s", "lead", cwd=project_dir)
    try:
        code, out = as_agent(project_dir, "lead", "other sessions new -s helper")
        assert code == 5, out
        assert "agentToAgent" in out
        code, out = as_agent(project_dir, "lead", "mock sessions new -s same")
        assert code == 0, out  # the same agent is always allowed
        policy = '[agentToAgent]\nenabled = true\nallow = ["mock", "oth*"]\n'
        _other_agent_config(project_dir, policy, operator=False)
        code, out = as_agent(project_dir, "lead", "other sessions new -s helper")
        assert code == 5, out  # the project (the agent's own tree) cannot grant it
        assert "agentToAgent.enabled is ignored" in out
        _other_agent_config(
            project_dir, '[agentToAgent]\nenabled = true\nallow = ["mock", "oth*"]\n'
        )
        code, out = as_agent(project_dir, "lead", "other sessions new -s helper")
        assert code == 0, out
        with Registry() as reg:
            helper = next(s for s in reg.sessions() if s.name == "helper")
        assert (helper.agent_id, helper.spawned_by) == ("other", keys(project_dir)["lead"])
    finally:
        close_all(project_dir, "lead", "same")
        tether("other", "sessions", "close", "-s", "helper", cwd=project_dir, check=False)


# --- the library's readers obey the check ---------------------------------------------------

READER = Path(__file__).resolve().parent.parent / "fake_agents" / "lib_reader.py"


@pytest.mark.usefixtures("family")
def test_library_history_read_and_watch_obey_the_check(project_dir: Path) -> None:
    """From the parent's tree: the child's journal reads, the stranger's is denied by rule."""
    fam = keys(project_dir)
    seen = {}
    for name in ("child", "stranger"):
        out = run_as_agent(project_dir, "parent", [sys.executable, str(READER), fam[name]])
        seen[name] = json.loads(out.strip().splitlines()[-1])
    assert seen["child"] == {"history": "ok", "read": "ok", "watch": "ok"}
    denied = ["VisibilityDenied", "visibility=tree"]
    assert seen["stranger"] == {"history": denied, "read": denied, "watch": denied}


def test_the_bridge_spawns_sandboxed_and_only_as_agent_to_agent_allows(project_dir: Path) -> None:
    """`sessions_spawn` through `tether mcp`: another agent is refused by rule; a sandboxed
    child is recorded sandboxed."""
    from tests.integration.test_delegation import mcp_call

    _other_agent_config(project_dir, "")
    tether("--mcp-bridge", "mock", "sessions", "new", "-s", "boss", cwd=project_dir)
    try:
        refused = mcp_call(project_dir, "boss", "tether", "sessions_spawn", {"agent": "other"})
        assert refused["isError"] is True, refused
        assert "needs [agentToAgent] enabled = true" in refused["content"][0]["text"], refused
        spawned = mcp_call(
            project_dir,
            "boss",
            "tether",
            "sessions_spawn",
            {"agent": "mock", "name": "boxed", "sandboxed": True},
        )
        assert spawned["structuredContent"]["sandboxed"] is True, spawned
        with Registry() as reg:
            row = reg.session(spawned["structuredContent"]["sessionKey"])
        assert row is not None
        assert row.sandboxed
    finally:
        close_all(project_dir, "boss", "boxed")


def test_a_fork_of_a_sandboxed_session_stays_sandboxed(mock_full: Cli) -> None:
    """The fork continues the same conversation: it must not shed the clamp."""
    c = mock_full
    c.run("sessions", "new", "--sandboxed")
    c.run("prompt", "first")
    c.json("sessions", "fork", "fork1")
    assert c.json("sessions", "show", "fork1")["sandboxed"] is True
