"""State problems get one clear line and lose nothing (issue 9, item 10), tried for real.

A damaged ``state.db``, a full disk (a real 1 MiB tmpfs), another user's TETHER_HOME (a
real ``nobody``), and an unexpected exception: each is one line on stderr, the right
exit status, no file overwritten, no process left -- never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests._cli import run_tether
from tests.integration.test_owner import Cli, alive, cli, finish, wait_for, wait_stopped

pytestmark = pytest.mark.integration

__all__ = ["cli"]  # a fixture, imported for pytest


tether = run_tether


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    # exec's "[tether] starting …" banner may come first; the error is one line
    lines = [
        line for line in stderr.splitlines() if line.strip() and not line.startswith("[tether]")
    ]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("[error] "), stderr
    return lines[0]


def _damage(db: Path, how: str) -> None:
    """Garbage over the header ("not a database"), or over data pages ("malformed")."""
    with db.open("r+b") as f:
        if how == "header":
            f.write(b"this is not an sqlite file at all" * 4)
        else:
            f.seek(4096 * 2)
            f.write(os.urandom(4096 * 3))


def _populated_db(project_dir: Path, tether_home: Path) -> Path:
    """A real state database with enough rows that page damage hits a table."""
    assert tether("mock", "sessions", "list", cwd=project_dir).returncode == 0
    db = tether_home / "state.db"
    with sqlite3.connect(db) as conn:
        conn.executemany(
            "INSERT INTO events (session_key, kind, payload, at) VALUES ('k', 'x', ?, 1.0)",
            [("{}" * 60,)] * 300,
        )
    conn.close()
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return db


@pytest.mark.parametrize("how", ["header", "pages"])
def test_damaged_database_is_one_line_and_left_untouched(
    project_dir: Path, tether_home: Path, how: str
) -> None:
    """Every command that needs the registry says the database is damaged and how to
    recover, exit 1; the file is not modified."""
    db = _populated_db(project_dir, tether_home)
    _damage(db, how)
    before = db.read_bytes()
    for args in (("sessions", "history"), ("exec", "echo hi"), ("prompt", "echo hi")):
        r = tether("mock", *args, cwd=project_dir)
        assert (r.returncode, r.stdout) == (1, ""), (args, r.stderr)
        line = _one_error_line(r.stderr)
        assert str(db) in line
        assert "tether doctor --repair" in line
    r = tether("--format", "json", "mock", "sessions", "list", cwd=project_dir)
    assert json.loads(r.stdout)["error"]["data"]["detailCode"] == "STATE_CORRUPT"
    assert db.read_bytes() == before


_HOLD_AND_STOP = """
import os, signal, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT INTO meta (key, value) VALUES ('held', '1')")
print("holding", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
db.execute("ROLLBACK")
"""


def test_a_stopped_process_holding_the_write_lock_is_named(
    project_dir: Path, tether_home: Path
) -> None:
    """A process that took the state database's write lock and was stopped (SIGSTOP, a
    frozen cgroup) blocks every writer on the host. Reads go on (opening the database
    writes nothing once it is current); a command that must write waits out the busy
    timeout once, then says which pid holds the lock and that it is stopped (SQLite's
    own word was only "database is locked"), exit 1, and leaves no agent behind;
    `doctor` names it too."""
    assert tether("mock", "sessions", "list", cwd=project_dir).returncode == 0
    db = tether_home / "state.db"
    with subprocess.Popen(
        [sys.executable, "-c", _HOLD_AND_STOP, str(db)], stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout is not None
        try:
            assert holder.stdout.readline() == "holding\n"
            wait_stopped(holder.pid)
            r = tether("mock", "sessions", "list", cwd=project_dir)
            assert (r.returncode, r.stdout) == (0, "no sessions\n"), r.stderr
            r = tether("--format", "json", "doctor", cwd=project_dir)
            assert r.returncode == 1, r.stdout + r.stderr
            (lock,) = [c for c in json.loads(r.stdout)["checks"] if "lock" in c["name"]]
            assert lock["status"] == "fail", lock
            assert f"held by pid {holder.pid} (python" in lock["detail"], lock
            r = tether("--format", "json", "mock", "exec", "echo hi", cwd=project_dir)
            assert r.returncode == 1, r.stdout + r.stderr
            assert "Traceback" not in r.stderr, r.stderr
            error = json.loads(r.stdout.strip().splitlines()[-1])["error"]
            assert error["data"]["detailCode"] == "STATE_BUSY", error
            assert f"held by pid {holder.pid} (python" in error["message"], error
            assert "stopped" in error["message"], error
        finally:
            holder.send_signal(signal.SIGCONT)  # our own child, by its Popen handle
            assert holder.wait(timeout=10) == 0
    # Once it continued (and rolled back), writers go on; nothing it held was kept.
    r = tether("mock", "exec", "echo hi", cwd=project_dir)
    assert (r.returncode, "hi" in r.stdout) == (0, True), r.stderr
    assert tether("doctor", cwd=project_dir).returncode == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'held'").fetchall() == []
    conn.close()


@pytest.mark.parametrize("below", [False, True])
def test_a_tether_home_that_is_a_file_is_one_line(
    project_dir: Path, tmp_path: Path, below: bool
) -> None:
    """TETHER_HOME naming a file (or a path below one): one line saying so, exit 1, the
    file untouched -- not makedirs' bare "File exists"."""
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("keep me")
    home = a_file / "home" if below else a_file
    r = tether(
        "mock", "sessions", "list", cwd=project_dir, env=dict(os.environ, TETHER_HOME=str(home))
    )
    assert (r.returncode, r.stdout) == (1, ""), r.stderr
    line = _one_error_line(r.stderr)
    assert f"{home} (or a directory above it) exists and is not a directory" in line, line
    assert a_file.read_text() == "keep me"


