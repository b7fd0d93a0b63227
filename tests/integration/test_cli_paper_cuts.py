"""The CLI's paper cuts (issue 21, item 16), each as a user meets it: the real `tether`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests._cli import run_tether

from tether.cli._grammar import SESSION_SUBCOMMANDS

pytestmark = pytest.mark.integration

tether = run_tether


def _no_sessions(project: Path) -> None:
    listed = tether("sessions", "list", "--all", cwd=project)
    assert (listed.returncode, listed.stdout) == (0, "no sessions\n"), listed.stderr


def test_near_miss_of_a_command_is_not_sent_as_a_prompt(project_dir: Path) -> None:
    """`tether mock promt hi`: did you mean `prompt`?, exit 2, and how to send it as text."""
    r = tether("mock", "promt", "hi", cwd=project_dir)
    assert r.returncode == 2, r.stderr
    assert "did you mean `prompt`?" in r.stderr
    assert "`tether mock prompt -- promt hi`" in r.stderr
    # After `--` the words are text: taken as a prompt (to a session that does not exist).
    as_text = tether("mock", "--", "promt", "hi", cwd=project_dir)
    assert as_text.returncode == 4, as_text.stderr
    plain = tether("mock", "hello", "there", cwd=project_dir)
    assert plain.returncode == 4, plain.stderr


def test_unknown_option_of_an_implicit_prompt_names_no_command(project_dir: Path) -> None:
    """`tether --formt json mock status`: the unknown option, the nearest one, no `prompt`."""
    r = tether("--formt", "json", "mock", "status", cwd=project_dir)
    assert r.returncode == 2
    assert "unknown option --formt; did you mean --format?" in r.stderr
    assert "tether prompt" not in r.stderr


def test_history_limit_must_be_positive(project_dir: Path) -> None:
    r = tether("mock", "sessions", "history", "--limit", "-3", cwd=project_dir)
    assert r.returncode == 2
    assert "--limit must be at least 1" in r.stderr


def test_unknown_positional_agent_creates_nothing(project_dir: Path) -> None:
    """`tether nosuchagent sessions new`: exit 2 (a raw command goes through --agent)."""
    r = tether("nosuchagent", "sessions", "new", cwd=project_dir)
    assert r.returncode == 2, r.stdout
    assert "unknown agent 'nosuchagent'" in r.stderr
    assert "--agent CMD" in r.stderr
    near = tether("claud", "sessions", "new", cwd=project_dir)
    assert near.returncode == 2
    assert "did you mean `claude`?" in near.stderr
    _no_sessions(project_dir)


def test_timeout_zero_is_refused_as_in_the_config(project_dir: Path, tether_home: Path) -> None:
    r = tether("--timeout", "0", "mock", "status", cwd=project_dir)
    assert r.returncode == 2
    assert "--timeout must be more than 0" in r.stderr
    (tether_home / "config.toml").write_text("timeout = 0\n")
    configured = tether("mock", "status", cwd=project_dir)
    assert configured.returncode == 2


@pytest.mark.parametrize("command", [["cancel"], ["answer", "q-1", "allow"], ["prompt", "hi"]])
def test_a_missing_session_is_exit_4(project_dir: Path, command: list[str]) -> None:
    """cancel said "nothing to cancel" (exit 0) and answer exit 2 for a session that does
    not exist; every command says "no session" with exit 4."""
    r = tether("mock", command[0], "-s", "nope", *command[1:], cwd=project_dir)
    assert r.returncode == 4, (r.stdout, r.stderr)
    assert "no session for mock" in r.stderr


def test_mcp_help_is_its_own(project_dir: Path) -> None:
    r = tether("mcp", "--help", cwd=project_dir)
    assert r.returncode == 0
    assert r.stdout.startswith("tether mcp:")
    assert "--session-key KEY" in r.stdout


def test_global_help_lists_deny_always_and_every_exit_code(project_dir: Path) -> None:
    r = tether("--help", cwd=project_dir)
    assert r.returncode == 0
    assert "deny-always" in r.stdout
    assert "6 rate limited" in r.stdout
    assert "141 stdout closed" in r.stdout
    assert "--key KEY" in r.stdout


def test_sessions_help_lists_every_subcommand(project_dir: Path) -> None:
    r = tether("sessions", "--help", cwd=project_dir)
    assert r.returncode == 0
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("  ")}
    assert listed >= SESSION_SUBCOMMANDS, SESSION_SUBCOMMANDS - listed


def test_quiet_metrics_are_samples_not_a_sum(project_dir: Path) -> None:
    r = tether("--format", "quiet", "metrics", cwd=project_dir)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "owners_active 0" in lines
    assert all(re.fullmatch(r"[a-z_]+(\{.*\})? \S+", line) for line in lines), lines


def test_non_utf8_permission_policy_is_refused_cleanly(project_dir: Path) -> None:
    policy = project_dir / "policy.toml"
    policy.write_bytes(b'[[rules]]\ntitle = "\xff"\n')
    r = tether("--permission-policy", str(policy), "mock", "sessions", "new", cwd=project_dir)
    assert r.returncode == 2, r.stderr
    assert "not UTF-8 text" in r.stderr
    assert "unexpected error" not in r.stderr
    _no_sessions(project_dir)


def test_watch_from_past_the_end_says_so(project_dir: Path) -> None:
    assert tether("mock", "sessions", "new", cwd=project_dir).returncode == 0
    try:
        r = tether("mock", "sessions", "watch", "--from", "99999", "--no-follow", cwd=project_dir)
        assert r.returncode == 0, r.stderr
        assert "--from 99999 is past the end of the journal" in r.stderr
        at_end = tether("mock", "sessions", "watch", "--from", "1", "--no-follow", cwd=project_dir)
        assert "past the end" not in at_end.stderr
    finally:
        tether("mock", "sessions", "close", cwd=project_dir)


def test_a_replaced_session_reads_only_its_own_turns(project_dir: Path) -> None:
    """After `sessions new` replaced the session, `history` and `read` show the new one's
    turns only (the journal goes on under the same key; export keeps everything)."""
    assert tether("mock", "sessions", "new", cwd=project_dir).returncode == 0
    try:
        assert tether("mock", "prompt", "echo old turn", cwd=project_dir).returncode == 0
        assert tether("mock", "sessions", "new", cwd=project_dir).returncode == 0
        history = tether("mock", "sessions", "history", cwd=project_dir)
        assert (history.returncode, history.stdout) == (0, "no turns yet\n"), history.stderr
        assert tether("mock", "prompt", "echo new turn", cwd=project_dir).returncode == 0
        history = tether("--format", "json", "mock", "sessions", "history", cwd=project_dir)
        turns = json.loads(history.stdout)["turns"]
        assert [t["preview"] for t in turns] == ["echo new turn"]
        read = tether("mock", "sessions", "read", cwd=project_dir)
        assert "new turn" in read.stdout
        assert "old turn" not in read.stdout
        exported = tether("mock", "sessions", "export", cwd=project_dir)
        assert "old turn" in exported.stdout
    finally:
        tether("mock", "sessions", "close", cwd=project_dir)


def test_concurrent_sessions_new_create_once(project_dir: Path) -> None:
    """Five concurrent `sessions new -s race`: one says created, four say it exists; one
    owner; no session is replaced under a caller just told it was created."""
    argv = [sys.executable, "-m", "tether", "--cwd", str(project_dir), "mock", "sessions"]
    procs = [
        subprocess.Popen(
            [*argv, "new", "-s", "race"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ,
        )
        for _ in range(5)
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(out)
    try:
        created = [o for o in outs if " created " in o]
        existing = [o for o in outs if "exists (created just now by a concurrent" in o]
        assert (len(created), len(existing)) == (1, 4), outs
        owners = {o.rsplit("owner ", 1)[1].strip() for o in outs}
        assert len(owners) == 1, outs
    finally:
        tether("mock", "sessions", "close", "-s", "race", cwd=project_dir)
