"""The warm session owner, end to end: the real CLI, real owners, the mock agent.

Every test drives ``python -m tether`` as subprocesses in a private TETHER_HOME (set by
conftest) with ``--cwd`` a scratch project, and closes every session it opened (the
``cli`` fixture), so no owner, keeper or agent outlives it. IPC frames are checked on
raw Unix sockets. Waits are polls with deadlines, never fixed sleeps.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tests import _proctree
from tests._proctree import marker_carriers

pytestmark = pytest.mark.integration

MOCK_ARGV = [sys.executable, "-m", "tether.testing.mock_agent"]
RUN_TIMEOUT = 30.0  # a backstop for one CLI call; never reached when things work
WAIT = 15.0  # the deadline of a poll

T = TypeVar("T")
Frame = dict[str, Any]


# --- helpers --------------------------------------------------------------------------


def wait_for(check: Callable[[], T], what: str, timeout: float = WAIT) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def alive(pid: int | None) -> bool:
    """Is ``pid`` a live (non-zombie) process?"""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return False
    return raw[raw.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


def signal_descendant(pid: int, sig: signal.Signals) -> None:
    """Signal ``pid`` only if it is verifiably one of ours (a descendant, via a pidfd)."""
    before = _proctree.descendants().get(pid)
    assert before is not None, f"pid {pid} is not a descendant of the test"
    fd = os.pidfd_open(pid)
    try:
        # The pidfd pins the process: if the starttime still matches, it is the same one.
        assert _proctree.descendants().get(pid, ("", -1))[1] == before[1]
        signal.pidfd_send_signal(fd, sig)
    finally:
        os.close(fd)


def wait_stopped(pid: int) -> None:
    """Wait until ``pid`` is in the stopped state (``T``): a stop signal lands later."""
    stat = Path(f"/proc/{pid}/stat")
    wait_for(lambda: stat.read_text().rpartition(")")[2].split()[0] == "T", "the stop")


def stop_outside_writes(pid: int) -> None:
    """SIGSTOP ``pid`` (one of ours) at a moment it holds no write lock on the state
    database: stopped inside a write, it would block every writer on the host (what
    `STATE_BUSY` reports) -- a test that stops an owner to make it *silent* means the
    owner, not the host's database, to stop. Bounded: 200 tries."""
    from tether import paths
    from tether.state.lock_holders import holder_pids

    for _ in range(200):
        signal_descendant(pid, signal.SIGSTOP)
        wait_stopped(pid)
        if pid not in holder_pids(paths.state_db()):
            return
        signal_descendant(pid, signal.SIGCONT)
        time.sleep(0.01)
    pytest.fail(f"pid {pid} held the state database's write lock at every stop")


def stop_inside_a_write(pid: int, within: float = 30.0) -> int:
    """SIGSTOP ``pid`` (one of ours) while it holds the state database's write lock --
    the stop that wedges every writer on the host. Its writes last tens of microseconds,
    so this watches ``/proc/locks`` and stops it the moment one shows, until a stop lands
    inside one (then it is left stopped); returns the stops it took."""
    from tether import paths
    from tether.state.lock_holders import holder_pids

    db = paths.state_db()
    before = _proctree.descendants().get(pid)
    assert before is not None, f"pid {pid} is not a descendant of the test"
    fd = os.pidfd_open(pid)  # pins the process: checked once, then signalled fast
    try:
        assert _proctree.descendants().get(pid, ("", -1))[1] == before[1]
        stops = 0
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if pid not in holder_pids(db):
                continue
            signal.pidfd_send_signal(fd, signal.SIGSTOP)
            stops += 1
            wait_stopped(pid)
            if pid in holder_pids(db):
                return stops
            signal.pidfd_send_signal(fd, signal.SIGCONT)
    finally:
        os.close(fd)
    pytest.fail(f"no stop of pid {pid} landed inside a write in {within} s")


