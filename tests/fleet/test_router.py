"""The router in front of real ``tether serve`` hosts: requests reach the host that owns
the session, byte for byte; a killed host answers 503 at once and its streams get
``host_lost``; a frozen host never hangs a client past the first-byte timeout.

Hosts are real processes with their own ``TETHER_HOME`` and a membership in a real
PostgreSQL; faults are injected by the pids we started, nothing else."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import python_env
from tests.integration._serve import Gateway, parse_sse, spawn_gateway
from tether.fleet.index import FleetIndex
from tether.fleet.membership import HostMembership
from tether.fleet.router import Router, RouterSettings, serve_router

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
# Each test starts PostgreSQL databases, hosts, routers, owners and agents: generous on a
# loaded machine (a harness bound, not a performance figure).
pytestmark = [
    pytest.mark.fleet,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(240),
]

TTL = 1.5
FIRST_BYTE = 1.0


class RunningRouter:
    def __init__(self, settings: RouterSettings) -> None:
        self.router = Router(settings)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._stop = asyncio.Event()
            self._ready.set()
            await serve_router(self.router, self.sock, self._stop)

        self._loop.run_until_complete(main())
        self._loop.close()

    def start(self) -> RunningRouter:
        self.router.start()
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def stop(self) -> None:
        stop = self._stop
        if stop is not None:
            self._loop.call_soon_threadsafe(stop.set)
        self._thread.join(10)
        self.router.stop()
        self.sock.close()


class Fleet:
    """Hosts (real gateways, each with its home and membership) and one router."""

    def __init__(self, dsn: str, base: Path) -> None:
        self.dsn = dsn
        self.base = base
        self.hosts: dict[str, Gateway] = {}
        self.members: dict[str, HostMembership] = {}
        self.token = "user-token-for-the-router"
        self.fleet_token = "fleet-credential-shared-by-router-and-hosts"
        self.router: RunningRouter | None = None
        self.index = FleetIndex.connect(dsn)

    def add_host(self, host_id: str) -> Gateway:
        home = self.base / host_id
        home.mkdir()
        gw = spawn_gateway(home, "--token", self.fleet_token)
        gw.token = self.fleet_token
        gw.http.headers["Authorization"] = f"Bearer {self.fleet_token}"
        self.hosts[host_id] = gw
        member = HostMembership(
            lambda: FleetIndex.connect(self.dsn), host_id, gw.url, interval_s=0.2
        )
        member.start()
        self.members[host_id] = member
        return gw

    def start_router(self) -> str:
        self.router = RunningRouter(
            RouterSettings(
                dsn=self.dsn,
                token=self.token,
                fleet_token=self.fleet_token,
                ttl_s=TTL,
                refresh_s=0.1,
                first_byte_timeout_s=FIRST_BYTE,
            )
        ).start()
        return self.router.url

    def session_on(self, host_id: str, cwd: Path, name: str) -> str:
        gw = self.hosts[host_id]
        sid = gw.ensure(cwd, name)
        epoch = self.members[host_id].epoch
        row, created = self.index.ensure_session(
            scope="u", agent="mock", cwd=str(cwd), name=name, host_id=host_id,
            host_epoch=epoch, session_id=sid,
        )  # fmt: skip
        assert created
        assert row.session_id == sid
        return sid

    def client(self) -> httpx.Client:
        """A client of the router, with the user's token (not the hosts' credential)."""
        assert self.router is not None
        return httpx.Client(
            base_url=self.router.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30.0,
        )

    def close(self) -> None:
        if self.router is not None:
            self.router.stop()
        for member in self.members.values():
            member.stop()
        for host_id, gw in self.hosts.items():
            try:
                if gw.proc.poll() is not None:
                    # A host the test killed: it comes back on its storage to close what
                    # its owners still run (they outlive a gateway, as they should).
                    gw.stop()
                    gw = self.hosts[host_id] = spawn_gateway(gw.home, "--token", self.fleet_token)
                    gw.http.headers["Authorization"] = f"Bearer {self.fleet_token}"
                gw.close_all()
            finally:
                gw.stop()
        self.index.close()


@pytest.fixture
def fleet(fleet_dsn: str, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(fleet_dsn, tmp_path / "hosts")
    (tmp_path / "hosts").mkdir()
    try:
        yield f
    finally:
        f.close()


def wait_for(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _turn(client: httpx.Client, sid: str, text: str) -> list[dict[str, Any]]:
    """Prompt through the router and read the turn's entries from its relayed stream."""
    r = client.post(f"/v1/sessions/{sid}/prompt", json={"prompt": text})
    assert r.status_code == 202, r.text
    rid, from_seq = r.json()["requestId"], r.json()["fromSeq"]
    out = []
    # From the turn's first entry: a stream opened after a fast turn ended still has it.
    with client.stream("GET", f"/v1/sessions/{sid}/events?from={from_seq}") as stream:
        assert stream.status_code == 200
        for event, data in parse_sse(stream.iter_lines()):
            if event == "message":
                out.append(data)
                if data["kind"] == "turn_ended" and data.get("requestId") == rid:
                    return out
    raise AssertionError("the stream ended before the turn did")


