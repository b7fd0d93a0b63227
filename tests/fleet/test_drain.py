"""Draining a fleet host, every part a real process: PostgreSQL, hosts, routers.

A SIGTERMed host (or `tether serve --drain`) admits nothing new, lets the running turn
finish, retires its owners by their own proof, ships the rest, deregisters and exits 0;
its sessions resume on the same storage. A rolling restart of every host while a client
prompts through two routers loses no acknowledged entry, and every prompt is answered
with its result or a retryable error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import _proctree
from tests.conftest import python_env
from tests.fleet.test_fleet_e2e import FLEET_TOKEN, USER_TOKEN, Processes, wait_for
from tests.integration._serve import Gateway, spawn_gateway
from tether.fleet.index import FleetIndex

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = [
    pytest.mark.fleet,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(420),
]

GRACE_S = "20"  # a bound for the harness on a loaded machine; the turns take far less
AGENT = "mockl"  # the mock agent that can session/load: a session resumes after a restart


@pytest.fixture
def fleet(fleet_dsn: str, tmp_path: Path) -> Iterator[Processes]:
    """Hosts and routers as real processes; whatever is left is closed and stopped."""
    base = tmp_path / "fleet"
    base.mkdir()
    p = Processes(fleet_dsn, base)
    try:
        yield p
    finally:
        p.stop()


def _host(procs: Processes, host_id: str, grace: str = GRACE_S) -> Gateway:
    """Start (or restart, on its same home) the host ``host_id``."""
    home = procs.base / host_id
    if not home.exists():
        home.mkdir()
        argv = [sys.executable, "-m", "tether.testing.mock_agent", "--load-session"]
        (home / "config.toml").write_text(f"[agents.{AGENT}]\nargv = {json.dumps(argv)}\n")
        os.chmod(home / "config.toml", 0o600)
    gw = spawn_gateway(
        home, "--host-id", host_id, f"--label=host={host_id}", "--drain-grace", grace,
        env=procs.env,
    )  # fmt: skip
    gw.token = FLEET_TOKEN
    gw.http.headers["Authorization"] = f"Bearer {FLEET_TOKEN}"
    procs.hosts[host_id] = gw
    return gw


def _create(router: Gateway, cwd: Path, name: str, host_id: str = "h1") -> str:
    body = {"agent": AGENT, "cwd": str(cwd), "name": name, "labels": {"host": host_id}}
    r = router.http.post("/v1/sessions", json=body)
    assert r.status_code in (200, 201), r.text
    return str(r.json()["id"])


def _turn(http: httpx.Client, sid: str, rid: str, timeout: float = 60.0) -> dict[str, Any]:
    """The turn ``rid`` of the session once it ended (read from its host, or from the
    index while the host is away); bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = http.get(f"/v1/sessions/{sid}/history")
        if r.status_code == 200:
            for turn in r.json()["turns"]:
                if turn["requestId"] == rid and turn.get("stopReason"):
                    return dict(turn)
        else:
            assert r.status_code in (503, 504), r.text
            assert r.json()["retryable"], r.text
        time.sleep(0.1)
    raise AssertionError(f"turn {rid} of {sid} did not end within {timeout} s")


def _entries(http: httpx.Client, sid: str) -> list[str]:
    r = http.get(f"/v1/sessions/{sid}/export")
    assert r.status_code == 200, r.text
    return [x for x in r.text.splitlines() if x]


def _host_processes(host_id: str) -> list[int]:
    """Live processes started for ``host_id`` (owners, keepers, agents), by the label
    they carry; read only, never signalled."""
    out = []
    for pid in _proctree.live_descendants():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"TETHER_HOST_ID={host_id}".encode() in env:
            out.append(pid)
    return out


def _drain_line(gw: Gateway) -> str:
    lines = [x for x in gw.stderr().splitlines() if " drained in " in x]
    assert len(lines) == 1, gw.stderr()
    return lines[0]


