"""``tether exec`` against real agents, as a user runs it: a subprocess per call.

The agents are the pinned, cached ones (see install.py); claude-agent-acp talks to the
loopback fake Messages API, codex-acp to a black hole (so its prompts hang until
cancelled or timed out). ``--format json`` output is NDJSON of the raw ACP frames in
both directions; every frame is checked against the schema (Tether's own frames must
validate; the agents' problems are only reported by the probe tests).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.acp_schema import _method_defs, schema_errors
from tests.realagents.blackhole import BlackHole
from tests.realagents.cli_group import tether
from tests.realagents.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.realagents

TOOL_PROMPT = 'TOOL:Bash:{"command":"echo hi > out.txt","description":"write out.txt"}'


def tether_env(agent_env: dict[str, str]) -> dict[str, str]:
    """The agent's scratch environment plus Tether's own (private TETHER_HOME etc.).

    Built from scratch rather than from ``os.environ`` on purpose: this container sets
    ``IS_SANDBOX=yes``, and claude-agent-acp's bundled Claude Code, running as root,
    then exits 1 on ``session/new`` (-32603 "Claude Code process exited with code 1").
    """
    env = dict(agent_env)
    for key in ("TETHER_HOME", "XDG_CONFIG_HOME"):  # set per test by tests/conftest.py
        env[key] = os.environ[key]
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_tether(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 45
) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    with tether(args, env, cwd) as proc:
        out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err, time.monotonic() - t0


def ndjson(out: str) -> list[dict[str, Any]]:
    frames = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert all(isinstance(f, dict) for f in frames)
    return frames


def check_frames(frames: list[dict[str, Any]]) -> None:
    """Every frame Tether sent validates; its stream pairs requests and responses."""
    sides = {m: d.get("x-side") for (m, _), d in _defs_by_method().items()}
    pending: dict[str, dict[Any, str]] = {"client": {}, "agent": {}}
    bad: list[tuple[dict[str, Any], list[str]]] = []
    for f in frames:
        if "action" in f or f.get("id", 0) is None:
            continue  # Tether's control objects and its own error envelopes
        if "method" in f:
            # x-side names the side that *handles* the method; the sender is the other one.
            handler = sides.get(f["method"])
            sender = "client" if handler == "agent" else "agent" if handler == "client" else None
            if sender is None:
                continue
            if "id" in f:
                pending[sender][f["id"]] = f["method"]
            if sender == "client":
                errs = schema_errors(f, "client")
                if errs:
                    bad.append((f, errs))
            continue
        rid = f.get("id")
        in_client, in_agent = rid in pending["client"], rid in pending["agent"]
        if in_agent and not in_client:  # Tether answering the agent
            errs = schema_errors(f, "client", pending["agent"].pop(rid))
            if errs:
                bad.append((f, errs))
        elif in_client and not in_agent:
            pending["client"].pop(rid)
    assert not bad, f"tether sent frames that do not validate: {bad}"


def _defs_by_method() -> dict[tuple[str, str], dict[str, Any]]:
    from tests.acp_schema import _schema

    defs = _schema()["$defs"]
    return {k: defs[v] for k, v in _method_defs().items()}


def prompt_result(frames: list[dict[str, Any]]) -> dict[str, Any]:
    prompt_ids = [f["id"] for f in frames if f.get("method") == "session/prompt"]
    assert len(prompt_ids) == 1
    (resp,) = [f for f in frames if "method" not in f and f.get("id") == prompt_ids[0]]
    return resp


def chunks_text(frames: list[dict[str, Any]]) -> str:
    return "".join(
        f["params"]["update"]["content"].get("text", "")
        for f in frames
        if f.get("method") == "session/update"
        and f["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
    )


# --- claude-agent-acp ------------------------------------------------------------------


def test_exec_claude_json(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    record_timing: Any,
) -> None:
    rc, out, err, dt = run_tether(
        ["--agent", claude_agent_cmd[0], "--approve-all", "--format", "json", "exec", "hello"],
        tether_env(claude_agent_env),
        project_dir,
    )
    record_timing("tether exec claude (one canned turn, wall)", dt)
    assert rc == 0, err
    frames = ndjson(out)
    check_frames(frames)
    assert [f.get("method") for f in frames if "method" in f][:2] == ["initialize", "session/new"]
    assert prompt_result(frames)["result"]["stopReason"] == "end_turn"
    assert chunks_text(frames) == "fake-claude: hello"


def test_exec_claude_text_and_quiet(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
) -> None:
    env = tether_env(claude_agent_env)
    rc, out, err, _ = run_tether(
        ["--agent", claude_agent_cmd[0], "exec", "plain text please"], env, project_dir
    )
    assert rc == 0, err
    assert "fake-claude: plain text please" in out
    assert "[done] end_turn" in out
    rc, out, err, _ = run_tether(
        ["--agent", claude_agent_cmd[0], "--format", "quiet", "exec", "quiet please"],
        env,
        project_dir,
    )
    assert rc == 0, err
    assert out.strip() == "fake-claude: quiet please"


def exec_tool_prompt(
    agent_cmd: list[str], agent_env: dict[str, str], project_dir: Path, *flags: str
) -> list[dict[str, Any]]:
    """``exec`` TOOL_PROMPT with ``--approve-all`` (and ``flags``); its checked frames."""
    rc, out, err, _ = run_tether(
        ["--agent", agent_cmd[0], "--approve-all", *flags, "--format", "json", "exec", TOOL_PROMPT],
        tether_env(agent_env),
        project_dir,
    )
    assert rc == 0, err
    frames = ndjson(out)
    check_frames(frames)
    return frames


def test_exec_claude_approve_all_runs_tool(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
) -> None:
    frames = exec_tool_prompt(claude_agent_cmd, claude_agent_env, project_dir)
    perms = [f for f in frames if f.get("method") == "session/request_permission"]
    assert len(perms) == 1
    assert (project_dir / "out.txt").read_text().strip() == "hi"
    assert "fake-claude: tool result ok" in chunks_text(frames)


@pytest.mark.parametrize(
    ("flags", "exit_code"),
    [
        (["--deny-all"], 0),
        (["--deny-all", "--non-interactive-permissions", "fail"], 5),
        (["--approve-reads", "--non-interactive-permissions", "fail"], 5),
    ],
)
def test_exec_claude_denied_tool_does_not_run(
    flags: list[str],
    exit_code: int,
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
) -> None:
    rc, out, err, _ = run_tether(
        ["--agent", claude_agent_cmd[0], *flags, "--format", "json", "exec", TOOL_PROMPT],
        tether_env(claude_agent_env),
        project_dir,
    )
    assert rc == exit_code, err
    frames = ndjson(out)
    check_frames(frames)
    assert not (project_dir / "out.txt").exists()
    assert "fake-claude: tool result error" in chunks_text(frames)


# --- codex-acp 0.16.0 ------------------------------------------------------------------


@pytest.fixture
def codex_tether_env(codex_legacy_agent_env: dict[str, str], tether_home: Path) -> dict[str, str]:
    # legacy codex-acp authenticates by an env_var method; tell Tether to use it.
    (tether_home / "config.toml").write_text('[auth]\n"openai-api-key" = ""\n')
    return tether_env(codex_legacy_agent_env)


def test_exec_codex_timeout_exits_3(
    codex_legacy_agent_cmd: list[str],
    codex_tether_env: dict[str, str],
    blackhole: BlackHole,
    project_dir: Path,
    record_timing: Any,
) -> None:
    rc, out, err, dt = run_tether(
        [
            "--agent",
            codex_legacy_agent_cmd[0],
            "--format",
            "json",
            "--timeout",
            "2",
            "exec",
            "hello codex",
        ],
        codex_tether_env,
        project_dir,
    )
    record_timing("tether exec codex --timeout 2 (wall)", dt)
    assert rc == 3, err
    assert blackhole.connections >= 1
    frames = ndjson(out)
    check_frames(frames)
    methods = [f.get("method") for f in frames]
    assert "authenticate" in methods
    assert "session/cancel" in methods


def test_exec_codex_sigint_cancels(
    codex_legacy_agent_cmd: list[str],
    codex_tether_env: dict[str, str],
    blackhole: BlackHole,
    project_dir: Path,
    record_timing: Any,
) -> None:
    args = ["--agent", codex_legacy_agent_cmd[0], "--format", "json", "exec", "hello codex"]
    with tether(args, codex_tether_env, project_dir) as proc:
        assert blackhole.wait_for_connection(30), "codex never reached its provider"
        time.sleep(0.3)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        record_timing("tether exec codex SIGINT->exit", time.monotonic() - t0)
    assert proc.returncode == 130, err
    frames = ndjson(out)
    check_frames(frames)
    assert "session/cancel" in [f.get("method") for f in frames]
    assert prompt_result(frames)["result"]["stopReason"] == "cancelled"


# --- the SDK's echo agent ----------------------------------------------------------------


def test_exec_sdk_echo_agent(
    sdk_echo_agent_cmd: list[str],
    sdk_echo_agent_env: dict[str, str],
    project_dir: Path,
) -> None:
    rc, out, err, _ = run_tether(
        [
            "--agent",
            shlex.join(sdk_echo_agent_cmd),
            "--format",
            "quiet",
            "exec",
            "echo me",
        ],
        tether_env(sdk_echo_agent_env),
        project_dir,
    )
    assert rc == 0, err
    assert out.strip() == "echo me"