class Cli:
    """``tether --cwd PROJECT [--agent CMD | mock] ...`` as subprocesses."""

    def __init__(self, project: Path, agent: list[str] | None = None) -> None:
        self.project = project
        self.agent = agent or ["mock"]
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.callers: list[subprocess.Popen[str]] = []

    def argv(self, *args: str, fmt: str = "text") -> list[str]:
        return [
            sys.executable,
            "-m",
            "tether",
            "--cwd",
            str(self.project),
            "--format",
            fmt,
            *self.agent,
            *args,
        ]

    def run(
        self, *args: str, fmt: str = "text", rc: int | None = 0
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.argv(*args, fmt=fmt),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if rc is not None:
            assert proc.returncode == rc, (
                f"tether {' '.join(args)}: rc {proc.returncode}, expected {rc}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        return proc

    def json(self, *args: str, rc: int | None = 0) -> Frame:
        """Run with ``--format json``; return the last stdout line's object."""
        out = self.run(*args, fmt="json", rc=rc).stdout.strip().splitlines()
        assert out, f"tether {' '.join(args)} printed nothing"
        obj = json.loads(out[-1])
        assert isinstance(obj, dict)
        return obj

    def popen(self, *args: str, fmt: str = "text") -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            self.argv(*args, fmt=fmt),
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.callers.append(proc)
        return proc

    def status(self) -> Frame:
        return self.json("status")

    def journal(self) -> list[Frame]:
        """The session's journal entries, oldest first (``sessions export``)."""
        lines = self.run("sessions", "export", fmt="json").stdout.splitlines()
        return [json.loads(line) for line in lines]

    def history(self, kind: str | None = None) -> list[Frame]:
        """Journal records as ``{"kind", "payload"}``, oldest first.

        ``turn`` is a finished turn (``turn_ended``, with its prompt from ``prompt_queued``).
        """
        entries = self.journal()
        prompts = {
            e.get("requestId"): e.get("prompt") for e in entries if e["kind"] == "prompt_queued"
        }
        records = []
        for e in entries:
            if e["kind"] == "turn_ended":
                records.append(
                    {
                        "kind": "turn",
                        "payload": {**e, "prompt": prompts.get(e.get("requestId"), "")},
                    }
                )
            elif e["kind"] != "acp":
                records.append({"kind": e["kind"], "payload": e})
        return [r for r in records if kind is None or r["kind"] == kind]

    def wait_active(self) -> Frame:
        """Wait until the owner runs a prompt turn and the agent is up; return the status."""
        return wait_for(
            lambda: (s := self.status())["currentKind"] == "prompt" and s["agentPid"] and s,
            "a running prompt turn",
        )

    def close(self) -> None:
        self.run("sessions", "close", rc=None)


@pytest.fixture
def cli(project_dir: Path) -> Iterator[Callable[..., Cli]]:
    """A factory of :class:`Cli`; every session they may have opened is closed at the end."""
    made: list[Cli] = []

    def make(agent: list[str] | None = None) -> Cli:
        c = Cli(project_dir, agent)
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.close()
        for c in made:
            for proc in c.callers:  # a failed test may leave a caller behind: collect it
                if proc.poll() is None:
                    proc.kill()
                proc.communicate()


@pytest.fixture
def mock(cli: Callable[..., Cli]) -> Cli:
    """The ``mock`` agent with a session already created (its owner is running)."""
    c = cli()
    c.run("sessions", "new")
    return c


def finish(proc: subprocess.Popen[str], timeout: float = RUN_TIMEOUT) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the caller did not exit in time\nstdout: {out}\nstderr: {err}")
    return proc.returncode, out, err


class Raw:
    """A raw IPC v2 connection: bytes in, frames out."""

    def __init__(self, key: str, timeout: float = WAIT) -> None:
        from tether import sessions

        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(sessions.socket_path(key)))
        self.file = self.sock.makefile("rb")
        self.frames: list[Frame] = []
        hello = self.read()
        assert hello is not None
        assert hello["type"] == "hello"
        assert hello["v"] == 2
        self.hello = hello

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *_: object) -> None:
        self.file.close()
        self.sock.close()

    def send(self, data: bytes | Frame) -> None:
        if isinstance(data, dict):
            data = json.dumps(data).encode() + b"\n"
        self.sock.sendall(data)

    def request(self, rid: str, kind: str, payload: Frame | None = None, **extra: Any) -> None:
        self.send({"v": 2, "requestId": rid, "kind": kind, "payload": payload or {}, **extra})

    def read(self) -> Frame | None:
        line = self.file.readline()
        if not line:
            return None
        frame = json.loads(line)
        assert isinstance(frame, dict)
        if frame.get("type") != "hello":
            self.frames.append(frame)
        return frame

    def until_terminal(self, rid: str | None) -> Frame:
        """Read until the terminal frame of ``rid``; return it."""
        while True:
            frame = self.read()
            assert frame is not None, f"EOF before the terminal frame of {rid}"
            if frame.get("requestId") == rid and frame["type"] in ("result", "error"):
                return frame

    def until_eof(self) -> None:
        self.sock.shutdown(socket.SHUT_WR)
        while self.read() is not None:
            pass