def _sigterm_and_wait(gw: Gateway) -> int:
    """SIGTERM the host we started, by its pid; its exit code (bounded wait)."""
    gw.proc.send_signal(signal.SIGTERM)
    code = gw.proc.wait(timeout=120)
    gw.stop()  # closes our client and its stdout
    return code


def test_a_sigtermed_host_finishes_its_turn_refuses_new_work_and_its_session_resumes(
    fleet: Processes, project_dir: Path
) -> None:
    procs = fleet
    host = _host(procs, "h1")
    router = procs.router()
    sid = _create(router, project_dir, "kept")
    first = router.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "echo before"})
    assert first.status_code == 202, first.text
    assert _turn(router.http, sid, first.json()["requestId"])["stopReason"] == "end_turn"
    ready = httpx.get(f"{host.url}/readyz")  # no credential needed
    assert (ready.status_code, ready.json()["ready"]) == (200, True)
    assert httpx.get(f"{host.url}/livez").json()["live"] is True
    # A turn that runs when the SIGTERM comes (for 6 s: the checks below happen while
    # the host drains, even on a loaded machine): it finishes within the grace.
    slow = router.http.post(
        f"/v1/sessions/{sid}/prompt", json={"prompt": "sleep 6000 ; echo slow done"}
    )
    assert slow.status_code == 202, slow.text
    host.proc.send_signal(signal.SIGTERM)  # the host process we started, by its pid
    wait_for(lambda: httpx.get(f"{host.url}/readyz").status_code == 503, "readiness to drop")
    assert httpx.get(f"{host.url}/readyz").json()["why"] == "draining"
    with FleetIndex.connect(procs.dsn) as index:
        wait_for(lambda: index.host("h1").state == "draining", "the index to say so")  # type: ignore[union-attr]
    # New work is refused, retryably: a prompt at the host, a new session at the router.
    refused = router.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "echo late"})
    assert refused.status_code == 503, refused.text
    assert (refused.json()["code"], refused.json()["retryable"]) == ("HOST_DRAINING", True)
    placed = router.http.post(
        "/v1/sessions", json={"agent": AGENT, "cwd": str(project_dir), "name": "new"}
    )
    assert (placed.status_code, placed.json()["retryable"]) == (503, True)
    assert host.proc.wait(timeout=120) == 0
    line = _drain_line(host)
    assert "1 session(s) left open for resume" in line
    assert "1 owner(s) ended with proof" in line
    assert "0 turn(s) cut at the 20 s grace" in line
    host.stop()
    assert _host_processes("h1") == []  # its owner, keeper and agent are gone
    slow_turn = _turn(router.http, sid, slow.json()["requestId"])
    assert slow_turn["stopReason"] == "end_turn"
    with FleetIndex.connect(procs.dsn) as index:
        row = index.host("h1")
        assert row is not None
        assert (row.state, row.down_reason) == ("down", "drained")
        durable = index.session(sid).durable_seq  # type: ignore[union-attr]
    # Everything the owner journaled was shipped before the host left.
    exported = router.http.get(f"/v1/sessions/{sid}/export")
    assert exported.headers["x-tether-source"] == "index"
    before = [x for x in exported.text.splitlines() if x]
    assert int(json.loads(before[-1])["seq"]) == durable
    # Back on its storage: the next prompt resumes the session (session/load).
    back = _host(procs, "h1")
    wait_for(lambda: httpx.get(f"{back.url}/readyz").status_code == 200, "the host to be ready")
    rid = _prompt_until_admitted(router, sid, "session-params")
    assert _turn(router.http, sid, rid)["stopReason"] == "end_turn"
    after = _entries(back.http, sid)
    assert after[: len(before)] == before  # no entry lost, none rewritten
    started = [json.loads(x) for x in after[len(before) :]]
    runs = [e for e in started if e["kind"] == "agent_run_started"]
    assert runs[0]["resumed"] is True
    assert any("session/load" in x for x in after[len(before) :])


