"""The gateway's owner fork server (issue 23, item 3), with real processes: owners it
forks are detached, hold nothing of it or the gateway, serve, outlive the gateway; it
ends with the gateway; a killed one falls back to exec and comes back; it can be off."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from tests._proctree import cmdline
from tests._proctree import proc_stat as stat
from tests.integration._serve import Gateway, gateway, spawn_gateway

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = pytest.mark.integration
__all__ = ["gateway"]


def fd_targets(pid: int) -> set[str]:
    """The sockets and pipes ``pid`` holds (``socket:[inode]``, ``pipe:[inode]``)."""
    out = set()
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith(("socket:", "pipe:")):
            out.add(target)
    return out


def loaded_ssl(pid: int) -> bool:
    """Whether OpenSSL is mapped into ``pid`` (asyncio imports ``ssl`` unless told not)."""
    with open(f"/proc/{pid}/maps") as f:
        return "libssl" in f.read()


def fork_server(gw: Gateway) -> dict[str, Any]:
    return dict(gw.http.get("/v1/health").json()["forkServer"])


def create(gw: Gateway, cwd: Path, name: str) -> tuple[str, int]:
    r = gw.http.post("/v1/sessions", json={"agent": "mock", "cwd": str(cwd), "name": name})
    assert r.status_code == 201, r.text
    return str(r.json()["id"]), int(r.json()["ownerPid"])


def turn(gw: Gateway, sid: str, text: str = "hello") -> None:
    queued = gw.prompt(sid, text)
    entries = gw.until_turn_end(sid, queued["requestId"], query=f"?from={queued['fromSeq']}")
    assert entries[-1]["stopReason"] == "end_turn"


def is_forked(owner: int) -> bool:
    """An owner forked by the fork server runs the fork server's command line."""
    return "tether.owner.fork_server" in cmdline(owner)


def wait_gone(pid: int, start: int) -> bool:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        now = stat(pid)
        if now is None or now[2] != start:
            return True
        time.sleep(0.05)
    return False


def test_an_owner_forked_by_the_fork_server_is_detached_holds_nothing_and_serves(
    gateway: Gateway, project_dir: Path
) -> None:
    """The owner the gateway starts comes from the fork server, is neither its child nor
    the gateway's, in a session of its own, holds none of their sockets or pipes,
    carries the owner marker in its environment as exec'd, loads no OpenSSL, and answers
    prompts."""
    server = fork_server(gateway)
    fs, gw = server["pid"], gateway.proc.pid
    assert fs is not None
    sid, owner = create(gateway, project_dir, "forked")
    turn(gateway, sid)
    assert is_forked(owner)
    owner_stat, fs_stat, gw_stat = stat(owner), stat(fs), stat(gw)
    assert owner_stat is not None
    assert fs_stat is not None
    assert gw_stat is not None
    assert fs_stat[0] == gw  # the fork server is the gateway's child ...
    assert owner_stat[0] not in (gw, fs)  # ... the owner is neither's
    assert owner_stat[1] not in (fs_stat[1], gw_stat[1], fs, gw)
    assert not fd_targets(owner) & (fd_targets(fs) | fd_targets(gw))
    with open(f"/proc/{owner}/environ", "rb") as f:
        assert b"\0TETHER_OWNER_OF=" in b"\0" + f.read()  # tether.policy.access's hint
    assert not loaded_ssl(owner)
    assert not loaded_ssl(fs)
    after = fork_server(gateway)
    assert (after["forks"], after["fallbacks"], after["starts"]) == (1, 0, 1)


def test_owners_outlive_the_gateway_and_the_fork_server_ends_with_it(
    tether_home: Path, project_dir: Path
) -> None:
    """Stopping the gateway ends its fork server; the owner it forked lives on and
    answers through the next gateway, as an exec'd owner does."""
    gw = spawn_gateway(tether_home)
    try:
        fs = fork_server(gw)["pid"]
        fs_stat = stat(fs)
        assert fs_stat is not None
        sid, owner = create(gw, project_dir, "outlives")
        turn(gw, sid)
        owner_stat = stat(owner)
        assert owner_stat is not None
    finally:
        gw.stop()
    assert wait_gone(fs, fs_stat[2])
    assert stat(owner) == owner_stat
    again = spawn_gateway(tether_home)
    try:
        turn(again, sid, "again")
        assert again.http.get(f"/v1/sessions/{sid}").json()["status"]["ownerPid"] == owner
    finally:
        try:
            again.close_all()
        finally:
            again.stop()


def test_a_killed_fork_server_falls_back_to_exec_once_and_is_restarted(
    gateway: Gateway, project_dir: Path
) -> None:
    """With its fork server killed, the gateway execs the next owner (and says so on
    stderr), then starts a new fork server on the next start, which forks that owner."""
    fs, gw = fork_server(gateway)["pid"], gateway.proc.pid
    pidfd = os.pidfd_open(fs)  # pins the pid: it is the gateway's child, not yet reaped
    try:
        fs_stat = stat(fs)
        assert fs_stat is not None
        assert fs_stat[0] == gw
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)
    sid, owner = create(gateway, project_dir, "fallback")
    assert not is_forked(owner)
    assert "tether.owner" in cmdline(owner)  # python -m tether.owner KEY FD
    turn(gateway, sid)
    assert fork_server(gateway)["fallbacks"] == 1
    assert "owner fork server" in gateway.stderr()
    _, owner = create(gateway, project_dir, "after")  # the next start: a new fork server
    assert is_forked(owner)
    now = fork_server(gateway)
    assert now["pid"] not in (None, fs)
    assert (now["starts"], now["fallbacks"]) == (2, 1)


def test_the_fork_server_can_be_turned_off(tether_home: Path, project_dir: Path) -> None:
    """``serve.ownerForkServer = false``: no fork server, owners are exec'd (and load no
    OpenSSL: asyncio is imported without ssl)."""
    (tether_home / "config.toml").write_text("[serve]\nownerForkServer = false\n")
    os.chmod(tether_home / "config.toml", 0o600)
    gw = spawn_gateway(tether_home)
    try:
        assert "forkServer" not in gw.http.get("/v1/health").json()
        sid, owner = create(gw, project_dir, "exec")
        turn(gw, sid)
        assert not is_forked(owner)
        assert not loaded_ssl(owner)  # an exec'd owner imports no ssl either (tether._nossl)
        assert _children(gw.proc.pid) == []  # no fork server beside the gateway
    finally:
        try:
            gw.close_all()
        finally:
            gw.stop()


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            out += [int(p) for p in f.read().split()]
    return out
