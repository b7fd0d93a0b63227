"""Session hosts (``serve.sessionHosts``, issue 23), with real processes: several
sessions' owners in one process, each still holding its own lock and socket, each
ending alone (close, terminate, a signal to the host); a host ends with its last
session; a killed host is ``owner-lost`` for each of its sessions; a silent one is
fenced as a whole, each of its sessions told so."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests._proctree import cmdline, proc_stat
from tests.integration._serve import Gateway, running_gateway, spawn_gateway

from tether import sessions

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
ESCAPER = Path(__file__).parents[1] / "fake_agents" / "escaper.py"
pytestmark = pytest.mark.integration


def gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc_stat(pid) is None:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def hosted(tether_home: Path) -> Iterator[Gateway]:
    """A gateway whose owners live two to a session host."""
    (tether_home / "config.toml").write_text(
        "ownerUnresponsiveAfter = 1\n[serve]\nsessionHosts = 2\n"
    )
    os.chmod(tether_home / "config.toml", 0o600)
    with running_gateway(tether_home) as gw:
        yield gw


def create(gw: Gateway, cwd: Path, name: str) -> tuple[str, int]:
    r = gw.http.post("/v1/sessions", json={"agent": "mock", "cwd": str(cwd), "name": name})
    assert r.status_code == 201, r.text
    return str(r.json()["id"]), int(r.json()["ownerPid"])


def turn(gw: Gateway, sid: str, text: str = "echo hi") -> dict[str, Any]:
    r = gw.http.post(f"/v1/sessions/{sid}/prompt?wait=true", json={"prompt": text})
    assert r.status_code == 200, r.text
    return dict(r.json())


def status(gw: Gateway, sid: str) -> dict[str, Any]:
    return dict(gw.http.get(f"/v1/sessions/{sid}").json()["status"])


def history(gw: Gateway, sid: str) -> list[dict[str, Any]]:
    """The session's whole journal (``/export``: NDJSON, one entry per line)."""
    r = gw.http.get(f"/v1/sessions/{sid}/export")
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines() if line]


def signal_host(gw: Gateway, host: int, sig: int) -> None:
    """Signal a session host of ``gw`` -- proven: detached, it is our child (the test
    session is the subreaper of what it starts, tests/_proctree.py) and runs
    ``tether.owner.host``, checked again once a pidfd pins it."""
    before = proc_stat(host)
    assert before is not None
    assert before[0] == os.getpid()
    assert "tether.owner.host" in cmdline(host)
    pidfd = os.pidfd_open(host)
    try:
        assert proc_stat(host) == before
        signal.pidfd_send_signal(pidfd, sig)
    finally:
        os.close(pidfd)


def lock_free(key: str) -> bool:
    fd = sessions.try_lock(key)
    if fd is None:
        return False
    os.close(fd)
    return True


def test_sessions_share_a_host_and_each_ends_alone(hosted: Gateway, project_dir: Path) -> None:
    """Two sessions to a host, each with its own lock and socket; closing one ends its
    owner (lock free, socket gone, agent tree gone) while the host serves the other;
    the host ends with its last session."""
    s1, h1 = create(hosted, project_dir, "one")
    s2, h2 = create(hosted, project_dir, "two")
    s3, h3 = create(hosted, project_dir, "three")
    assert h1 == h2 != h3
    assert "tether.owner.host" in cmdline(h1)
    host_stat = proc_stat(h1)
    assert host_stat is not None
    assert host_stat[0] != hosted.proc.pid  # detached: not the gateway's child
    with open(f"/proc/{h1}/maps") as f:
        assert "libssl" not in f.read()  # asyncio without ssl, as an exec'd owner
    with open(f"/proc/{h1}/environ", "rb") as f:
        assert b"\0TETHER_OWNER_OF=session-host\0" in b"\0" + f.read() + b"\0"
    host = hosted.http.get("/v1/health").json()["sessionHosts"]
    assert sorted(h["pid"] for h in host["hosts"]) == sorted({h1, h3})
    for sid in (s1, s2, s3):
        assert turn(hosted, sid)["stopReason"] == "end_turn"
    one = status(hosted, s1)
    assert one["ownerPid"] == h1
    assert one["agentPid"]
    assert one["keeperPid"]
    assert not lock_free(s1)
    closed = hosted.http.delete(f"/v1/sessions/{s1}").json()
    assert closed["ownerExited"] is True
    assert closed["ownerHosted"] is True
    assert closed["survivors"] == []
    assert lock_free(s1)  # the owner is gone when close returns, though its host is not
    assert not os.path.exists(sessions.socket_path(s1))
    assert gone(one["agentPid"])
    assert gone(one["keeperPid"])
    assert proc_stat(h1) is not None
    assert turn(hosted, s2, "echo still")["stopReason"] == "end_turn"
    log = (hosted.home / "logs" / f"owner-{s1[:24]}.log").read_text()
    assert '"event":"owner_started"' in log
    assert f'"sessionId":"{s1}"' in log
    hosted.http.delete(f"/v1/sessions/{s2}")
    assert gone(h1)  # its last session closed: the host left
    assert proc_stat(h3) is not None
    hosted.http.delete(f"/v1/sessions/{s3}")
    assert gone(h3)