def test_a_turn_still_running_at_the_grace_is_cut_and_the_session_stays_open(
    fleet: Processes, project_dir: Path
) -> None:
    procs = fleet
    host = _host(procs, "h1", grace="1")
    router = procs.router()
    sid = _create(router, project_dir, "long")
    long = router.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "sleep 60000"})
    assert long.status_code == 202, long.text
    rid = long.json()["requestId"]
    wait_for(
        lambda: host.http.get(f"/v1/sessions/{sid}").json()["status"]["status"] == "running",
        "the turn to run",
    )
    assert _sigterm_and_wait(host) == 0
    line = _drain_line(host)
    assert "1 turn(s) cut at the 1 s grace" in line
    assert "1 session(s) left open for resume" in line
    assert _host_processes("h1") == []
    assert _turn(router.http, sid, rid)["stopReason"] == "cancelled"
    with FleetIndex.connect(procs.dsn) as index:
        assert index.session(sid).state == "open"  # type: ignore[union-attr]
    _host(procs, "h1")
    again = _prompt_until_admitted(router, sid, "echo still here")
    assert _turn(router.http, sid, again)["stopReason"] == "end_turn"


def _prompt_until_admitted(router: Gateway, sid: str, text: str, timeout: float = 60.0) -> str:
    """Prompt until admitted (retryable refusals while the router learns the host is
    back); the request id. Bounded."""
    deadline = time.monotonic() + timeout
    while True:
        r = router.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": text})
        if r.status_code == 202:
            return str(r.json()["requestId"])
        assert r.status_code in (503, 504), r.text
        assert r.json()["retryable"], r.text
        assert time.monotonic() < deadline, f"not admitted within {timeout} s: {r.text}"
        time.sleep(0.2)


