"""PostgreSQL stopped while a fleet serves: hosts and routers as real processes, the
index's server stopped and started again by the pid the harness started (its own
server, so no other test is disturbed)."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fleet._pg import PostgresServer
from tests.fleet.test_fleet_e2e import Processes, create, turn_text, wait_for
from tests.integration._serve import Gateway, parse_sse
from tether.fleet.host_table import SESSION_CACHE_S
from tether.fleet.index import FleetIndex
from tether.fleet.router import DEFAULT_TTL_S

pytestmark = [
    pytest.mark.fleet,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]


@pytest.fixture
def own_server(postgres: PostgresServer) -> Iterator[PostgresServer]:
    base = Path(tempfile.mkdtemp(prefix="tether-test-pg-"))
    server = PostgresServer(base / "cluster", postgres.bindir)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def _index_up(gw: Gateway) -> Any:
    return gw.http.get("/v1/health").json()["fleet"]["indexUp"]


def _last_seq(host: Gateway, sid: str) -> int:
    lines = [x for x in host.http.get(f"/v1/sessions/{sid}/export").text.splitlines() if x]
    return int(json.loads(lines[-1])["seq"])


def _durable(dsn: str, sid: str) -> int:
    with FleetIndex.connect(dsn) as index:
        row = index.session(sid)
    return -1 if row is None else row.durable_seq


def test_postgres_down_with_routers_and_hosts_running(
    own_server: PostgresServer, tmp_path: Path, project_dir: Path
) -> None:
    """While the index is down: sessions the routers know keep routing and prompting
    (past the session cache and the heartbeat TTL too), creation answers 503
    INDEX_UNAVAILABLE, hosts report indexUp false. Once it is back: hosts beat and ship
    again, the durable seq catches up (in the index and on a stream), creation works."""
    dsn = own_server.create_database("down")
    (tmp_path / "fleet").mkdir()
    procs = Processes(dsn, tmp_path / "fleet")
    try:
        hosts = [procs.host("h1", "zone=a"), procs.host("h2", "zone=b")]
        r1, r2 = procs.router(), procs.router()
        a = create(r1, project_dir, "a", labels={"zone": "a"})["id"]
        b = create(r2, project_dir, "b", labels={"zone": "b"})["id"]
        for router in (r1, r2):
            for sid in (a, b):
                assert "warm" in turn_text(router, sid, "echo warm")
        own_server.stop()  # the postmaster the harness started, by its pid
        wait_for(lambda: not any(_index_up(h) for h in hosts), "the hosts to see the index down")
        wait_for(
            lambda: not any(r.http.get("/v1/health").json()["indexUp"] for r in (r1, r2)),
            "the routers to see the index down",
        )
        # Past the session cache and the heartbeat TTL: what the routers read last stands
        # (the hosts' beats cannot land either).
        time.sleep(max(SESSION_CACHE_S, DEFAULT_TTL_S) + 1)
        for router in (r1, r2):
            for sid in (a, b):
                assert "still routed" in turn_text(router, sid, "echo still routed")
        r = r1.http.post(
            "/v1/sessions", json={"agent": "mock", "cwd": str(project_dir), "name": "new"}
        )
        assert (r.status_code, r.json()["code"], r.json()["retryable"]) == (
            503, "INDEX_UNAVAILABLE", True,
        )  # fmt: skip
        last = {a: _last_seq(hosts[0], a), b: _last_seq(hosts[1], b)}
        assert all(h.http.get("/v1/health").json()["fleet"]["lastError"] for h in hosts)

        own_server.start()  # the same cluster, the same data
        wait_for(lambda: all(_index_up(h) for h in hosts), "the hosts to beat again")
        for sid in (a, b):
            wait_for(lambda sid=sid: _durable(dsn, sid) >= last[sid], "shipping to catch up")
        # Their beats older than the TTL until the next lands: a second at most.
        for router in (r1, r2):
            wait_for(
                lambda router=router: router.http.get("/v1/health").json()["hostsAvailable"] == 2,
                "the routers to see the hosts beating",
            )
        # A stream through a router reports it too.
        with r2.http.stream("GET", f"/v1/sessions/{a}/events?tail=0") as st:
            durable = next(d for e, d in parse_sse(st.iter_lines()) if e == "durable")
        assert durable["durableSeq"] >= last[a]
        created = create(r1, project_dir, "after")
        assert "after" in turn_text(r2, created["id"], "echo after")
    finally:
        procs.stop()
