"""The fleet end to end, every part a real process: PostgreSQL, hosts (`tether serve
--fleet-index`) with their own homes, and routers (`tether serve --router`).

Sessions are created, prompted, listed and closed through routers; racing ensures of one
name through two routers make one session and one owner; every committed journal entry
reaches the index."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import _proctree
from tests.fleet import _pidns
from tests.integration._serve import Gateway, parse_sse, spawn_gateway
from tether.fleet.index import FleetIndex

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
# Each test starts PostgreSQL databases, hosts, routers, owners and agents: generous on a
# loaded machine (a harness bound, not a performance figure).
pytestmark = [
    pytest.mark.fleet,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(240),
]

USER_TOKEN = "user-token-of-the-routers-0123456789"
# Hosts run in pid namespaces of their own where the machine allows (tests/fleet/_pidns.py).
PIDNS = _pidns.available() is None
FLEET_TOKEN = "fleet-credential-0123456789abcdef"


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Processes:
    def __init__(self, dsn: str, base: Path) -> None:
        self.dsn = dsn
        self.base = base
        self.env = {"TETHER_FLEET_INDEX": dsn, "TETHER_FLEET_TOKEN": FLEET_TOKEN}
        self.hosts: dict[str, Gateway] = {}
        self.routers: list[Gateway] = []

    def host(self, host_id: str, *labels: str) -> Gateway:
        home = self.base / host_id
        home.mkdir()
        flags = [f"--label={label}" for label in labels]
        gw = spawn_gateway(home, "--host-id", host_id, *flags, env=self.env, pidns=PIDNS)
        gw.token = FLEET_TOKEN
        gw.http.headers["Authorization"] = f"Bearer {FLEET_TOKEN}"
        self.hosts[host_id] = gw
        return gw

    def router(self) -> Gateway:
        home = self.base / f"router{len(self.routers)}"
        home.mkdir()
        gw = spawn_gateway(home, "--router", "--token", USER_TOKEN, env=self.env)
        gw.token = USER_TOKEN
        gw.http.headers["Authorization"] = f"Bearer {USER_TOKEN}"
        self.routers.append(gw)
        return gw

    def stop(self) -> None:
        for router in self.routers:
            router.stop()
        for host_id, gw in self.hosts.items():
            try:
                if gw.proc.poll() is not None or getattr(gw.proc, "killed", False):
                    # A host the test killed comes back on its storage to close what its
                    # owners still run (owners outlive a gateway, as they should; in a
                    # pid namespace of its own, its death ended them with it).
                    gw.stop()
                    gw = spawn_gateway(gw.home, "--host-id", host_id, env=self.env, pidns=PIDNS)
                    gw.http.headers["Authorization"] = f"Bearer {FLEET_TOKEN}"
                gw.close_all()
            finally:
                gw.stop()


@pytest.fixture
def procs(fleet_dsn: str, tmp_path: Path) -> Iterator[Processes]:
    base = tmp_path / "fleet"
    base.mkdir()
    p = Processes(fleet_dsn, base)
    try:
        yield p
    finally:
        p.stop()


def create(router: Gateway, cwd: Path, name: str, **extra: Any) -> dict[str, Any]:
    r = router.http.post(
        "/v1/sessions", json={"agent": "mock", "cwd": str(cwd), "name": name, **extra}
    )
    assert r.status_code in (200, 201), r.text
    return dict(r.json())


def turn_text(router: Gateway, sid: str, text: str) -> str:
    r = router.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": text})
    assert r.status_code == 202, r.text
    rid = r.json()["requestId"]
    chunks = []
    with router.http.stream("GET", f"/v1/sessions/{sid}/events?from=1") as stream:
        for event, data in parse_sse(stream.iter_lines()):
            if event != "message":
                continue
            update = (data.get("frame") or {}).get("params", {}).get("update", {})
            if data.get("requestId") == rid and update.get("sessionUpdate") == (
                "agent_message_chunk"
            ):
                chunks.append(update["content"].get("text", ""))
            if data["kind"] == "turn_ended" and data.get("requestId") == rid:
                return "".join(chunks)
    raise AssertionError("the stream ended before the turn did")


def test_sessions_are_placed_prompted_listed_and_closed_through_routers(
    procs: Processes, project_dir: Path
) -> None:
    procs.host("h1", "zone=a")
    procs.host("h2", "zone=b")
    r1, r2 = procs.router(), procs.router()
    a = create(r1, project_dir, "a", labels={"zone": "a"})
    b = create(r2, project_dir, "b", labels={"zone": "b"})
    assert a["created"]
    assert b["created"]
    # Each lives on the host its labels asked for, under its fleet id.
    assert procs.hosts["h1"].http.get(f"/v1/sessions/{a['id']}").status_code == 200
    assert procs.hosts["h2"].http.get(f"/v1/sessions/{b['id']}").status_code == 200
    assert procs.hosts["h2"].http.get(f"/v1/sessions/{a['id']}").status_code == 404
    # Either router reaches either session.
    assert "via r2" in turn_text(r2, a["id"], "echo via r2")
    assert "via r1" in turn_text(r1, b["id"], "echo via r1")
    listed = {s["id"]: s for s in r1.http.get("/v1/sessions").json()["sessions"]}
    assert (listed[a["id"]]["hostId"], listed[b["id"]]["hostId"]) == ("h1", "h2")
    assert all(s["hostAvailable"] for s in listed.values())
    # Every committed entry reaches the index.
    with FleetIndex.connect(procs.dsn) as index:
        host_history = procs.hosts["h1"].http.get(f"/v1/sessions/{a['id']}/export")
        assert host_history.status_code == 200
        local = [line for line in host_history.text.splitlines() if line.strip()]
        wait_for(
            lambda: (
                (index.session(a["id"]) or object()).durable_seq  # type: ignore[attr-defined]
                >= max(int(__import__("json").loads(x)["seq"]) for x in local)
            ),
            "the journal to be shipped",
        )
        shipped = [x.decode() for c in index.shipped(a["id"]) for x in c.data.splitlines()]
        assert shipped[: len(local)] == local
        # The session's record through the router says how much is durable off-host.
        last_local = int(json.loads(local[-1])["seq"])
        wait_for(
            lambda: (
                (r1.http.get(f"/v1/sessions/{a['id']}").json().get("durableSeq") or 0) >= last_local
            ),
            "the host to report the durable seq",
        )
        # Closing through a router ends the session on its host and in the index.
        assert r2.http.delete(f"/v1/sessions/{a['id']}").status_code == 200
        wait_for(lambda: (index.session(a["id"]) or object()).state == "closed",  # type: ignore[attr-defined]
                 "the index to learn the session closed")  # fmt: skip
    # The router that closed it looks again and finds it closed in the index.
    gone = r2.http.post(f"/v1/sessions/{a['id']}/prompt", json={"prompt": "echo x"})
    assert (gone.status_code, gone.json()["code"]) == (410, "SESSION_CLOSED")
    # Another router may still route by its cache (a few seconds) to the host, which
    # says the session is gone in its own words; either way nothing runs.
    other = r1.http.post(f"/v1/sessions/{a['id']}/prompt", json={"prompt": "echo x"})
    assert other.status_code in (404, 410), other.text


def test_racing_ensures_through_two_routers_make_one_session_and_one_owner(
    procs: Processes, project_dir: Path
) -> None:
    procs.host("h1")
    procs.host("h2")
    routers = [procs.router(), procs.router()]
    barrier = threading.Barrier(20)

    def ensure(i: int) -> dict[str, Any]:
        with httpx.Client(
            base_url=routers[i % 2].url,
            headers={"Authorization": f"Bearer {USER_TOKEN}"},
            timeout=60,
        ) as client:
            barrier.wait()
            r = client.post(
                "/v1/sessions", json={"agent": "mock", "cwd": str(project_dir), "name": "race"}
            )
            assert r.status_code in (200, 201), r.text
            return dict(r.json())

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(ensure, range(20)))
    assert len({r["id"] for r in results}) == 1
    assert len({r["ownerPid"] for r in results}) == 1
    assert sum(bool(r["created"]) for r in results) == 1
    sid = results[0]["id"]
    holders = [
        h for h, gw in procs.hosts.items() if gw.http.get(f"/v1/sessions/{sid}").status_code == 200
    ]
    assert len(holders) == 1


def test_a_router_refuses_users_without_its_token_and_hosts_refuse_users(
    procs: Processes, project_dir: Path
) -> None:
    host = procs.host("h1")
    router = procs.router()
    s = create(router, project_dir, "t")
    assert httpx.get(f"{router.url}/v1/sessions").status_code == 401
    # A host takes only the fleet credential: the users' token is not it.
    r = httpx.get(
        f"{host.url}/v1/sessions/{s['id']}", headers={"Authorization": f"Bearer {USER_TOKEN}"}
    )
    assert r.status_code == 401
    assert os.environ.get("TETHER_FLEET_TOKEN") is None  # the test never leaked it to itself


def test_a_lost_hosts_history_is_read_from_the_index_and_it_comes_back(
    procs: Processes, project_dir: Path
) -> None:
    doomed = procs.host("h1")
    router = procs.router()
    s = create(router, project_dir, "kept")
    sid = s["id"]
    assert "first words" in turn_text(router, sid, "echo first words")
    local = [x for x in doomed.http.get(f"/v1/sessions/{sid}/export").text.splitlines() if x]
    last = int(json.loads(local[-1])["seq"])
    with FleetIndex.connect(procs.dsn) as index:
        wait_for(lambda: _durable(index, sid) >= last, "the journal to be shipped")
    local_http = doomed.http.get(f"/v1/sessions/{sid}").status_code
    assert local_http == 200
    doomed.proc.kill()  # the host process we started, by its pid
    doomed.stop()  # reaps it, closes our client of it
    # Writes: refused at once, nothing sent, retryable.
    r = router.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "echo lost"})
    assert (r.status_code, r.json()["code"], r.json()["retryable"]) == (
        503, "HOST_UNAVAILABLE", True,
    )  # fmt: skip
    # Reads: from what the host shipped, saying so; no gap and no duplicate.
    exported = router.http.get(f"/v1/sessions/{sid}/export")
    assert exported.status_code == 200
    assert exported.headers["x-tether-source"] == "index"
    # Everything shipped, at least the turn (its owner, which outlives the gateway, may
    # have journaled a little more before the host died): in order, no gap, no duplicate.
    shipped = [x for x in exported.text.splitlines() if x]
    durable = int(exported.headers["x-tether-durable-seq"])
    assert durable >= last
    assert shipped[: len(local)] == local
    assert int(json.loads(shipped[-1])["seq"]) == durable
    history = router.http.get(f"/v1/sessions/{sid}/history").json()
    assert [t["preview"] for t in history["turns"]] == ["echo first words"]
    assert history["turns"][0]["stopReason"] == "end_turn"
    assert history["source"] == "index"
    transcript = router.http.get(f"/v1/sessions/{sid}/transcript").json()
    assert "first words" in json.dumps(transcript["turns"])
    events = []
    with router.http.stream(
        "GET", f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": "2"}
    ) as st:
        events = list(parse_sse(st.iter_lines()))
    seqs = [d["seq"] for e, d in events if e == "message"]
    assert seqs == [int(json.loads(x)["seq"]) for x in shipped if int(json.loads(x)["seq"]) > 2]
    assert events[-1][0] == "host_lost"
    assert events[-1][1]["durableSeq"] == durable
    # The host comes back on its storage under the same id: it re-adopts its session and
    # the next prompt is served there.
    back = spawn_gateway(doomed.home, "--host-id", "h1", env=procs.env, pidns=PIDNS)
    back.token = FLEET_TOKEN
    back.http.headers["Authorization"] = f"Bearer {FLEET_TOKEN}"
    procs.hosts["h1"] = back
    wait_for(
        lambda: (
            router.http.post(
                f"/v1/sessions/{sid}/prompt", json={"prompt": "echo probe"}
            ).status_code
            == 202
        ),
        "the router to route to the host again",
    )
    assert "back again" in turn_text(router, sid, "echo back again")


def _durable(index: FleetIndex, sid: str) -> int:
    row = index.session(sid)
    return -1 if row is None else row.durable_seq


def test_rehome_is_explicit_journaled_and_the_old_host_gives_the_session_up(
    procs: Processes, project_dir: Path
) -> None:
    lost = procs.host("h1", "zone=a")
    procs.host("h2", "zone=b")
    router = procs.router()
    s = create(router, project_dir, "moved", labels={"zone": "a"})
    sid = s["id"]
    assert "remember the number 42" in turn_text(router, sid, "echo remember the number 42")
    local = [x for x in lost.http.get(f"/v1/sessions/{sid}/export").text.splitlines() if x]
    last = int(json.loads(local[-1])["seq"])
    with FleetIndex.connect(procs.dsn) as index:
        wait_for(lambda: _durable(index, sid) >= last, "the journal to be shipped")
    owner = _seen_from_here(lost, lost.http.get(f"/v1/sessions/{sid}").json()["ownerPid"])
    assert _environ(owner).get("TETHER_HOST_ID") == "h1"
    owner_start = _starttime(owner)
    # While its host is up, a session is not lost: re-homing it is refused.
    refused = router.http.post(f"/v1/sessions/{sid}/rehome", json={})
    assert (refused.status_code, refused.json()["code"]) == (409, "HOST_AVAILABLE")
    lost.proc.kill()  # the host process we started, by its pid
    lost.stop()
    with FleetIndex.connect(procs.dsn) as index:
        # What its host shipped before it died (at least the turn; its owner may have
        # journaled a little more meanwhile, shipped or not).
        durable = _durable(index, sid)
    assert durable >= last
    moved = router.http.post(f"/v1/sessions/{sid}/rehome", json={"replay": True})
    assert moved.status_code == 201, moved.text
    new = moved.json()
    assert (new["rehomedFrom"], new["fromHost"], new["hostId"]) == (sid, "h1", "h2")
    assert new["durableSeq"] == durable
    assert new["id"] != sid
    # The old id says where the conversation went; it is not silently served.
    gone = router.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "echo x"})
    assert (gone.status_code, gone.json()["rehomedTo"]) == (410, new["id"])
    # The new session's journal says so first, then the transcript replayed as context.
    entries = [
        json.loads(x)
        for x in router.http.get(f"/v1/sessions/{new['id']}/export").text.splitlines()
        if x
    ]
    restarted = [e for e in entries if e["kind"] == "conversation_restarted"]
    assert len(restarted) == 1
    assert (restarted[0]["fromSession"], restarted[0]["durableSeq"]) == (sid, durable)
    wait_for(
        lambda: any(
            t["stopReason"]
            for t in router.http.get(f"/v1/sessions/{new['id']}/history").json()["turns"]
        ),
        "the replayed context's turn to end",
    )
    turns = router.http.get(f"/v1/sessions/{new['id']}/history").json()["turns"]
    assert turns[0]["requestId"] == new["replayRequestId"]
    assert turns[0]["preview"].startswith("[Tether] This conversation was restarted")
    assert "next turn" in turn_text(router, new["id"], "echo next turn")
    with FleetIndex.connect(procs.dsn) as index:
        old_row, new_row = index.session(sid), index.session(new["id"])
        assert old_row is not None
        assert new_row is not None
        assert (old_row.state, old_row.rehomed_to) == ("lost", new["id"])
        assert (new_row.state, new_row.restarted_from, new_row.host_id) == ("open", sid, "h2")
    if PIDNS:
        # The host was its pid namespace's first process: the kernel ended the whole
        # namespace with it (a lost machine), owner included.
        assert _starttime(owner) is None
    else:
        # Nothing signalled the old host's processes from elsewhere: its owner (which
        # outlives its gateway) still runs, the same process, until its own host ends it.
        assert _starttime(owner) == owner_start
    assert all(
        _environ(pid).get("TETHER_HOST_ID") == "h2"
        for pid in _proctree.live_descendants()
        if _environ(pid).get("TETHER_HOST_ID") not in (None, "h1")
    )
    # The old host comes back on its storage: it no longer owns that session, and closes
    # it by its own proof (its owner had outlived the gateway, or died with its
    # namespace).
    back = spawn_gateway(lost.home, "--host-id", "h1", env=procs.env, pidns=PIDNS)
    back.http.headers["Authorization"] = f"Bearer {FLEET_TOKEN}"
    procs.hosts["h1"] = back
    wait_for(
        lambda: back.http.get(f"/v1/sessions/{sid}").json().get("state") == "closed",
        "the old host to close the superseded session",
    )


def test_each_hosts_processes_live_where_only_that_host_can_reach_them(
    procs: Processes, project_dir: Path
) -> None:
    """Three hosts, an agent running on each: every process a host started carries its
    host id, and -- where the machine allows pid namespaces -- lives in that host's
    namespace and no other, so no host can even name another host's processes."""
    hosts = {h: procs.host(h, f"zone={h}") for h in ("h1", "h2", "h3")}
    router = procs.router()
    for h in hosts:
        s = create(router, project_dir, f"on-{h}", labels={"zone": h})
        assert f"ran on {h}" in turn_text(router, s["id"], f"echo ran on {h}")
    by_host: dict[str, set[int]] = {h: set() for h in hosts}
    for pid in _proctree.live_descendants():
        host_id = _environ(pid).get("TETHER_HOST_ID")
        if host_id is not None:
            by_host[host_id].add(pid)
    # Each host's session: an owner, a keeper and an agent, all labelled by the host.
    assert all(len(pids) >= 3 for pids in by_host.values()), by_host
    for h, gw in hosts.items():
        by_host[h].add(gw.proc.pid)  # and the host process itself
    if not PIDNS:
        return  # separate homes and host ids only (tests/fleet/_pidns.py says why)
    namespaces = {h: gw.proc.namespace for h, gw in hosts.items()}
    assert len(set(namespaces.values())) == len(hosts)
    for h, pids in by_host.items():
        seen = {os.stat(f"/proc/{pid}/ns/pid").st_ino for pid in pids}
        assert seen == {namespaces[h]}, (h, seen, namespaces)