def assert_one_terminal_each(frames: list[Frame], rids: list[str]) -> None:
    """Each request: at most one ack, first; exactly one terminal; nothing after it."""
    for rid in rids:
        mine = [f["type"] for f in frames if f.get("requestId") == rid]
        terminals = [t for t in mine if t in ("result", "error")]
        assert len(terminals) == 1, f"{rid}: {mine}"
        assert mine[-1] in ("result", "error"), f"{rid}: {mine}"
        assert mine.count("ack") <= 1, f"{rid}: {mine}"
        if "ack" in mine:
            assert mine[0] == "ack", f"{rid}: {mine}"


def text_prompt(text: str) -> Frame:
    return {"prompt": [{"type": "text", "text": text}]}


# --- the warm path --------------------------------------------------------------------


def test_caller_exits_while_owner_stays_and_agent_is_reused(mock: Cli) -> None:
    first = mock.run("prompt", "echo one")
    assert "one" in first.stdout
    assert "[done] end_turn" in first.stdout
    s1 = mock.status()
    assert s1["status"] == "idle"
    assert alive(s1["ownerPid"])
    assert alive(s1["agentPid"])

    second = mock.run("prompt", "echo two")
    assert "two" in second.stdout
    s2 = mock.status()
    assert s2["ownerPid"] == s1["ownerPid"]
    assert s2["ownerGeneration"] == s1["ownerGeneration"]
    assert s2["agentPid"] == s1["agentPid"]
    assert s2["leaseId"] == s1["leaseId"]


def test_no_wait_then_waiting_prompt_run_in_order(mock: Cli) -> None:
    queued = mock.json("prompt", "--no-wait", "sleep 300 ; echo first")
    assert queued["action"] == "prompt_queued"
    rid = queued["requestId"]
    second = mock.run("prompt", "echo second")
    assert "second" in second.stdout
    assert "first" not in second.stdout  # the first turn's text went nowhere near us
    turns = mock.history("turn")
    assert [t["payload"]["prompt"] for t in turns] == ["sleep 300 ; echo first", "echo second"]
    assert turns[0]["payload"]["requestId"] == rid
    assert all(t["payload"]["stopReason"] == "end_turn" for t in turns)


def test_cancel_during_active_prompt(mock: Cli) -> None:
    mock.run("prompt", "echo warm")
    caller = mock.popen("prompt", "sleep 30000")
    active = mock.wait_active()
    result = mock.json("cancel")
    assert result["action"] == "cancel_result"
    assert result["cancelled"] is True
    assert result["requestId"] == active["currentRequest"]
    rc, out, err = finish(caller)
    assert rc == 0, err
    assert "[done] cancelled" in out
    s = mock.status()
    assert s["status"] == "idle"
    assert s["ownerPid"] == active["ownerPid"]
    assert s["agentPid"] == active["agentPid"]


def test_cancel_while_the_agent_is_still_starting(cli: Callable[..., Cli]) -> None:
    """A cancel that arrives before the turn reached the agent is not lost."""
    c = cli(["--agent", shlex.join([*MOCK_ARGV, "--startup-delay-ms", "3000"])])
    c.run("sessions", "new")
    caller = c.popen("prompt", "echo should not run")
    wait_for(lambda: c.status()["currentKind"] == "prompt", "the prompt to become active")
    result = c.json("cancel")
    assert result["cancelled"] is True
    rc, out, err = finish(caller)
    assert rc == 0, err
    assert "[done] cancelled" in out
    assert "should not run" not in out


def test_sigint_on_waiting_prompt_cancels_its_turn_and_exits_130(mock: Cli) -> None:
    mock.run("prompt", "echo warm")
    caller = mock.popen("prompt", "sleep 30000")
    active = mock.wait_active()
    caller.send_signal(signal.SIGINT)  # our own child, not yet reaped
    rc, _, err = finish(caller)
    assert rc == 130, err
    wait_for(lambda: mock.status()["status"] == "idle", "the turn to end")
    turn = mock.history("turn")[-1]["payload"]
    assert turn["requestId"] == active["currentRequest"]
    assert turn["stopReason"] == "cancelled"
    assert mock.status()["ownerPid"] == active["ownerPid"]  # the owner stays warm


def test_sigint_on_a_queued_prompt_dequeues_it(mock: Cli) -> None:
    mock.run("prompt", "--no-wait", "sleep 30000")
    mock.wait_active()
    caller = mock.popen("prompt", "echo never runs")
    wait_for(lambda: mock.status()["queueDepth"] == 1, "the prompt to be queued")
    caller.send_signal(signal.SIGINT)
    rc, out, err = finish(caller)
    assert rc == 130, err
    assert "never runs" not in out
    assert mock.status()["queueDepth"] == 0
    mock.json("cancel")
    wait_for(lambda: mock.status()["status"] == "idle", "the active turn to end")
    assert [t["payload"]["prompt"] for t in mock.history("turn")] == ["sleep 30000"]