def test_a_killed_host_is_owner_lost_for_each_of_its_sessions(
    hosted: Gateway, project_dir: Path
) -> None:
    """SIGKILL a host with a turn running: each of its sessions' agent trees ends (their
    keepers saw their supervisor die), the running turn ends ``owner-lost`` and the
    next prompt of each session is served by a new host."""
    s1, h1 = create(hosted, project_dir, "busy")
    s2, h2 = create(hosted, project_dir, "idle")
    assert h1 == h2
    turn(hosted, s2)
    queued = hosted.prompt(s1, "sleep 30000 ; echo never")
    deadline = time.monotonic() + 15
    while status(hosted, s1)["currentRequest"] != queued["requestId"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    agents = [status(hosted, sid)["agentPid"] for sid in (s1, s2)]
    signal_host(hosted, h1, signal.SIGKILL)
    assert gone(h1)
    assert all(gone(pid) for pid in agents)
    assert turn(hosted, s1, "echo after")["stopReason"] == "end_turn"
    assert turn(hosted, s2, "echo after")["stopReason"] == "end_turn"
    assert status(hosted, s1)["ownerPid"] not in (h1,)
    ends = [e for e in history(hosted, s1) if e["kind"] == "turn_ended"]
    lost = [e for e in ends if e.get("requestId") == queued["requestId"]]
    assert [e["stopReason"] for e in lost] == ["owner-lost"]


def test_a_silent_host_is_fenced_as_a_whole(hosted: Gateway, project_dir: Path) -> None:
    """A stopped host stops beating for all its sessions; past ownerUnresponsiveAfter
    the next caller of one fences it (SIGKILL, proven), and every session it hosted is
    told in its own history -- not only the caller's."""
    s1, h1 = create(hosted, project_dir, "caller")
    s2, h2 = create(hosted, project_dir, "bystander")
    assert h1 == h2
    turn(hosted, s1)
    turn(hosted, s2)
    signal_host(hosted, h1, signal.SIGSTOP)
    time.sleep(1.5)
    assert turn(hosted, s1, "echo fenced")["stopReason"] == "end_turn"
    assert gone(h1)
    for sid in (s1, s2):
        takeovers = [e for e in history(hosted, sid) if e["kind"] == "owner_takeover"]
        assert len(takeovers) == 1, sid
        assert takeovers[0]["ownerPid"] == h1
    assert turn(hosted, s2, "echo back")["stopReason"] == "end_turn"


def test_a_signal_to_a_host_retires_its_sessions(hosted: Gateway, project_dir: Path) -> None:
    """SIGTERM to a host: each of its owners stops as an owner of its own process does
    (the session stays open, resumable), the host ends, and the next prompt starts a
    new one."""
    s1, h1 = create(hosted, project_dir, "a")
    s2, _ = create(hosted, project_dir, "b")
    turn(hosted, s1)
    agent = status(hosted, s1)["agentPid"]
    signal_host(hosted, h1, signal.SIGTERM)
    assert gone(h1)
    assert gone(agent)
    for sid in (s1, s2):
        stopped = [e for e in history(hosted, sid) if e["kind"] == "owner_stopped"]
        assert stopped, sid
        assert stopped[-1]["reason"] == "signal-SIGTERM", sid
        assert hosted.http.get(f"/v1/sessions/{sid}").json()["state"] == "open"
    assert turn(hosted, s1, "echo again")["stopReason"] == "end_turn"
    assert status(hosted, s1)["ownerPid"] != h1


def test_hosts_outlive_the_gateway_with_their_sessions(
    tether_home: Path, project_dir: Path
) -> None:
    """Stopping the gateway offers its hosts no more starts but ends none of them: a
    host serves its sessions through the next gateway, whose own starts go to a new
    host, and leaves once its sessions have closed."""
    (tether_home / "config.toml").write_text("[serve]\nsessionHosts = 4\n")
    os.chmod(tether_home / "config.toml", 0o600)
    first = spawn_gateway(tether_home)
    try:
        sid, host = create(first, project_dir, "kept")
        turn(first, sid)
    finally:
        first.stop()  # its sessions left open
    assert proc_stat(host) is not None
    with running_gateway(tether_home) as again:
        assert turn(again, sid, "echo again")["stopReason"] == "end_turn"
        assert status(again, sid)["ownerPid"] == host
        other, other_host = create(again, project_dir, "new")
        assert other_host != host
        again.http.delete(f"/v1/sessions/{sid}")
        assert gone(host)
        assert turn(again, other)["stopReason"] == "end_turn"


def test_a_state_database_lost_under_a_host_stops_each_owner_and_the_host(
    hosted: Gateway, project_dir: Path
) -> None:
    """``state.db`` truncated and its WAL deleted under a host of two sessions, one of
    them streaming: the one watch the host's owners share tells each; the streaming
    turn ends ``STATE_LOST``, both owners stop with their agents' trees, and the host
    ends."""
    s1, h1 = create(hosted, project_dir, "streaming")
    s2, h2 = create(hosted, project_dir, "idle")
    assert h1 == h2
    turn(hosted, s2)
    script = " ; ".join(f"echo line {i} ; sleep 200" for i in range(100))  # 20 s
    queued = hosted.prompt(s1, script)
    deadline = time.monotonic() + 15
    while status(hosted, s1)["currentRequest"] != queued["requestId"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    agents = [status(hosted, sid)["agentPid"] for sid in (s1, s2)]
    with (hosted.home / "state.db").open("r+b") as f:
        f.truncate(0)
    (hosted.home / "state.db-wal").unlink()
    assert gone(h1)
    assert all(gone(pid) for pid in agents)
    notes = list((hosted.home / "logs").glob("state-lost-*.log"))
    assert len(notes) == 2  # one per session the host held


def test_an_agent_that_kills_its_keeper_is_ended_by_its_host_and_its_neighbour_goes_on(
    hosted: Gateway, project_dir: Path, tmp_path: Path
) -> None:
    """A hosted session's agent escapes (double fork, setsid, a bare environment) and
    kills its keeper: what it left comes up to the host -- the subreaper of last resort
    for all its runs -- and is ended, the run recorded ``ownership-escape`` in that
    session's journal only; the other session of the host keeps its agent and answers."""
    s1, h1 = create(hosted, project_dir, "escaping")
    s2, h2 = create(hosted, project_dir, "neighbour")
    assert h1 == h2
    turn(hosted, s2)
    neighbour = status(hosted, s2)["agentPid"]
    out = tmp_path / "esc.txt"
    argv = [sys.executable, str(ESCAPER), str(out)]
    r = hosted.http.post(
        f"/v1/sessions/{s1}/prompt?wait=true", json={"prompt": f"run {shlex.join(argv)}"}
    )
    assert r.status_code == 502, r.text  # the turn dies with its keeper: the agent ended
    assert r.json()["detailCode"] == "AGENT_EXITED", r.text
    pid, start = (int(w) for w in out.read_text().split()[:2])
    deadline = time.monotonic() + 15
    while (proc_stat(pid) or (0, 0, -1))[2] == start:
        assert time.monotonic() < deadline, "the host did not end the escapee"
        time.sleep(0.05)
    ends: list[dict[str, Any]] = []
    while not ends:  # journaled once the escapee is proven gone
        assert time.monotonic() < deadline, "the run's end was not journaled"
        time.sleep(0.05)
        ends = [e for e in history(hosted, s1) if e["kind"] == "agent_run_ended"]
    assert ends[-1]["message"].startswith("agent run ended: ownership-escape"), ends
    assert pid in ends[-1]["escaped"], ends
    assert not [e for e in history(hosted, s2) if e["kind"] == "agent_run_ended"]
    assert status(hosted, s2)["agentPid"] == neighbour
    assert turn(hosted, s2, "echo still")["stopReason"] == "end_turn"
    assert proc_stat(h1) is not None


def test_terminate_and_the_idle_ttl_end_one_hosted_owner_while_the_other_streams(
    hosted: Gateway, project_dir: Path
) -> None:
    """Terminating one session of a host, and another retiring on its idle TTL, end
    those owners only: the host's third session streams its turn to its end, and the
    host leaves once that one is closed too."""
    s1, h1 = create(hosted, project_dir, "terminated")
    s2, h2 = create(hosted, project_dir, "streaming")
    assert h1 == h2
    r = hosted.http.post(
        "/v1/sessions", json={"agent": "mock", "cwd": str(project_dir), "name": "ttl", "ttl": 1}
    )
    s3, h3 = str(r.json()["id"]), int(r.json()["ownerPid"])
    assert h3 != h1  # hosts of two: the third session opens a second host
    turn(hosted, s1)
    script = " ; ".join(f"echo line {i} ; sleep 100" for i in range(15))  # 1.5 s
    queued = hosted.prompt(s2, script)
    terminated = hosted.http.post(f"/v1/sessions/{s1}/terminate").json()
    assert terminated["terminated"] is True
    assert terminated["ownerHosted"] is True
    entries = hosted.until_turn_end(s2, queued["requestId"], query=f"?from={queued['fromSeq']}")
    assert entries[-1]["stopReason"] == "end_turn"
    assert sum(1 for e in entries if e["kind"] == "acp") >= 15
    assert gone(h3)  # the ttl session retired, and its host with it
    assert hosted.http.get(f"/v1/sessions/{s3}").json()["state"] == "open"
    assert proc_stat(h1) is not None
    hosted.http.delete(f"/v1/sessions/{s2}")
    assert gone(h1)
