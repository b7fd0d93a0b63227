"""The CLI against a remote Tether (``--server``, ``TETHER_SERVER``): the same commands,
the same output shapes and the same exit codes as locally, over a real ``tether serve``
on loopback (and on a Unix socket) sharing the test's ``TETHER_HOME``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests._cli import run_tether
from tests.conftest import python_env
from tests.integration._serve import Gateway, gateway, parse_sse

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = pytest.mark.integration
__all__ = ["gateway"]  # the fixture, imported for pytest

# The CLI's own scenarios: each step as a user types it (after `tether --cwd DIR`).
SCENARIO: list[tuple[str, ...]] = [
    ("mock", "sessions", "new"),
    ("mock", "sessions", "ensure"),
    ("--format", "json", "mock", "sessions", "ensure"),
    ("mock", "prompt", "hello there"),
    ("--format", "json", "mock", "prompt", "stream 5 chunk"),
    ("--format", "quiet", "mock", "prompt", "echo quiet one"),
    ("mock", "prompt", "--no-wait", "echo queued"),
    ("mock", "prompt", "error -32000 it broke"),
    ("--timeout", "1", "mock", "prompt", "sleep 5000"),
    ("mock", "status"),
    ("--format", "json", "mock", "status"),
    ("mock", "sessions", "list"),
    ("--format", "quiet", "mock", "sessions", "list"),
    ("mock", "sessions", "show"),
    ("mock", "sessions", "history"),
    ("--format", "json", "mock", "sessions", "history", "--limit", "2"),
    ("mock", "sessions", "read", "--tail", "1"),
    ("--format", "json", "mock", "sessions", "read"),
    ("--format", "json", "mock", "sessions", "watch", "--no-follow", "--tail", "3"),
    ("mock", "cancel"),
    ("--format", "json", "mock", "cancel"),
    ("mock", "set-mode", "plan"),
    ("mock", "answer", "q-nope", "allow"),
    ("mock", "answer", "q-nope"),
    ("mock", "-s", "nope", "status"),
    ("mock", "-s", "nope", "prompt", "hi"),
    ("mock", "-s", "nope", "sessions", "history"),
    ("--format", "json", "mock", "-s", "nope", "sessions", "close"),
    ("mock", "prompt"),
    ("mock", "sessions", "terminate"),
    ("mock", "sessions", "close"),
    ("mock", "prompt", "after the end"),
]
_CLI = (sys.executable, "-m", "tether")
_FIELD = re.compile(r"^([a-z][a-z ]*[a-z]):\s")


def _shape_text(text: str) -> list[str]:
    """A text output's shape: field labels for `label: value` lines, else each line with
    what varies (numbers, ids, paths, times) masked."""
    out = []
    for line in text.splitlines():
        field = _FIELD.match(line)
        if field:
            out.append(field.group(1) + ":")
            continue
        line = re.sub(r"/\S+", "PATH", line)
        line = re.sub(r"r-[0-9a-f]+", "RID", line)
        line = re.sub(r"[0-9a-f]{12,}", "ID", line)
        line = re.sub(r"[0-9]+(\.[0-9]+)?", "N", line)
        line = re.sub(r"N min N s|N ms|N s\b", "DURATION", line)  # 999 ms vs 1.0 s
        out.append(re.sub(r" +", " ", line))  # a column's width follows its numbers
    return out


def _shape_json(text: str) -> list[tuple[str, ...]]:
    """A JSON output's shape: each line's top-level keys (and its action, if any)."""
    shapes = []
    for line in text.splitlines():
        doc = json.loads(line)
        shapes.append((str(doc.get("action") or doc.get("method") or ""), *sorted(doc)))
    return shapes


def _compare(
    step: tuple[str, ...],
    local: subprocess.CompletedProcess[str],
    remote: subprocess.CompletedProcess[str],
) -> None:
    where = (
        f"step {' '.join(step)}\nlocal: {local.stdout}{local.stderr}"
        f"\nremote: {remote.stdout}{remote.stderr}"
    )
    assert remote.returncode == local.returncode, where
    assert "Traceback" not in remote.stderr, where
    if "json" in step:
        lines_local, lines_remote = _shape_json(local.stdout), _shape_json(remote.stdout)
        assert len(lines_remote) == len(lines_local), where
        for mine, theirs in zip(lines_local, lines_remote, strict=True):
            assert mine[0] == theirs[0], where  # the same action / ACP method
            assert set(mine) <= set(theirs), where  # a remote record may say more (host)
        return
    shape_local, shape_remote = _shape_text(local.stdout), _shape_text(remote.stdout)
    if any(line.endswith(":") for line in shape_local):  # fields: the remote has them all
        assert set(shape_local) <= set(shape_remote), where
    else:
        assert shape_remote == shape_local, where
    assert ("[error]" in local.stderr) == ("[error]" in remote.stderr), where


def _remote_env(gw: Gateway, **extra: str) -> dict[str, str]:
    return {**python_env(), "TETHER_SERVER": gw.url, **extra}


def test_the_cli_scenarios_give_the_same_shapes_and_exit_codes_remotely(
    gateway: Gateway, tmp_path: Path
) -> None:
    """Every step of the CLI's scenario, run locally in one directory and through the
    gateway (TETHER_SERVER) in another, exits the same and prints the same shape."""
    here, there = tmp_path / "local", tmp_path / "remote"
    here.mkdir()
    there.mkdir()
    for step in SCENARIO:
        local = run_tether(*step, cwd=here)
        remote = run_tether(*step, cwd=there, env=_remote_env(gateway))
        _compare(step, local, remote)


def test_remote_sessions_are_the_servers_own(gateway: Gateway, project_dir: Path) -> None:
    """A session created with --server is the gateway's: its record says so, and the
    local CLI on the same home sees the same session and its turn."""
    env = _remote_env(gateway)
    r = run_tether("mock", "sessions", "new", cwd=project_dir, env=env)
    assert r.returncode == 0, r.stderr
    r = run_tether("mock", "prompt", "echo over http", cwd=project_dir, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "over http"
    listed = gateway.http.get("/v1/sessions").json()["sessions"]
    assert [s["cwd"] for s in listed] == [str(project_dir)]
    here = run_tether("mock", "sessions", "history", cwd=project_dir)
    assert "echo over http" in here.stdout


def test_a_wrong_token_is_permission_denied(gateway: Gateway, project_dir: Path) -> None:
    """A token the gateway refuses (401) exits 5, as a permission denied, with no traceback."""
    env = _remote_env(gateway, TETHER_TOKEN="not-the-token-0123456789")
    r = run_tether("mock", "status", cwd=project_dir, env=env)
    assert r.returncode == 5, r.stderr
    assert "Unauthorized" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_tether("--format", "json", "mock", "sessions", "list", cwd=project_dir, env=env)
    assert r.returncode == 5
    assert json.loads(r.stdout)["error"]["data"]["acpxCode"] == "PERMISSION_DENIED"


def test_a_token_file_is_read(gateway: Gateway, project_dir: Path, tmp_path: Path) -> None:
    """--token-file PATH gives the token (over TETHER_TOKEN and the home's own)."""
    good = tmp_path / "token"
    good.write_text(gateway.token + "\n")
    env = _remote_env(gateway, TETHER_TOKEN="not-the-token-0123456789")
    r = run_tether("--token-file", str(good), "mock", "sessions", "list", cwd=project_dir, env=env)
    assert r.returncode == 0, r.stderr
    r = run_tether(
        "--token-file", str(tmp_path / "none"), "mock", "status", cwd=project_dir, env=env
    )
    assert r.returncode == 2
    assert "--token-file" in r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_is_a_clear_retryable_error(project_dir: Path) -> None:
    """Nothing listening: one line saying so, exit 7, and JSON marking it retryable."""
    url = f"http://127.0.0.1:{_free_port()}"
    r = run_tether("--server", url, "mock", "status", cwd=project_dir)
    assert r.returncode == 7
    assert "cannot reach the Tether server" in r.stderr
    assert "connection refused" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_tether("--server", url, "--format", "json", "mock", "prompt", "hi", cwd=project_dir)
    assert r.returncode == 7
    error = json.loads(r.stdout)["error"]["data"]
    assert (error["acpxCode"], error["retryable"]) == ("UNREACHABLE", True)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("mock", "exec", "hi"), "`exec`"),
        (("reap",), "`reap`"),
        (("doctor",), "`doctor`"),
        (("metrics",), "`metrics`"),
        (("mock", "sessions", "prune", "--closed"), "`sessions prune`"),
        (("--agent", "cat", "sessions", "new"), "--agent CMD"),
        (("mock", "--permission-policy", "deny-all", "prompt", "hi"), "--permission-policy"),
    ],
)
def test_local_only_commands_say_so(project_dir: Path, args: tuple[str, ...], says: str) -> None:
    """Commands and flags that act on this machine are usage errors with --server (exit 2),
    said before anything is sent (here, to a server that does not exist)."""
    r = run_tether("--server", f"http://127.0.0.1:{_free_port()}", *args, cwd=project_dir)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr
    assert "Traceback" not in r.stderr