def test_deadline_passing_in_the_queue_is_a_timeout(mock: Cli) -> None:
    mock.run("prompt", "--no-wait", "sleep 30000")
    mock.wait_active()
    late = mock.json("--timeout", "0.5", "prompt", "echo too late", rc=3)
    assert late["error"]["data"]["acpxCode"] == "TIMEOUT"
    assert mock.status()["queueDepth"] == 0


# --- failures and recovery ------------------------------------------------------------


def test_close_during_a_turn_that_ignores_cancel(mock: Cli) -> None:
    """`hang` never answers, not even a cancel: close must not wait for the turn ceiling."""
    caller = mock.popen("prompt", "hang", fmt="json")
    active = mock.wait_active()
    closed = mock.json("sessions", "close")
    assert closed["survivors"] == []
    rc, out, _ = finish(caller)
    assert rc == 1
    lines = [json.loads(line) for line in out.strip().splitlines()]
    error = lines[-1]["error"]
    assert error["data"]["detailCode"] == "SESSION_CLOSED"  # issue 9 item 7
    assert lines[-2]["action"] == "session_ended"
    assert not alive(active["agentPid"])
    wait_for(lambda: not alive(active["ownerPid"]), "the owner to exit")


def test_sigterm_owner_mid_turn_cancels_and_records(mock: Cli) -> None:
    caller = mock.popen("prompt", "sleep 30000", fmt="json")
    active = mock.wait_active()
    signal_descendant(active["ownerPid"], signal.SIGTERM)
    rc, _, err = finish(caller)
    assert rc == 0, err  # the turn ended `cancelled` before the owner went
    wait_for(lambda: not alive(active["ownerPid"]), "the owner to exit")
    assert not alive(active["agentPid"])
    ended = mock.history("agent_run_ended")
    assert len(ended) == 1
    assert ended[0]["payload"]["reason"] == "terminated"
    assert mock.history("session_ended") == []  # the owner stopped; the session did not end
    assert mock.history("turn")[-1]["payload"]["stopReason"] == "cancelled"
    assert "again" in mock.run("prompt", "echo again").stdout


def test_sigkill_owner_mid_turn(mock: Cli) -> None:
    caller = mock.popen("prompt", "sleep 30000", fmt="json")
    active = mock.wait_active()
    owner, agent, keeper = active["ownerPid"], active["agentPid"], active["keeperPid"]
    signal_descendant(owner, signal.SIGKILL)
    rc, out, _ = finish(caller, timeout=WAIT)
    assert rc == 1
    error = json.loads(out.strip().splitlines()[-1])["error"]
    assert error["data"]["detailCode"] == "QUEUE_DISCONNECTED_BEFORE_COMPLETION"
    wait_for(lambda: not alive(agent) and not alive(keeper), "the agent tree to die")
    wait_for(lambda: not marker_carriers(active["leaseId"]), "no process with the lease marker")

    again = mock.run("prompt", "echo again")
    assert "again" in again.stdout
    s = mock.status()
    assert s["ownerPid"] != owner
    assert s["ownerGeneration"] == active["ownerGeneration"] + 1
    assert s["agentPid"] != agent


def test_racing_starters_produce_one_owner(cli: Callable[..., Cli]) -> None:
    c = cli()
    first = c.json("--ttl", "0.2", "sessions", "new")
    wait_for(lambda: not alive(first["ownerPid"]), "the first owner to expire")
    racers = [c.popen("--ttl", "60", "sessions", "ensure", fmt="json") for _ in range(3)]
    results = []
    for proc in racers:
        rc, out, err = finish(proc)
        assert rc == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert len({r["ownerPid"] for r in results}) == 1
    assert {r["ownerGeneration"] for r in results} == {first["ownerGeneration"] + 1}
    assert c.status()["ownerPid"] == results[0]["ownerPid"]