def _echoed(entries: list[dict[str, Any]]) -> str:
    text = []
    for e in entries:
        update = (e.get("frame") or {}).get("params", {}).get("update", {})
        if update.get("sessionUpdate") == "agent_message_chunk":
            text.append(update["content"].get("text", ""))
    return "".join(text)


def test_every_request_reaches_the_host_that_owns_the_session(
    fleet: Fleet, project_dir: Path
) -> None:
    fleet.add_host("h1")
    fleet.add_host("h2")
    a = fleet.session_on("h1", project_dir, "a")
    b = fleet.session_on("h2", project_dir, "b")
    fleet.start_router()
    with fleet.client() as client:
        assert "routed to h1" in _echoed(_turn(client, a, "echo routed to h1"))
        assert "routed to h2" in _echoed(_turn(client, b, "echo routed to h2"))
        # The hosts' own records say where each turn ran.
        for host_id, sid in (("h1", a), ("h2", b)):
            direct = fleet.hosts[host_id].http.get(f"/v1/sessions/{sid}/history").json()
            routed = client.get(f"/v1/sessions/{sid}/history").json()
            assert routed == direct
        other = fleet.hosts["h2"].http.get(f"/v1/sessions/{a}")
        assert other.status_code == 404  # the session lives on h1 only
        assert client.get("/v1/sessions/" + "0" * 64).status_code == 404
        unauthorized = httpx.get(f"{fleet.router.url}/v1/sessions/{a}") if fleet.router else None
        assert unauthorized is not None
        assert unauthorized.status_code == 401
        # the user's token is the router's; the hosts never see it
        assert (
            httpx.get(
                f"{fleet.hosts['h1'].url}/v1/sessions/{a}",
                headers={"Authorization": f"Bearer {fleet.token}"},
            ).status_code
            == 401
        )


def test_a_killed_host_answers_503_at_once_and_its_streams_get_host_lost(
    fleet: Fleet, project_dir: Path
) -> None:
    fleet.add_host("h1")
    doomed = fleet.add_host("h2")
    a = fleet.session_on("h1", project_dir, "a")
    b = fleet.session_on("h2", project_dir, "b")
    fleet.start_router()
    with fleet.client() as client:
        _turn(client, b, "echo before")
        lost: list[tuple[str, Any]] = []
        opened = threading.Event()

        def follow() -> None:
            with client.stream("GET", f"/v1/sessions/{b}/events?from=1") as stream:
                opened.set()
                for event, data in parse_sse(stream.iter_lines()):
                    if event != "comment":
                        lost.append((event, data))

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        assert opened.wait(10)
        wait_for(lambda: any(e == "message" for e, _ in lost), "the replay to reach the stream")
        doomed.proc.kill()  # the host process we started: SIGKILL by its pid
        doomed.proc.wait(10)
        reader.join(20)
        assert not reader.is_alive()
        assert lost[-1][0] == "host_lost"
        info = lost[-1][1]
        assert info["hostId"] == "h2"
        assert info["lastSeq"] == max(d["seq"] for e, d in lost if e == "message")
        started = time.monotonic()
        r = client.post(f"/v1/sessions/{b}/prompt", json={"prompt": "echo after"})
        elapsed = time.monotonic() - started
        assert r.status_code == 503, r.text
        problem = r.json()
        assert (problem["code"], problem["retryable"], problem["hostId"]) == (
            "HOST_UNAVAILABLE", True, "h2",
        )  # fmt: skip
        assert elapsed < FIRST_BYTE  # refused, not waited out (a figure for bench/, not a limit)
        assert "still here" in _echoed(_turn(client, a, "echo still here"))