def test_rehome_locally_needs_a_router(project_dir: Path) -> None:
    """`sessions rehome` without --server says it needs a fleet router (exit 2)."""
    r = run_tether("mock", "sessions", "rehome", cwd=project_dir)
    assert r.returncode == 2
    assert "fleet router" in r.stderr


def test_rehome_on_a_gateway_is_refused_with_its_status(
    gateway: Gateway, project_dir: Path
) -> None:
    """A plain gateway has no rehome route: its 404/405 comes back as an error, no traceback."""
    env = _remote_env(gateway)
    assert run_tether("mock", "sessions", "new", cwd=project_dir, env=env).returncode == 0
    r = run_tether("mock", "sessions", "rehome", cwd=project_dir, env=env)
    assert r.returncode in (2, 4), r.stderr
    assert "Traceback" not in r.stderr


@pytest.fixture
def unix_gateway(tether_home: Path) -> Iterator[str]:
    """``tether serve --unix PATH`` on the test's home; yields ``unix:PATH``."""
    short = tempfile.mkdtemp(prefix="tr-", dir="/tmp")  # a socket path is at most 107 bytes
    path = os.path.join(short, "gw.sock")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--unix", path, "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**python_env(), "TETHER_HOME": str(tether_home)},
    )
    try:
        assert proc.stdout is not None
        announced = json.loads(proc.stdout.readline())
        yield str(announced["url"])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        shutil.rmtree(short, ignore_errors=True)