def test_idle_ttl_expiry_leaves_nothing_behind(cli: Callable[..., Cli]) -> None:
    from tether import sessions

    born_before = set(_proctree.live_descendants())
    c = cli()
    c.run("--ttl", "1", "sessions", "new")
    c.run("prompt", "spawn-setsid ; spawn-daemon")  # the TTL is stored with the session
    s = c.status()  # live, or already offline: both name the run's lease
    key, lease = s["sessionKey"], s["leaseId"]
    wait_for(
        lambda: not (set(_proctree.live_descendants()) - born_before), "every process to be gone"
    )
    assert not marker_carriers(lease)
    assert not os.path.exists(sessions.socket_path(key))
    offline = c.status()
    assert offline["status"] == "idle"
    assert offline["ownerPid"] is None
    assert offline["leaseState"] == "closed"
    ended = [e for e in c.history("agent_run_ended") if e["payload"]["leaseId"] == lease]
    assert len(ended) == 1
    assert c.history("session_ended") == []  # retirement is not the session's end (item 8)
    # the session is still open: the next prompt starts a fresh owner by itself
    assert "back" in c.run("prompt", "echo back").stdout


def test_prompts_across_idle_expiry_always_succeed(cli: Callable[..., Cli]) -> None:
    """A caller that meets an owner while it expires gets a new owner, not an error."""
    c = cli()
    c.run("--ttl", "0.3", "sessions", "new")
    for i in range(4):
        assert f"n{i}" in c.run("prompt", f"echo n{i}").stdout
        if i % 2:
            wait_for(lambda: c.status()["ownerPid"] is None, "the owner to expire")


def test_close_reaps_setsid_and_double_forked_grandchildren(mock: Cli) -> None:
    out = mock.run("prompt", "spawn-setsid ; spawn-daemon ; spawn-group").stdout
    pids = [int(w.split("=")[1]) for w in out.split() if w.startswith("pid=")]
    assert len(pids) == 3, out
    assert all(alive(p) for p in pids)
    lease = mock.status()["leaseId"]
    assert len(marker_carriers(lease)) >= 4  # keeper/agent and the three sleepers
    closed = mock.json("sessions", "close")
    assert closed["action"] == "session_closed"
    assert closed["survivors"] == []
    assert marker_carriers(lease) == []
    assert not any(alive(p) for p in pids)
    assert mock.status()["status"] == "closed"


def test_agent_crash_between_prompts_is_recorded_and_recovered(mock: Cli) -> None:
    mock.run("prompt", "echo bye ; exit 3")
    ended = wait_for(lambda: mock.history("agent_run_ended"), "the crash to be recorded")
    assert len(ended) == 1
    assert ended[0]["payload"]["reason"] == "error"
    assert ended[0]["payload"]["exitCode"] == 3
    old_lease = ended[0]["payload"]["leaseId"]
    s = mock.status()
    assert s["agentPid"] is None
    assert alive(s["ownerPid"])

    again = mock.run("prompt", "echo back")
    assert "back" in again.stdout
    s2 = mock.status()
    assert alive(s2["agentPid"])
    assert s2["leaseId"] != old_lease
    assert s2["ownerPid"] == s["ownerPid"]


def test_agent_crash_mid_turn_fails_the_turn_and_next_prompt_works(mock: Cli) -> None:
    crashed = mock.json("prompt", "crash 7", rc=1)
    assert "error" in crashed
    again = mock.run("prompt", "echo back")
    assert "back" in again.stdout
    ended = mock.history("agent_run_ended")
    assert len(ended) == 1
    assert ended[0]["payload"]["exitCode"] == 7


def test_exactly_one_end_per_agent_run_and_per_session(mock: Cli) -> None:
    """Each agent run's end is recorded once; each session end (close) once (item 8)."""
    mock.run("prompt", "echo a ; exit 0")  # run 1 ends by itself
    wait_for(lambda: mock.history("agent_run_ended"), "run 1 to end")
    mock.run("prompt", "echo b")  # run 2
    mock.run("prompt", "echo c")
    mock.json("sessions", "close")  # run 2 ends by close
    mock.run("sessions", "new")
    mock.run("prompt", "echo d")  # run 3, in a new owner
    mock.close()
    leases = {e["leaseId"] for e in (x["payload"] for x in mock.history("agent_run_ended"))}
    ended = mock.history("agent_run_ended")
    assert len(ended) == 3, ended
    assert len(leases) == 3
    assert [e["payload"]["reason"] for e in ended] == ["completed", "terminated", "terminated"]
    closed = mock.history("session_ended")
    assert [e["payload"]["reason"] for e in closed] == ["closed", "closed"], closed


def test_timeout_then_late_answer_does_not_cascade(mock: Cli) -> None:
    """acpx's stale-id cascade: a timed-out turn answered late must not answer the next."""
    timed_out = mock.json("--timeout", "0.3", "prompt", "late 1000 stale answer", rc=3)
    assert timed_out["error"]["data"]["acpxCode"] == "TIMEOUT"
    second = mock.run("prompt", "echo second answer")
    assert "second answer" in second.stdout
    assert "stale answer" not in second.stdout
    assert "[done] end_turn" in second.stdout
    third = mock.run("prompt", "echo third answer")
    assert "third answer" in third.stdout
    assert "second answer" not in third.stdout
    assert "stale answer" not in third.stdout