def test_a_host_back_at_a_new_address_is_not_held_to_its_old_process_refusal(
    fleet: Fleet, project_dir: Path
) -> None:
    """A host's old process refused a connection; the host registered again (a restart:
    a new epoch and address). Its sessions are served by it at once -- prompts admitted,
    history read from its journal -- not from the index for the rest of the refusal's
    TTL (the rolling-restart flake of tests/fleet/test_drain.py: a turn its client had
    seen end read back from the index's lagging copy with no stop reason)."""
    old = fleet.add_host("h1")
    a = fleet.session_on("h1", project_dir, "a")
    # A TTL longer than the test: the old refusal cannot simply age out.
    fleet.router = RunningRouter(
        RouterSettings(
            dsn=fleet.dsn, token=fleet.token, fleet_token=fleet.fleet_token,
            ttl_s=120.0, refresh_s=0.1, first_byte_timeout_s=FIRST_BYTE,
        )
    ).start()  # fmt: skip
    table = fleet.router.router.table
    with fleet.client() as client:
        _turn(client, a, "echo before")
        old.stop()  # the gateway we started, by its pid (its owners live on)
        refused = client.post(f"/v1/sessions/{a}/prompt", json={"prompt": "echo refused"})
        assert refused.status_code == 503, refused.text
        assert table.refused("h1") is not None  # remembered: not tried again for the TTL
        # Back on its storage: a new process, a new address, registered again.
        fleet.members.pop("h1").stop(deregister=False)
        back = fleet.hosts["h1"] = spawn_gateway(old.home, "--token", fleet.fleet_token)
        back.token = fleet.fleet_token
        back.http.headers["Authorization"] = f"Bearer {fleet.fleet_token}"
        member = fleet.members["h1"] = HostMembership(
            lambda: FleetIndex.connect(fleet.dsn), "h1", back.url, interval_s=0.2
        )
        member.start()
        wait_for(lambda: (table.host("h1") or old).url == back.url, "the router to learn it")
        entries = _turn(client, a, "echo after")  # admitted: the host is tried afresh
        assert "after" in _echoed(entries)
        rid = [e for e in entries if e["kind"] == "turn_ended"][-1]["requestId"]
        history = client.get(f"/v1/sessions/{a}/history")
        assert history.status_code == 200, history.text
        assert "x-tether-source" not in history.headers  # the host's journal, not the index
        ended = [t for t in history.json()["turns"] if t["requestId"] == rid]
        assert [t["stopReason"] for t in ended] == ["end_turn"]


def test_a_frozen_host_never_hangs_a_client_past_the_first_byte_timeout(
    fleet: Fleet, project_dir: Path
) -> None:
    frozen = fleet.add_host("h1")
    a = fleet.session_on("h1", project_dir, "a")
    fleet.start_router()
    with fleet.client() as client:
        _turn(client, a, "echo warm")
        # A stream open through the router before the host freezes.
        streamed: list[tuple[str, Any]] = []
        opened = threading.Event()

        def follow() -> None:
            with fleet.client() as own, own.stream("GET", f"/v1/sessions/{a}/events?from=1") as st:
                opened.set()
                for event, data in parse_sse(st.iter_lines()):
                    if event != "comment":
                        streamed.append((event, data))

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        assert opened.wait(20)
        wait_for(lambda: bool(streamed), "the replay to reach the stream")
        frozen.proc.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            r = client.get(f"/v1/sessions/{a}/history")
            assert r.status_code == 504, r.text
            assert r.json()["code"] == "HOST_TIMEOUT"
            assert r.json()["retryable"] is True  # a read
            assert time.monotonic() - started < FIRST_BYTE + 5
            # Its membership has stopped beating too, once the TTL passes the router
            # refuses at once: an unresponsive host, never re-homed automatically.
            fleet.members["h1"].stop(deregister=False)
            wait_for(
                lambda: (
                    client.get(f"/v1/sessions/{a}/history").headers.get("x-tether-source")
                    == "index"
                ),
                "the router to call the silent host unavailable (reads from the index)",
            )
            r = client.post(f"/v1/sessions/{a}/prompt", json={"prompt": "echo no"})
            assert (r.status_code, r.json()["code"]) == (503, "HOST_UNAVAILABLE")
            # The stream that was open is ended too, with host_lost: a frozen host sends
            # no EOF, so the router gives the answer up once the host is unavailable.
            reader.join(30)
            assert not reader.is_alive()
            assert streamed[-1][0] == "host_lost"
            assert streamed[-1][1]["hostId"] == "h1"
            # Nothing re-homes it by itself: the session stays on its (frozen) host.
            listed = client.get("/v1/sessions").json()["sessions"]
            assert [(s["id"], s["hostId"], s["hostAvailable"]) for s in listed] == [
                (a, "h1", False)
            ]
        finally:
            frozen.proc.send_signal(signal.SIGCONT)