def test_closing_a_parent_closes_its_children_on_other_hosts_and_the_dashboard_is_served(
    procs: Processes, project_dir: Path
) -> None:
    procs.host("h1", "zone=a")
    procs.host("h2", "zone=b")
    router = procs.router()
    parent = create(router, project_dir, "parent", labels={"zone": "a"})
    near = create(router, project_dir, "near", parentSessionId=parent["id"])
    far = create(router, project_dir, "far", parentSessionId=parent["id"], labels={"zone": "b"})
    listed = {s["id"]: s for s in router.http.get("/v1/sessions").json()["sessions"]}
    # A child goes next to its parent unless its labels say otherwise.
    assert listed[near["id"]]["hostId"] == "h1"
    assert listed[far["id"]]["hostId"] == "h2"
    assert listed[far["id"]]["parentSessionId"] == parent["id"]
    assert router.http.delete(f"/v1/sessions/{parent['id']}").status_code == 200
    for sid, host in ((near["id"], "h1"), (far["id"], "h2")):
        record = procs.hosts[host].http.get(f"/v1/sessions/{sid}").json()
        assert record["state"] == "closed", (host, record)
    # The dashboard and the API description come through the router too.
    page = httpx.get(f"{router.url}/ui/")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert router.http.get("/v1/openapi.json").json()["openapi"].startswith("3.")