# --- the IPC surface ------------------------------------------------------------------


def test_malformed_oversized_and_unknown_frames_are_rejected(
    cli: Callable[..., Cli], tether_home: Path
) -> None:
    (tether_home / "config.toml").write_text("promptMaxBytes = 1048576\n")  # 64 MiB default
    mock = cli()
    mock.run("sessions", "new")
    key = mock.status()["sessionKey"]
    with Raw(key) as raw:
        raw.send(b"{this is not json\n")
        bad = raw.until_terminal(None)
        assert bad["error"]["detailCode"] == "QUEUE_PROTOCOL_INVALID_JSON"
        raw.send(b"\xff\xfe garbage\n")
        assert raw.until_terminal(None)["error"]["detailCode"] == "QUEUE_PROTOCOL_INVALID_JSON"
        raw.send(b"[1, 2]\n")
        assert raw.until_terminal(None)["error"]["detailCode"] == "QUEUE_PROTOCOL_MALFORMED_MESSAGE"
        raw.request("r-kind", "explode")
        unknown = raw.until_terminal("r-kind")
        assert unknown["error"]["detailCode"] == "QUEUE_PROTOCOL_UNKNOWN_KIND"
        raw.request("r-payload", "prompt", {"prompt": "not a list"})
        malformed = raw.until_terminal("r-payload")
        assert malformed["error"]["detailCode"] == "QUEUE_PROTOCOL_MALFORMED_MESSAGE"
        raw.send({"v": 1, "requestId": "r-v1", "kind": "status"})
        assert raw.until_terminal("r-v1")["error"]["detailCode"] == (
            "QUEUE_PROTOCOL_UNSUPPORTED_VERSION"
        )
        # the same connection keeps serving
        raw.request("r-ok", "status")
        assert raw.until_terminal("r-ok")["result"]["action"] == "status_snapshot"
    with Raw(key) as raw:
        raw.send(b'{"v":2,"requestId":"r-big","kind":"prompt","payload":{"x":"')
        raw.send(b"x" * (1024 * 1024 + 16) + b'"}}\n')
        big = raw.until_terminal(None)
        assert big["error"]["detailCode"] == "QUEUE_REQUEST_TOO_LARGE"
        assert raw.read() is None  # the owner drops a connection it cannot resync
    assert "still here" in mock.run("prompt", "echo still here").stdout


def test_exactly_one_terminal_frame_per_request(mock: Cli) -> None:
    key = mock.status()["sessionKey"]
    rids = []
    with Raw(key) as raw:
        generation = raw.hello["generation"]

        def ask(rid: str, kind: str, payload: Frame | None = None, **extra: Any) -> Frame:
            rids.append(rid)
            raw.request(rid, kind, payload, **extra)
            return raw.until_terminal(rid)

        assert ask("r-echo", "prompt", text_prompt("stream 5 part"))["type"] == "result"
        err = ask("r-err", "prompt", text_prompt("error -32000 boom"))
        assert err["type"] == "error"
        late = ask("r-late", "prompt", text_prompt("late 600 late"), deadlineMs=150)
        assert late["error"]["code"] == "TIMEOUT"
        assert ask("r-status", "status")["type"] == "result"
        assert ask("r-cancel", "cancel")["result"]["cancelled"] is False
        assert ask("r-mode", "set_mode", {"modeId": "plan"})["type"] == "error"  # no --modes
        gen = ask("r-gen", "status", ownerGeneration=generation + 5)
        assert gen["error"]["detailCode"] == "QUEUE_OWNER_GENERATION_MISMATCH"
        # after the late answer has arrived, the next prompt still gets one terminal frame
        assert "after" in json.dumps(
            ask("r-after", "prompt", text_prompt("sleep 700 ; echo after"))
        )
        raw.until_eof()
        frames = raw.frames
    assert_one_terminal_each(frames, rids)
    updates = [f for f in frames if f["type"] == "update"]
    assert {f["requestId"] for f in updates} <= {"r-echo", "r-err", "r-late", "r-after"}
    # frames of different requests never interleave with a terminal of another
    assert all(
        f.get("requestId") in rids
        for f in frames
        if f["type"] not in ("session_ended", "agent_run_ended")
    )