def test_doctor_finds_the_damage_and_repair_moves_it_aside(
    project_dir: Path, tether_home: Path
) -> None:
    """`doctor` fails on a damaged database; `doctor --repair` keeps it aside (same bytes)
    and starts a fresh one that works."""
    db = _populated_db(project_dir, tether_home)
    _damage(db, "pages")
    damaged = db.read_bytes()
    r = tether("doctor", cwd=project_dir)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL state database" in r.stdout
    r = tether("--format", "json", "doctor", "--repair", cwd=project_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["ok"] is True
    assert any("moved" in what for what in report["repaired"])
    (aside,) = tether_home.glob("state.db.corrupt-*[0-9]Z")
    assert aside.read_bytes() == damaged
    r = tether("mock", "sessions", "list", cwd=project_dir)
    assert (r.returncode, r.stdout) == (0, "no sessions\n"), r.stderr
    assert tether("doctor", cwd=project_dir).returncode == 0


def test_repair_refuses_while_an_owner_answers(project_dir: Path, tether_home: Path) -> None:
    """A listening owner socket blocks the repair: it would keep writing the moved file."""
    db = _populated_db(project_dir, tether_home)
    _damage(db, "header")
    from tether import paths

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.path.join(paths.socket_dir(), "0123456789abcdef01234567.sock"))
    listener.listen(1)
    try:
        r = tether("doctor", "--repair", cwd=project_dir)
    finally:
        listener.close()
    assert r.returncode == 1
    assert "still answer" in r.stdout
    assert not list(tether_home.glob("state.db.corrupt-*"))


# --- a full disk: a real 1 MiB tmpfs ---------------------------------------------------


@contextmanager
def tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted for one test (root only; skipped with the reason
    otherwise), unmounted after it."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a real full disk needs root to mount a small tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for this test."""
    with tmpfs(tmp_path, "1m") as mnt:
        yield mnt


def _fill(mnt: Path) -> Path:
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass  # ENOSPC: the disk is full
    finally:
        os.close(fd)
    return filler