def _seen_from_here(host: Gateway, pid: int) -> int:
    """A pid a host reports, as this test sees it (the host may run in a pid namespace
    of its own: tests/fleet/_pidns.py)."""
    if isinstance(host.proc, _pidns.NamespacedHost):
        outer = host.proc.outside(pid)
        assert outer is not None, f"no process {pid} in {host.home.name}'s namespace"
        return outer
    return pid


def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _starttime(pid: int) -> int | None:
    state = _proctree.live_descendants().get(pid)
    return None if state is None else state[1]


def test_a_router_dies_and_the_stream_resumes_through_another_with_no_gap_or_duplicate(
    procs: Processes, project_dir: Path
) -> None:
    host = procs.host("h1")
    r1, r2 = procs.router(), procs.router()
    s = create(r1, project_dir, "streamed")
    sid = s["id"]
    turn_text(r1, sid, "stream 40 5")  # forty chunks, 5 ms apart
    seen: list[int] = []
    with r1.http.stream("GET", f"/v1/sessions/{sid}/events?from=1") as st:
        for event, data in parse_sse(st.iter_lines()):
            if event == "message":
                seen.append(data["seq"])
            if len(seen) == 10:
                r1.proc.kill()  # the router we started, by its pid, mid-stream
                break
    r1.stop()
    procs.routers.remove(r1)
    with r2.http.stream(
        "GET", f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": str(seen[-1])}
    ) as st:
        total = [int(json.loads(x)["seq"]) for x in host.http.get(
            f"/v1/sessions/{sid}/export").text.splitlines() if x]  # fmt: skip
        for event, data in parse_sse(st.iter_lines()):
            if event == "message":
                seen.append(data["seq"])
            if seen[-1] >= total[-1]:
                break
    assert seen == total  # every entry once, in order, across the two routers


def test_a_host_fenced_while_running_closes_its_sessions_locally(
    procs: Processes, project_dir: Path
) -> None:
    """A router fences a host it thinks frozen; the host, still running, finds itself
    superseded at its next beat, stops, and closes its fleet sessions by its own proof:
    its owner ends, and nothing serves them there again."""
    host = procs.host("h1")
    router = procs.router()
    sid = create(router, project_dir, "fenced")["id"]
    assert "before" in turn_text(router, sid, "echo before")
    with FleetIndex.connect(procs.dsn) as index:
        row = index.host("h1")
        assert row is not None
        assert index.fence_host("h1", row.epoch, "thought frozen") == row.epoch + 1
    wait_for(
        lambda: host.http.get(f"/v1/sessions/{sid}").json().get("state") == "closed",
        "the fenced host to close its session",
    )
    health = host.http.get("/v1/health").json()["fleet"]
    assert health["superseded"] is True