def test_queue_overload_is_retryable(cli: Callable[..., Cli], tether_home: Path) -> None:
    (tether_home / "config.toml").write_text("queueMaxDepth = 2\n")
    c = cli()
    c.run("sessions", "new")
    c.run("prompt", "--no-wait", "sleep 30000")
    c.wait_active()
    queued = [c.json("prompt", "--no-wait", f"echo q{i}")["requestId"] for i in range(2)]
    assert c.status()["queueDepth"] == 2
    over = c.json("prompt", "--no-wait", "echo too many", rc=1)["error"]["data"]
    assert over["detailCode"] == "QUEUE_OVERLOADED"
    assert over["retryable"] is True
    over = c.json("prompt", "echo too many, waiting", rc=1)["error"]["data"]
    assert over["detailCode"] == "QUEUE_OVERLOADED"
    # the queued ones still run, in order, once the active turn ends
    c.json("cancel")
    wait_for(lambda: len(c.history("turn")) == 3, "the queued turns to run")
    turns = c.history("turn")
    assert [t["payload"]["requestId"] for t in turns[1:]] == queued
    assert [t["payload"]["stopReason"] for t in turns] == ["cancelled", "end_turn", "end_turn"]


# --- the CLI surface ------------------------------------------------------------------


def test_prompt_without_session_exits_4_with_a_hint(cli: Callable[..., Cli]) -> None:
    from tether import paths

    c = cli()
    proc = c.run("prompt", "echo hi", rc=4)
    assert "sessions new" in proc.stderr
    err = c.json("prompt", "echo hi", rc=4)["error"]["data"]
    assert err["acpxCode"] == "NO_SESSION"
    # no owner was started for nothing
    assert not [n for n in os.listdir(paths.socket_dir()) if n.endswith(".sock")]


STATUS_KEYS = {"status", "ownerPid", "ownerGeneration", "agentPid", "queueDepth", "leaseState"}


def status_object(c: Cli) -> Frame:
    out = c.run("status", fmt="json").stdout.strip().splitlines()
    assert len(out) == 1, out
    obj: Frame = json.loads(out[0])
    assert obj["action"] == "status_snapshot"
    assert obj.keys() >= STATUS_KEYS, obj
    return obj


def test_status_json_is_one_documented_object(cli: Callable[..., Cli]) -> None:
    c = cli()
    assert status_object(c)["status"] == "no-session"
    c.run("sessions", "new")
    idle = status_object(c)
    assert idle["status"] == "idle"
    assert alive(idle["ownerPid"])
    assert idle["queueDepth"] == 0
    assert idle["agentPid"] is None  # the agent starts lazily, on the first prompt
    c.run("prompt", "echo hi")
    warm = status_object(c)
    assert alive(warm["agentPid"])
    assert warm["leaseState"] == "open"
    assert warm["ownerGeneration"] == idle["ownerGeneration"]
    c.run("sessions", "close")
    closed = status_object(c)
    assert closed["status"] == "closed"
    assert closed["ownerPid"] is None
    assert closed["leaseState"] == "closed"
    assert c.run("status", fmt="quiet").stdout.strip() == "closed"


def test_sessions_list_show_history(cli: Callable[..., Cli]) -> None:
    c = cli()
    c.run("sessions", "new")
    c.run("sessions", "new", "-s", "other")
    c.run("prompt", "echo hello")
    listed = c.json("sessions", "list")["sessions"]
    assert sorted(s["name"] for s in listed) == ["", "other"]
    assert all(s["state"] == "open" for s in listed)
    shown = c.json("sessions", "show")
    assert shown["action"] == "session"
    assert shown["key"] == c.status()["sessionKey"]
    assert shown["cwd"] == str(c.project.resolve())
    other = c.json("sessions", "show", "other")
    assert other["name"] == "other"
    assert other["key"] != shown["key"]
    history = c.json("sessions", "history")
    assert history["action"] == "history"
    assert [t["preview"] for t in history["turns"]] == ["echo hello"]
    assert history["turns"][0]["stopReason"] == "end_turn"
    assert c.json("sessions", "history", "other")["turns"] == []
    c.run("sessions", "close", "other")
    assert c.json("sessions", "show", "other")["state"] == "closed"
    assert "other" not in [s["name"] for s in c.json("sessions", "list")["sessions"]]
    assert "other" in [s["name"] for s in c.json("sessions", "list", "--all")["sessions"]]


