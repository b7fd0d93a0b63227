"""`tether exec` end to end against the bundled mock agent, as real processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.acp_schema import schema_errors

pytestmark = pytest.mark.integration

MOCK = [sys.executable, "-m", "tether.testing.mock_agent"]


def tether(
    *args: str, cwd: Path, timeout: float = 30, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", "--cwd", str(cwd), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        env=os.environ,
    )


def agent(*flags: str) -> list[str]:
    import shlex

    return ["--agent", shlex.join([*MOCK, *flags])]


def test_exec_text_streams_answer_and_done(project_dir: Path) -> None:
    """Text format prints the assistant text and a final `[done] end_turn (N.N s)`, exit 0."""
    r = tether("mock", "exec", "stream 3 hello", cwd=project_dir)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"hello 0\nhello 1\nhello 2\n\[done\] end_turn \(\d+\.\d s\)\n", r.stdout)


def test_exec_quiet_prints_only_text(project_dir: Path) -> None:
    """Quiet format prints the assistant text alone."""
    r = tether("--format", "quiet", "mock", "exec", "echo just this", cwd=project_dir)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "just this\n"


def test_exec_json_is_raw_acp_frames_that_validate(project_dir: Path) -> None:
    """JSON format is NDJSON of raw ACP frames, and every frame Tether sent is schema-valid."""
    r = tether(
        "--format", "json", "mock", "exec", "echo hi ; plan ; unknown-update", cwd=project_dir
    )
    assert r.returncode == 0, r.stderr
    frames = [json.loads(line) for line in r.stdout.splitlines()]
    methods = [f.get("method") for f in frames]
    assert methods[0] == "initialize"
    assert "session/new" in methods
    assert "session/prompt" in methods
    # Unknown update kinds and `_` notifications are passed through, never dropped.
    kinds = [
        f["params"]["update"]["sessionUpdate"]
        for f in frames
        if f.get("method") == "session/update"
    ]
    assert "mock_future_kind" in kinds
    assert "_mock/notice" in methods
    sent: dict[int, str] = {}
    for frame in frames:
        if (
            "method" in frame
            and "id" in frame
            and frame["method"]
            in (
                "initialize",
                "session/new",
                "session/prompt",
            )
        ):
            sent[frame["id"]] = frame["method"]
            assert schema_errors(frame, "client") == [], frame
    assert frames[-1] == {"jsonrpc": "2.0", "id": max(sent), "result": {"stopReason": "end_turn"}}


def test_exec_reads_prompt_from_file_and_stdin(project_dir: Path) -> None:
    """`-f FILE` and `-f -` supply the prompt text."""
    prompt = project_dir / "p.txt"
    prompt.write_text("echo from file")
    r = tether("--format", "quiet", "mock", "exec", "-f", str(prompt), cwd=project_dir)
    assert r.stdout == "from file\n"
    r = tether("--format", "quiet", "mock", "exec", "-f", "-", cwd=project_dir, input="echo piped")
    assert r.stdout == "piped\n"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        pytest.param(["mock", "exec"], 2, id="no-text"),
        pytest.param(["--approve-all", "--deny-all", "mock", "exec", "x"], 2, id="exclusive-modes"),
        pytest.param(["--format", "xml", "mock", "exec", "x"], 2, id="bad-format"),
        pytest.param(["--bogus", "mock", "exec", "x"], 2, id="unknown-flag"),
        pytest.param(["--agent", "no-such-agent-binary-xyz", "exec", "hi"], 1, id="not-found"),
        pytest.param(["mock", "exec", "crash 7"], 1, id="crash"),
        pytest.param(["--timeout", "0.5", "mock", "exec", "sleep 20000"], 3, id="timeout"),
        pytest.param(["mock", "exec", "error -32603 boom"], 1, id="agent-error"),
    ],
)
def test_exec_exit_codes(project_dir: Path, args: list[str], code: int) -> None:
    """Exit codes follow acpx: 1 runtime, 2 usage, 3 timeout."""
    r = tether(*args, cwd=project_dir)
    assert r.returncode == code, (r.stdout, r.stderr)
    assert "[error]" in r.stderr


def test_exec_crash_reports_exit_code(project_dir: Path) -> None:
    """An agent that crashes mid-turn gives a clear error naming its exit code."""
    r = tether("mock", "exec", "crash 7", cwd=project_dir)
    assert "exited with code 7" in r.stderr


def test_exec_timeout_cancels_turn(project_dir: Path) -> None:
    """`--timeout` abandons the turn with session/cancel sent exactly once, and exits 3."""
    r = tether(
        "--format", "json", "--timeout", "0.3", "mock", "exec", "sleep 20000", cwd=project_dir
    )
    assert r.returncode == 3
    frames = [json.loads(line) for line in r.stdout.splitlines()]
    cancels = [f for f in frames if f.get("method") == "session/cancel"]
    assert len(cancels) == 1
    envelope = frames[-1]
    assert envelope["error"]["data"]["acpxCode"] == "TIMEOUT"


def test_exec_handshake_deadline(project_dir: Path, tether_home: Path) -> None:
    """An agent that never answers `initialize` gives a timeout error, not a hang."""
    (tether_home / "config.toml").write_text("handshakeTimeout = 0.5\n")
    started = time.monotonic()
    r = tether(*agent("--hang-on-initialize"), "exec", "hi", cwd=project_dir)
    assert r.returncode == 3
    assert "initialize" in r.stderr
    assert time.monotonic() - started < 20


def test_exec_session_new_deadline(project_dir: Path, tether_home: Path) -> None:
    """An agent that never answers `session/new` gives a timeout error too."""
    (tether_home / "config.toml").write_text("handshakeTimeout = 0.5\n")
    r = tether(*agent("--hang-on-new-session"), "exec", "hi", cwd=project_dir)
    assert r.returncode == 3
    assert "session/new" in r.stderr


@pytest.mark.parametrize(
    ("mode", "kind", "expected"),
    [
        pytest.param("--approve-all", "execute", "permission: allowed", id="approve-all"),
        pytest.param("--deny-all", "read", "permission: denied", id="deny-all"),
        pytest.param("--approve-reads", "read", "permission: allowed", id="reads-read"),
        pytest.param("--approve-reads", "execute", "permission: denied", id="reads-execute"),
    ],
)
def test_exec_permission_modes(project_dir: Path, mode: str, kind: str, expected: str) -> None:
    """Permission requests are decided by the mode, picking options by kind."""
    r = tether(mode, "mock", "exec", f"tool {kind}", cwd=project_dir)
    assert r.returncode == 0, r.stderr
    assert expected in r.stdout
    assert f"[tool] mock {kind} ({kind})" in r.stdout


def test_exec_denied_permission_fails_with_5_when_asked(project_dir: Path) -> None:
    """With `--non-interactive-permissions fail`, a denied permission exits 5."""
    r = tether(
        "--non-interactive-permissions", "fail", "mock", "exec", "tool execute", cwd=project_dir
    )
    assert r.returncode == 5, r.stderr


def test_exec_fs_confined_to_cwd(project_dir: Path, tmp_path: Path) -> None:
    """fs read/write work inside the session cwd; paths outside it are refused."""
    inside = project_dir / "notes.txt"
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (project_dir / "link").symlink_to(outside)
    script = (
        f"write {inside} hello there ; read {inside} ; read {outside} ; "
        f"read {project_dir / 'link'} ; write {project_dir}/../escape.txt x"
    )
    r = tether("mock", "exec", script, cwd=project_dir)
    assert r.returncode == 0, r.stderr
    assert inside.read_text() == "hello there"
    assert "hello there" in r.stdout
    assert r.stdout.count("fs error -32602") == 3
    assert "secret" not in r.stdout.replace("secret.txt", "")
    assert not (tmp_path / "escape.txt").exists()


def test_exec_survives_stderr_flood(project_dir: Path) -> None:
    """A 10 MB stderr burst never stalls a turn (stderr is always drained)."""
    r = tether("mock", "exec", "stderr 10485760 ; echo after flood", cwd=project_dir, timeout=60)
    assert r.returncode == 0, r.stderr[-500:]
    assert "after flood" in r.stdout


def test_exec_survives_malformed_and_oversized_lines(project_dir: Path) -> None:
    """A malformed line and a huge line are skipped; the turn goes on and ends normally."""
    r = tether("mock", "exec", "malformed ; oversized 100000 ; echo still fine", cwd=project_dir)
    assert r.returncode == 0, r.stderr
    assert "still fine" in r.stdout


def test_exec_leaves_no_process_behind(project_dir: Path) -> None:
    """setsid, double-forked and own-group children of the agent die with the run."""
    r = tether("mock", "exec", "spawn-setsid ; spawn-daemon ; spawn-group", cwd=project_dir)
    assert r.returncode == 0, r.stderr
    pids = [int(p.split("=")[1].split()[0]) for p in r.stdout.split("pid")[1:]]
    assert len(pids) == 3
    for pid in pids:
        # Gone, or (if the number was recycled) at least not carrying a marker of ours.
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        assert b"TETHER_LEASE_ID=" not in environ


def test_exec_ctrl_c_cancels_and_exits_130(project_dir: Path) -> None:
    """Ctrl-C sends session/cancel, the turn ends `cancelled`, the CLI exits 130."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether",
            "--cwd",
            str(project_dir),
            "--format",
            "json",
            "mock",
            "exec",
            "sleep 30000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if '"session/prompt"' in line:
                break
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, _err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert '"method":"session/cancel"' in out
    assert '"stopReason":"cancelled"' in out


def test_exec_against_sdk_style_peer_flags(project_dir: Path) -> None:
    """Agents that need `authenticate` work when a credential is configured."""
    env_key = {"MOCK_AGENT_KEY": "k"}
    os.environ.update(env_key)
    try:
        home = Path(os.environ["TETHER_HOME"])
        (home / "config.toml").write_text('[auth]\n"mock-key" = ""\n')
        r = tether(*agent("--auth-required"), "exec", "echo authed", cwd=project_dir)
    finally:
        os.environ.pop("MOCK_AGENT_KEY")
    assert r.returncode == 0, r.stderr
    assert "authed" in r.stdout


def test_exec_records_a_closed_lease(project_dir: Path) -> None:
    """Every exec run leaves a `closed` lease with its reason, never an open one."""
    r = tether("mock", "exec", "echo x", cwd=project_dir)
    assert r.returncode == 0
    from tether.state.registry import Registry

    with Registry() as reg:
        leases = reg.leases()
    assert len(leases) == 1
    assert leases[0].state == "closed"
    assert leases[0].reason in ("close", "exit")
    assert leases[0].root_pid is not None