def test_a_stale_cached_host_saying_404_is_checked_against_the_index(
    fleet: Fleet, project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The router caches a session's host; when that host no longer knows the session
    (here: it was re-homed, closed and pruned there), its 404 makes the router read the
    index once more and answer 410 with ``rehomedTo`` instead."""
    from tether.fleet import host_table

    # Cached for the whole test, however slow the machine (the default is a few seconds).
    monkeypatch.setattr(host_table, "SESSION_CACHE_S", 600.0)
    h1 = fleet.add_host("h1")
    fleet.add_host("h2")
    a = fleet.session_on("h1", project_dir, "a")
    fleet.start_router()
    assert fleet.router is not None
    with fleet.client() as client:
        assert client.get(f"/v1/sessions/{a}").status_code == 200
        assert fleet.router.router.table.cached_session_host(a) == "h1"
        moved = fleet.index.rehome_session(a, "h2", fleet.members["h2"].epoch, force=True)
        assert h1.http.delete(f"/v1/sessions/{a}").status_code == 200
        pruned = subprocess.run(
            [sys.executable, "-m", "tether", "sessions", "prune", "--closed", "--all-agents"],
            env={**python_env(), "TETHER_HOME": str(h1.home)},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert pruned.returncode == 0, pruned.stderr
        assert h1.http.get(f"/v1/sessions/{a}").status_code == 404  # h1 knows it no more
        r = client.post(f"/v1/sessions/{a}/prompt", json={"prompt": "echo x"})
        assert r.status_code == 410, r.text
        assert (r.json()["code"], r.json()["rehomedTo"]) == ("SESSION_LOST", moved.session_id)
        # The same for a cached host that is gone (its process killed): a write to a
        # session re-homed since answers 410, not 503 HOST_UNAVAILABLE.
        h3 = fleet.add_host("h3")
        c = fleet.session_on("h3", project_dir, "c")
        table = fleet.router.router.table
        wait_for(lambda: table.host("h3") is not None, "the router to know h3")
        assert client.get(f"/v1/sessions/{c}").status_code == 200  # cached
        h3.proc.kill()  # the host process we started, by its pid
        h3.proc.wait(10)
        moved_c = fleet.index.rehome_session(c, "h2", fleet.members["h2"].epoch, force=True)
        r = client.post(f"/v1/sessions/{c}/prompt", json={"prompt": "echo x"})
        assert r.status_code == 410, r.text
        assert (r.json()["code"], r.json()["rehomedTo"]) == ("SESSION_LOST", moved_c.session_id)
        # A 404 for a session the index still has open is the host's to say, as it is.
        fresh = fleet.session_on("h1", project_dir, "fresh")
        assert client.get(f"/v1/sessions/{fresh}").status_code == 200  # cached
        routed = client.get(f"/v1/sessions/{fresh}/nothing-here")
        direct = h1.http.get(f"/v1/sessions/{fresh}/nothing-here")
        assert (routed.status_code, routed.json()) == (404, direct.json())


def test_an_acp_prompt_waits_for_its_turn_but_not_for_a_frozen_host(
    fleet: Fleet, project_dir: Path
) -> None:
    """An ACP ``session/prompt`` over HTTP is answered when its turn ends, so its POST
    has no flat first-byte timeout through the router; a host that freezes under it
    still answers the client 504 HOST_TIMEOUT once the host is known unavailable."""
    frozen = fleet.add_host("h1")
    fleet.start_router()
    server = "/v1/acp/frozen-1"

    def rpc(client: httpx.Client, rid: int, method: str, params: dict[str, Any]) -> Any:
        frame = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        return client.post(f"{server}?agent=mock", json=frame)

    with fleet.client() as client:
        assert rpc(client, 1, "initialize", {"protocolVersion": 1}).status_code == 200
        new = rpc(client, 2, "session/new", {"cwd": str(project_dir), "mcpServers": []})
        sid = new.json()["result"]["sessionId"]
        # Longer than the first-byte timeout: answered whole when the turn ends.
        text = [{"type": "text", "text": f"sleep {int(FIRST_BYTE * 2000)}"}]
        slow = rpc(client, 3, "session/prompt", {"sessionId": sid, "prompt": text})
        assert slow.status_code == 200, slow.text
        assert slow.json()["result"]["stopReason"] == "end_turn"
        frozen.proc.send_signal(signal.SIGSTOP)
        try:
            fleet.members["h1"].stop(deregister=False)  # its beats stop with it
            text = [{"type": "text", "text": "echo never"}]
            r = rpc(client, 4, "session/prompt", {"sessionId": sid, "prompt": text})
            assert r.status_code == 504, r.text
            assert (r.json()["code"], r.json()["retryable"]) == ("HOST_TIMEOUT", False)
        finally:
            frozen.proc.send_signal(signal.SIGCONT)
        assert frozen.http.delete(server).status_code == 204  # on the host: it beats no more