def test_full_disk_is_one_line_nothing_half_written_and_recovers(
    project_dir: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a full disk, `sessions new`, `exec` and `prompt` fail with one line and leave no
    row and no process; once space is freed, everything works again."""
    home = small_disk / "home"
    monkeypatch.setenv("TETHER_HOME", str(home))
    assert tether("mock", "sessions", "new", "-s", "warm", cwd=project_dir).returncode == 0
    try:
        filler = _fill(small_disk)
        for args in (("sessions", "new"), ("exec", "echo hi"), ("prompt", "-s", "warm", "hi")):
            r = tether("mock", *args, cwd=project_dir)
            assert (r.returncode, r.stdout) == (1, ""), (args, r.stderr)
            line = _one_error_line(r.stderr)
            assert "free some space" in line.lower(), line
        filler.unlink()
        listed = tether("mock", "sessions", "list", cwd=project_dir)
        assert listed.stdout.split("\t")[0] == "warm", listed.stdout  # `new` left no row
        r = tether("mock", "prompt", "-s", "warm", "echo back again", cwd=project_dir)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("back again\n[done] end_turn ("), r.stdout
        r = tether("mock", "sessions", "new", cwd=project_dir)
        assert r.returncode == 0, r.stderr
    finally:
        tether("mock", "sessions", "close", cwd=project_dir)
        tether("mock", "sessions", "close", "warm", cwd=project_dir)


def test_close_on_a_full_disk_answers_and_leaves_nothing(
    project_dir: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sessions close` on a full disk: the tree is still ended and proven gone, the
    closer gets its answer saying the end was not recorded (exit 1, one clear line,
    not "the outcome is unknown"), and no process is left; afterwards close works."""
    home = small_disk / "home"
    monkeypatch.setenv("TETHER_HOME", str(home))
    assert tether("mock", "sessions", "new", cwd=project_dir).returncode == 0
    assert tether("mock", "prompt", "echo warm", cwd=project_dir).returncode == 0
    filler = _fill(small_disk)
    try:
        r = tether("mock", "sessions", "close", cwd=project_dir)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "outcome is unknown" not in r.stderr + r.stdout
        assert "survivors 0" in r.stdout, r.stdout
        assert "could not be recorded" in r.stdout, r.stdout
    finally:
        filler.unlink()
    r = tether("mock", "sessions", "close", cwd=project_dir)
    assert r.returncode == 0, r.stderr


# --- another user's TETHER_HOME: a real `nobody` ------------------------------------------


def _as_nobody(argv: list[str], home: str) -> tuple[int, str]:
    """Run ``tether.cli.main(argv)`` in a forked child that became ``nobody``.

    Forked rather than exec'd: the interpreter may live where ``nobody`` cannot read
    it (/root/.pyenv). Everything the child needs is imported first, for that reason.
    """
    import pwd

    import tether.cli
    import tether.cli._control_cmds
    import tether.cli._crash
    import tether.cli._prompt_cmd
    import tether.cli._session_flags
    import tether.cli._sessions_cmd
    import tether.cli.output
    import tether.state.registry

    nobody = pwd.getpwnam("nobody")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody, run the CLI, report through the pipe
        code = 99
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            os.environ["TETHER_HOME"] = home
            sys.stderr = os.fdopen(write_fd, "w", closefd=False)
            code = tether.cli.main(argv)
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        stderr = f.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), stderr


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory that `nobody` can traverse (pytest's tmp_path is root's, mode 0700)."""
    if os.geteuid() != 0:
        pytest.skip("acting as another user (nobody) needs root")
    path = Path(tempfile.mkdtemp(prefix="tether-other-user-"))
    path.chmod(0o755)
    (path / "project").mkdir(mode=0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.mark.parametrize(
    ("layout", "args"),
    [
        pytest.param("home-0700", ["sessions", "list"], id="cannot-enter-home"),
        pytest.param("home-0755-run-0700", ["status"], id="run-dir-chmod"),
        pytest.param("home-0755-db-0600", ["sessions", "list"], id="database-not-ours"),
    ],
)
def test_another_users_home_names_its_owner(
    shared_dir: Path, project_dir: Path, layout: str, args: list[str]
) -> None:
    """`nobody` pointed at root's TETHER_HOME gets one line naming root as the owner."""
    home = shared_dir / "home"
    # root makes a real home first: a session list creates state.db and run/
    env = {**os.environ, "TETHER_HOME": str(home)}
    subprocess.run(
        [sys.executable, "-m", "tether", "mock", "status"], env=env, check=True, capture_output=True
    )
    home.chmod(0o700 if layout == "home-0700" else 0o755)
    code, stderr = _as_nobody(["--cwd", str(shared_dir / "project"), "mock", *args], str(home))
    assert code == 1, stderr
    line = _one_error_line(stderr)
    assert "belongs to root" in line, line
    assert "TETHER_HOME" in line, line


# --- anything else: one line and a log ----------------------------------------------------