def test_a_unix_socket_url(unix_gateway: str, project_dir: Path) -> None:
    """TETHER_SERVER=unix:/path.sock: a session made, prompted and closed over the socket
    (the token is the home's own, as for a loopback gateway)."""
    assert unix_gateway.startswith("unix:/")
    env = {**python_env(), "TETHER_SERVER": unix_gateway}
    for args, expect in (
        (("mock", "sessions", "new"), "created"),
        (("mock", "prompt", "echo through the socket"), "through the socket"),
        (("mock", "sessions", "close"), "session closed"),
    ):
        r = run_tether(*args, cwd=project_dir, env=env)
        assert r.returncode == 0, r.stderr
        assert expect in r.stdout


TURN = "stream 1 started ; sleep 60000"  # a line of output, then a long, cancellable wait


def test_ctrl_c_cancels_the_remote_turn(gateway: Gateway, project_dir: Path) -> None:
    """SIGINT to a remote `prompt` cancels that turn on the server and exits 130."""
    env = _remote_env(gateway)
    assert run_tether("mock", "sessions", "new", cwd=project_dir, env=env).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "--cwd", str(project_dir), "mock", "prompt", TURN],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("started")  # the turn is running
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    sid = gateway.http.get("/v1/sessions").json()["sessions"][0]["id"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        turns = gateway.http.get(f"/v1/sessions/{sid}/history").json()["turns"]
        if turns and turns[-1]["stopReason"]:
            break
        time.sleep(0.1)
    assert turns[-1]["stopReason"] == "cancelled"


def test_the_remote_path_imports_no_http_stack(gateway: Gateway, project_dir: Path) -> None:
    """prompt, status and cancel with --server import no HTTP stack: not httpx, starlette,
    anyio or h11, not even http.client (email, ssl, urllib: ~20 ms); and, as the local
    warm path, no asyncio or sqlite3."""
    from tests.integration.test_import_budget import imported_modules

    env_args = ("--server", gateway.url, "--cwd", str(project_dir), "mock")
    r = run_tether(*env_args[2:], "sessions", "new", cwd=project_dir, env=_remote_env(gateway))
    assert r.returncode == 0, r.stderr
    heavy = {"httpx", "httpcore", "starlette", "anyio", "h11", "asyncio", "sqlite3", "_sqlite3"}
    heavy |= {"pydantic", "uvicorn", "http", "email", "ssl", "urllib"}
    for args in (["prompt", "echo hi"], ["status"], ["cancel"]):
        # --server: the remote path for sure (the local one would find the same session)
        modules = imported_modules(*env_args, *args, cwd=project_dir)
        assert not modules & heavy, (args, sorted(modules & heavy))


def test_a_remote_watch_follows_until_the_session_ends(gateway: Gateway, project_dir: Path) -> None:
    """`sessions watch` (live) shows what happens, and ends (exit 0) when the session does."""
    env = _remote_env(gateway)
    assert run_tether("mock", "sessions", "new", cwd=project_dir, env=env).returncode == 0
    watch = subprocess.Popen(
        [*_CLI, "--cwd", str(project_dir), "--format", "json", "mock", "sessions", "watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert run_tether("mock", "prompt", "echo seen", cwd=project_dir, env=env).returncode == 0
        assert run_tether("mock", "sessions", "close", cwd=project_dir, env=env).returncode == 0
        out, err = watch.communicate(timeout=30)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait(timeout=10)
    assert watch.returncode == 0, err
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert "turn_ended" in kinds
    assert kinds[-1] == "session_ended"


RESTARTED_TURN = "stream 1 before ; sleep 3000 ; stream 1 after"


def _serve_unix(home: Path, path: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--unix", path, "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**python_env(), "TETHER_HOME": str(home)},
    )
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["url"] == f"unix:{path}"
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def test_a_prompt_survives_the_gateways_restart(tether_home: Path, project_dir: Path) -> None:
    """The gateway restarts mid-turn (the owner runs on): the prompting CLI reconnects with
    Last-Event-ID and prints the rest of the turn once, then its end (exit 0)."""
    short = tempfile.mkdtemp(prefix="tr-", dir="/tmp")
    path = os.path.join(short, "gw.sock")
    env = {**python_env(), "TETHER_SERVER": f"unix:{path}"}
    gateway = _serve_unix(tether_home, path)
    prompt = None
    try:
        assert run_tether("mock", "sessions", "new", cwd=project_dir, env=env).returncode == 0
        prompt = subprocess.Popen(
            [*_CLI, "--cwd", str(project_dir), "mock", "prompt", RESTARTED_TURN],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert prompt.stdout is not None
        assert prompt.stdout.readline().startswith("before")
        _stop(gateway)  # the stream is cut; the turn goes on in its owner
        gateway = _serve_unix(tether_home, path)
        out, err = prompt.communicate(timeout=60)
        assert prompt.returncode == 0, err
        assert out.splitlines()[0].startswith("after")  # once: nothing replayed twice
        assert out.count("before") == 0
        assert "[done] end_turn" in out
    finally:
        if prompt is not None and prompt.poll() is None:
            prompt.kill()
            prompt.wait(timeout=10)
        run_tether("mock", "sessions", "close", cwd=project_dir, env=env)
        _stop(gateway)
        shutil.rmtree(short, ignore_errors=True)


def test_a_remote_cancel_says_whether_the_agent_honoured_it(
    gateway: Gateway, project_dir: Path
) -> None:
    """`cancel` of a running turn waits for its end, as locally, and says the agent
    honoured it (the gateway's cancel with `wait`)."""
    env = _remote_env(gateway)
    assert run_tether("mock", "sessions", "new", cwd=project_dir, env=env).returncode == 0
    sid = gateway.http.get("/v1/sessions").json()["sessions"][0]["id"]
    turn = "stream 1 started ; sleep 60000"
    r = run_tether("mock", "prompt", "--no-wait", turn, cwd=project_dir, env=env)
    assert r.returncode == 0, r.stderr
    # The turn is with the agent once its first words are journaled (before that, a
    # cancel is answered at once: the prompt was never sent, so nothing was honoured).
    wait_for(lambda: "started 0" in gateway.http.get(f"/v1/sessions/{sid}/export").text)
    r = run_tether("mock", "cancel", cwd=project_dir, env=env)
    assert (r.returncode, r.stdout.strip()) == (0, "cancelled; the agent ended the turn")


def test_a_remote_answer_reaches_the_agent(gateway: Gateway, project_dir: Path) -> None:
    """`answer ID allow` through the gateway resolves a waiting question (a controller,
    here the dashboard's kind of stream, holds it); a second answer is already answered,
    with the local exit code."""
    env = _remote_env(gateway)
    assert run_tether("mock", "sessions", "new", cwd=project_dir, env=env).returncode == 0
    sid = gateway.http.get("/v1/sessions").json()["sessions"][0]["id"]
    ended = threading.Event()

    def control() -> None:
        query = f"/v1/sessions/{sid}/events?control=1&tail=0"
        with gateway.http.stream("GET", query, timeout=60) as r:
            for event, data in parse_sse(r.iter_lines()):
                if event == "message" and data["kind"] == "turn_ended":
                    ended.set()
                    return

    watcher = threading.Thread(target=control)
    watcher.start()
    try:
        wait_for(lambda: gateway.http.get(f"/v1/sessions/{sid}").json()["status"]["watchers"])
        asking = ("mock", "prompt", "--no-wait", "tool edit README.md")
        r = run_tether(*asking, cwd=project_dir, env=env)
        assert r.returncode == 0, r.stderr
        questions = wait_for(
            lambda: gateway.http.get(f"/v1/sessions/{sid}/questions").json()["questions"]
        )
        qid = questions[0]["id"]
        r = run_tether("mock", "answer", qid, "allow", cwd=project_dir, env=env)
        assert r.returncode == 0, r.stderr
        assert f"[answered {qid}] allow" in r.stdout
        again = run_tether("mock", "answer", qid, "deny", cwd=project_dir, env=env)
        local = run_tether("mock", "answer", qid, "deny", cwd=project_dir)
        assert again.returncode == local.returncode != 0
    finally:
        watcher.join(timeout=60)
    assert ended.is_set()


def wait_for(check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)