def test_set_mode_and_config_options(cli: Callable[..., Cli]) -> None:
    c = cli(["--agent", shlex.join([*MOCK_ARGV, "--modes", "--config-options"])])
    c.run("sessions", "new")
    mode = c.json("set-mode", "plan")
    assert mode["action"] == "mode_set"
    assert mode["modeId"] == "plan"
    model = c.json("set", "model", "mock-large")
    assert model["action"] == "config_set"
    assert model["configId"] == "model"
    assert model["value"] == "mock-large"
    fast = c.json("set", "fast", "true")
    assert fast["action"] == "config_set"
    assert fast["value"] is True
    assert "set: plan" in c.run("set-mode", "plan").stdout

    plain = cli()
    plain.run("sessions", "new")
    refused = plain.json("set-mode", "plan", rc=1)
    assert "error" in refused


def test_permission_flag_on_a_prompt_applies_to_that_turn_only(cli: Callable[..., Cli]) -> None:
    """A prompt's permission flag decides its own turn; later turns use the session's mode."""
    c = cli()
    c.run("sessions", "new")  # the session's mode: approve-reads (the default)
    assert "permission: allowed" in c.run("prompt", "--approve-all", "tool execute").stdout
    assert "permission: denied" in c.run("prompt", "tool execute").stdout


def test_session_permission_mode_holds_without_flags(cli: Callable[..., Cli]) -> None:
    """The mode given at `sessions new` holds for prompts that give none."""
    c = cli()
    c.run("--approve-all", "sessions", "new")
    assert "permission: allowed" in c.run("prompt", "tool execute").stdout
    assert "permission: denied" in c.run("prompt", "--deny-all", "tool read").stdout
    assert "permission: allowed" in c.run("prompt", "tool execute").stdout


def test_owner_metrics_and_log_fields(mock: Cli, tether_home: Path) -> None:
    """Seed 001's owner metrics move with their events (owner spawn, enqueue and turn
    latency, cancel success, active owners), and every owner log line carries
    sessionId, ownerPid and ownerGeneration (requestId where there is one)."""
    mock.run("prompt", "echo warm")
    caller = mock.popen("prompt", "sleep 30000")
    active = mock.wait_active()
    assert mock.json("cancel")["cancelled"] is True
    rc, _, err = finish(caller)
    assert rc == 0, err
    # The owner's metrics reach the registry from its status writer thread, a few ms
    # after the turn: wait for the second turn's, then check every figure exactly.
    wait_for(
        lambda: mock.json("metrics")["histograms"].get("prompt_turn_seconds", {}).get("count") == 2,
        "the owner's metrics to be written",
    )
    m = mock.json("metrics")
    counters, hists = m["counters"], m["histograms"]
    assert counters["owner_spawn_total"] == 1
    assert counters["cancel_total{outcome=success}"] == 1
    assert hists["prompt_turn_seconds"]["count"] == 2
    assert hists["request_enqueue_seconds{kind=prompt}"]["count"] == 2
    assert m["gauges"]["owners_active"] == 1
    logs = list((tether_home / "logs").glob("owner-*.log"))
    assert len(logs) == 1
    lines = [json.loads(ln) for ln in logs[0].read_text().splitlines() if ln.startswith("{")]
    owner_lines = [ln for ln in lines if ln.get("event") != "owner_log_opened"]
    started = next(i for i, ln in enumerate(owner_lines) if ln.get("event") == "owner_started")
    for line in owner_lines[started:]:
        assert line["ownerPid"] == active["ownerPid"], line
        assert line["ownerGeneration"] == active["ownerGeneration"], line
        assert line["sessionId"], line
    (cancel,) = [ln for ln in owner_lines if ln.get("event") == "cancel"]
    assert cancel["requestId"] == active["currentRequest"]


def test_a_tether_package_in_the_callers_directory_runs_no_code_in_the_owner(
    project_dir: Path,
) -> None:
    """An owner starts in its caller's working directory, most often the project its
    agent writes to; a ``tether`` package there (planted by an agent, or a checkout of
    Tether at another version) must not be what the owner runs: the owner's (and the
    fork server's) interpreter does not put its working directory on the path (-P)."""
    hijacked = project_dir / "hijacked"
    plant = f"open({str(hijacked)!r}, 'w').write('owner code ran')\n"
    for sub in ("tether", "tether/owner"):
        (project_dir / sub).mkdir()
        (project_dir / sub / "__init__.py").write_text(plant)
    (project_dir / "tether" / "owner" / "__main__.py").write_text(plant)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    base = [sys.executable, "-P", "-m", "tether", "--agent", "mock"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], cwd=project_dir, env=env, capture_output=True, text=True,
            timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip

    try:
        new = run("sessions", "new")
        assert new.returncode == 0, new.stderr
        done = run("prompt", "echo hi")
        assert done.returncode == 0, done.stderr
        assert "hi" in done.stdout
    finally:
        run("sessions", "close")
    assert not hijacked.exists(), "the caller's directory's tether package ran in the owner"