def test_unexpected_exception_is_one_line_and_a_log(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug surfaces as one line naming a log file that holds the traceback."""
    import tether.cli

    def broken(_ctx: object, _doors: object) -> int:
        raise RuntimeError("a bug on our side")

    monkeypatch.setattr(tether.cli, "_dispatch", broken)
    code = tether.cli.main(["mock", "status"])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 1
    assert "RuntimeError: a bug on our side" in line
    log = Path(line.rsplit("details in ", 1)[1].rstrip(")"))
    assert log.parent == tether_home / "logs"
    assert "Traceback" in log.read_text()
    assert oct(log.stat().st_mode & 0o777) == "0o600"


def test_doctor_warns_about_open_modes_and_repair_closes_them(
    project_dir: Path, tether_home: Path
) -> None:
    """A run/ directory open to others is a warning; `--repair` gives it 0700 back."""
    assert tether("mock", "sessions", "list", cwd=project_dir).returncode == 0
    run = tether_home / "run"
    run.mkdir(exist_ok=True)
    run.chmod(0o755)
    r = tether("doctor", cwd=project_dir)
    assert r.returncode == 0, r.stdout
    assert f"WARN run directory: {run} is mode 0755" in r.stdout
    r = tether("doctor", "--repair", cwd=project_dir)
    assert r.returncode == 0, r.stdout
    assert f"repaired: chmod 0700 {run}" in r.stdout
    assert run.stat().st_mode & 0o777 == 0o700


def test_crash_log_falls_back_to_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When TETHER_HOME/logs cannot be written, the crash log goes to the temp dir."""
    from tether.cli._crash import write_crash_log

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TETHER_HOME", str(blocker / "home"))  # under a file: ENOTDIR
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    try:
        raise ValueError("boom")
    except ValueError as exc:
        path = write_crash_log(exc)
    assert path is not None
    assert Path(path).parent == tmp_path
    assert "ValueError: boom" in Path(path).read_text()


# --- the database removed under a live owner (issue 21 item 6) --------------------------


def test_issue21_item6_state_db_truncated_under_a_live_owner_stops_it_cleanly(
    cli: Callable[..., Cli], tether_home: Path, project_dir: Path
) -> None:
    """`state.db` truncated and its WAL deleted during a stream: the owner notices, ends
    the turn with a clear STATE_LOST error and stops, its agent's tree gone; `doctor`
    reports what happened; the next session starts on a fresh database."""
    c = cli()
    c.run("sessions", "new")
    script = " ; ".join(f"echo line {i} ; sleep 200" for i in range(100))  # 20 s
    prompter = c.popen("prompt", script, fmt="json")
    status = c.wait_active()
    owner, agent = status["ownerPid"], status["agentPid"]
    assert prompter.stdout is not None
    assert prompter.stdout.readline()  # the stream is flowing
    db = tether_home / "state.db"
    with db.open("r+b") as f:
        f.truncate(0)
    (tether_home / "state.db-wal").unlink()
    rc, out, err = finish(prompter)
    assert rc == 1, err
    assert '"detailCode":"STATE_LOST"' in out
    assert "truncated" in err, err
    assert "Traceback" not in err
    wait_for(lambda: not alive(owner) and not alive(agent), "the owner and its agent to end")
    doctor = run_tether("doctor", cwd=project_dir)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "removed or replaced under it" in doctor.stdout
    assert c.json("sessions", "new")["action"] == "session_ensured"  # a fresh start


def test_issue21_item6_close_reaches_a_live_owner_when_the_database_cannot_be_read(
    cli: Callable[..., Cli], tether_home: Path
) -> None:
    """`state.db` overwritten in place (same file, same size: the owner's watch cannot
    tell) makes the database unreadable to the CLI; `sessions close` still reaches the
    live owner through its socket, which ends the session and proves its tree gone."""
    c = cli()
    c.run("sessions", "new")
    c.run("prompt", "echo warm")
    status = c.status()
    owner, agent = status["ownerPid"], status["agentPid"]
    db = tether_home / "state.db"
    junk = b"this is not an sqlite file at all "
    with db.open("r+b") as f:
        f.write(junk * (db.stat().st_size // len(junk)))
    r = c.run("sessions", "close", rc=None)
    assert "survivors 0" in r.stdout, r.stdout + r.stderr
    assert "could not be looked up" in r.stdout
    wait_for(lambda: not alive(owner) and not alive(agent), "the owner and its agent to end")