def test_serve_drain_drains_the_host_of_its_home(fleet: Processes, project_dir: Path) -> None:
    procs = fleet
    host = _host(procs, "h1")
    router = procs.router()
    sid = _create(router, project_dir, "on-demand")
    rid = _prompt_until_admitted(router, sid, "echo hi")
    assert _turn(router.http, sid, rid)["stopReason"] == "end_turn"
    done = subprocess.run(
        [sys.executable, "-m", "tether", "serve", "--drain", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**python_env(), "TETHER_HOME": str(host.home)},
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert (said["action"], said["hostId"], said["pid"]) == ("drained", "h1", host.proc.pid)
    assert host.proc.wait(timeout=30) == 0
    assert "1 session(s) left open for resume" in _drain_line(host)
    host.stop()
    assert _host_processes("h1") == []
    # Nothing serves that home now: --drain says so, and signals nothing.
    again = subprocess.run(
        [sys.executable, "-m", "tether", "serve", "--drain"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**python_env(), "TETHER_HOME": str(host.home)},
    )
    assert again.returncode == 2, again.stderr
    assert "nothing to drain" in again.stderr
    _host(procs, "h1")  # back, so the fixture closes the session through it


class Client:
    """Prompts sessions round robin through the routers until stopped; every answer is
    a result or a retryable error (anything else, or a hang, fails the test)."""

    def __init__(self, routers: list[Gateway], sids: list[str]) -> None:
        self.routers = routers
        self.sids = sids
        self.stop = threading.Event()
        self.acked: list[tuple[str, str]] = []  # (sid, request id) admitted with 202
        self.retryable: list[tuple[int, str]] = []
        self.failures: list[str] = []
        self.thread = threading.Thread(target=self._run, name="client")

    def _run(self) -> None:
        clients = [
            httpx.Client(
                base_url=r.url, headers={"Authorization": f"Bearer {USER_TOKEN}"}, timeout=90
            )
            for r in self.routers
        ]
        try:
            n = 0
            while not self.stop.is_set() and not self.failures:
                http = clients[n % len(clients)]
                sid = self.sids[n % len(self.sids)]
                n += 1
                try:
                    self._one(http, sid, n)
                except (AssertionError, httpx.HTTPError) as e:
                    self.failures.append(f"{type(e).__name__}: {e}")
        finally:
            for c in clients:
                c.close()

    def _one(self, http: httpx.Client, sid: str, n: int) -> None:
        r = http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": f"echo turn {n}"})
        if r.status_code == 202:
            rid = r.json()["requestId"]
            self.acked.append((sid, rid))
            turn = _turn(http, sid, rid, timeout=90)
            assert turn["stopReason"] == "end_turn", turn
            return
        doc = r.json()
        assert r.status_code in (503, 504), r.text
        assert doc.get("retryable") is True, r.text
        self.retryable.append((r.status_code, str(doc.get("code"))))
        time.sleep(0.05)


def test_a_rolling_restart_loses_no_acknowledged_entry_and_answers_every_prompt(
    fleet: Processes, project_dir: Path
) -> None:
    procs = fleet
    ids = ["h1", "h2", "h3"]
    for host_id in ids:
        _host(procs, host_id)
    routers = [procs.router(), procs.router()]
    sids = [_create(routers[i % 2], project_dir, f"s{i}", ids[i % 3]) for i in range(6)]
    where = {s["id"]: s["hostId"] for s in routers[0].http.get("/v1/sessions").json()["sessions"]}
    assert set(where.values()) == set(ids)  # spread over every host
    # Two clients, each through both routers, in opposite orders.
    clients = [Client(routers, sids), Client(routers[::-1], sids[::-1])]
    for c in clients:
        c.thread.start()

    def acked() -> int:
        return sum(len(c.acked) for c in clients)

    try:
        wait_for(lambda: acked() >= 6, "the clients' first turns", timeout=120)
        for host_id in ids:
            gw = procs.hosts[host_id]
            mine = [s for s in sids if where[s] == host_id]
            before = {s: _entries(gw.http, s) for s in mine}
            assert _sigterm_and_wait(gw) == 0
            assert _host_processes(host_id) == []  # every owner, keeper and agent gone
            with FleetIndex.connect(procs.dsn) as index:
                for s in mine:
                    row = index.session(s)
                    assert row is not None
                    assert row.state == "open"
                    # What was journaled by the time of the SIGTERM was shipped.
                    assert row.durable_seq >= int(json.loads(before[s][-1])["seq"])
            back = _host(procs, host_id)
            wait_for(lambda b=back: httpx.get(f"{b.url}/readyz").status_code == 200, "ready")
            for s in mine:
                after = _entries(back.http, s)
                assert after[: len(before[s])] == before[s], s  # no entry lost or rewritten
            assert not any(c.failures for c in clients), [c.failures for c in clients]
        so_far = acked()
        wait_for(lambda: acked() >= so_far + 6, "turns after the restarts", timeout=120)
    finally:
        for c in clients:
            c.stop.set()
        for c in clients:
            c.thread.join(timeout=200)
    assert not any(c.thread.is_alive() for c in clients), "a client hung"
    assert not any(c.failures for c in clients), [c.failures for c in clients]
    # Every acknowledged prompt ended with its result, in the journal where it lives now:
    # read from its host, never from the index's copy (behind it by up to a shipping
    # interval), though this router was refused by the host's old process moments ago --
    # once its host table shows every host's new registration (refreshed every 0.25 s:
    # until then the last host back is the drained one, and its reads the index's).
    wait_for(
        lambda: all(h["available"] for h in routers[0].http.get("/v1/fleet/hosts").json()["hosts"]),
        "the router to see every host back",
    )
    for sid in sids:
        history = routers[0].http.get(f"/v1/sessions/{sid}/history")
        assert history.status_code == 200, history.text
        assert "x-tether-source" not in history.headers, dict(history.headers)
        turns = {t["requestId"]: t for t in history.json()["turns"]}
        for s, rid in (pair for c in clients for pair in c.acked):
            if s == sid:
                assert turns[rid]["stopReason"] == "end_turn", (sid, rid)
    with FleetIndex.connect(procs.dsn) as index:
        for sid in sids:
            last = int(json.loads(_entries(procs.hosts[where[sid]].http, sid)[-1])["seq"])
            wait_for(
                lambda s=sid, n=last: index.session(s).durable_seq >= n,  # type: ignore[union-attr]
                "the last entries to be shipped",
            )
