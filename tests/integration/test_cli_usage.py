"""Usage and configuration errors from the shell: exit 2, one clear line, nothing done.

Issue 9, items 11 and 12, as a user meets them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests._cli import run_tether

pytestmark = pytest.mark.integration


tether = run_tether


def test_unknown_option_creates_no_session(project_dir: Path) -> None:
    """`sessions new --import-session abc` is a usage error; no session named after it appears."""
    r = tether("mock", "sessions", "new", "--import-session", "abc", cwd=project_dir)
    assert r.returncode == 2, r.stderr
    assert "--import-session" in r.stderr
    assert "Traceback" not in r.stderr
    listed = tether("mock", "sessions", "list", "--all", cwd=project_dir)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == "no sessions\n"


def test_unknown_option_in_json_is_a_json_envelope(project_dir: Path) -> None:
    """With --format json, `prompt --modelz x hi` prints the acpx error envelope, exit 2."""
    r = tether("--format", "json", "mock", "prompt", "--modelz", "x", "hi", cwd=project_dir)
    assert r.returncode == 2
    envelope = json.loads(r.stdout)
    assert envelope["error"]["data"]["acpxCode"] == "USAGE"
    assert "--modelz" in envelope["error"]["message"]


def test_exec_with_unknown_option_never_reaches_the_agent(project_dir: Path) -> None:
    """`exec --modelz x "echo hi"` fails before starting anything: nothing on stdout."""
    r = tether("mock", "exec", "--modelz", "x", "echo hi", cwd=project_dir)
    assert (r.returncode, r.stdout) == (2, "")
    assert "--modelz" in r.stderr


def test_command_help_lists_its_own_options(project_dir: Path) -> None:
    """`tether mock prompt --help` prints prompt's options (exit 0), not exec's or reap's."""
    r = tether("mock", "prompt", "--help", cwd=project_dir)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("tether prompt:")
    assert "--no-wait" in r.stdout
    assert "--dry-run" not in r.stdout


def test_bad_config_value_is_refused_before_running(project_dir: Path, tether_home: Path) -> None:
    """`timeout = -5` in config: exit 2 naming the key, before the agent answers anything."""
    (tether_home / "config.toml").write_text("timeout = -5\n")
    r = tether("mock", "exec", "echo hi", cwd=project_dir)
    assert (r.returncode, r.stdout) == (2, "")
    assert "timeout = -5" in r.stderr
    assert str(tether_home / "config.toml") in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_config_in_json_is_a_json_envelope(project_dir: Path, tether_home: Path) -> None:
    """A config error in --format json is the JSON error envelope on stdout."""
    (tether_home / "config.toml").write_text('defaultPermissions = "yolo"\n')
    r = tether("--format", "json", "--json-strict", "mock", "status", cwd=project_dir)
    assert r.returncode == 2
    assert r.stderr == ""
    envelope = json.loads(r.stdout)
    assert envelope["error"]["data"]["detailCode"] == "CONFIG_INVALID"


def test_unknown_config_key_warns_and_runs(project_dir: Path, tether_home: Path) -> None:
    """An unknown key warns on stderr with the nearest known key; the command still runs."""
    (tether_home / "config.toml").write_text('fromat = "json"\n')
    r = tether("mock", "sessions", "list", cwd=project_dir)
    assert r.returncode == 0, r.stderr
    assert "did you mean format?" in r.stderr
    assert r.stdout == "no sessions\n"
