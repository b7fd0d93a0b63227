"""Routes through routers beyond a session's REST: ACP over HTTP (``/v1/acp/{serverId}``)
placed on one host and reached through any router, and ``durable`` events on streams.

Every part is a real process (PostgreSQL, hosts, routers); the ACP client makes
sandbox-agent 0.4.2's requests, as ``tests/integration/test_serve_acp.py`` does against
one gateway."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acp_schema import schema_errors
from tests.conftest import python_env
from tests.fleet.test_fleet_e2e import (
    USER_TOKEN,
    Processes,
    create,
    procs,
    turn_text,
    wait_for,
)
from tests.integration._serve import Gateway
from tests.integration.test_serve_acp_http_client import SCRIPT, _check_envelopes, acp_http_client
from tether.fleet.index import FleetIndex

__all__ = ["acp_http_client", "procs"]

pytestmark = [
    pytest.mark.fleet,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(240),
]

SERVER = "/v1/acp/srv-fleet"


def _acp_events(lines: Iterator[str]) -> Iterator[tuple[str | None, str, Any]]:
    """(id, event, data) of an SSE stream; comments skipped, ``id`` None where absent."""
    event_id, event, data = None, "message", []
    for line in lines:
        if line == "":
            if data:
                yield event_id, event, json.loads("\n".join(data))
            event_id, event, data = None, "message", []
        elif line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])


def _rpc(router: Gateway, rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    frame = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    assert schema_errors(frame, "client") == []
    r = router.http.post(f"{SERVER}?agent=mock", json=frame)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    assert answer["id"] == rid
    assert schema_errors(answer, "agent", method) == []
    return answer


def _acp_host(dsn: str) -> str:
    with FleetIndex.connect(dsn) as index:
        host = index.acp_server_host("default", SERVER.rsplit("/", 1)[1])
    assert host is not None
    return host


def test_acp_over_http_through_two_routers_reaches_the_one_host_of_its_server(
    procs: Processes, project_dir: Path
) -> None:
    """A stream opened through one router before the server exists and the first POST
    through the other meet on one host; every request after that, through either
    router, reaches it; Last-Event-ID resumes through the other router; DELETE closes
    it; once its host is killed, requests get 503 HOST_UNAVAILABLE and a stream open
    on it ends with host_lost."""
    procs.host("h1")
    procs.host("h2")
    r1, r2 = procs.router(), procs.router()
    seen: list[tuple[str | None, str, Any]] = []
    connected, done = threading.Event(), threading.Event()

    def read() -> None:
        # sandbox-agent's client opens its stream together with its first POST.
        with r2.http.stream("GET", SERVER) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            connected.set()
            for item in _acp_events(r.iter_lines()):
                seen.append(item)
                if "over two routers" in json.dumps(item[2]):
                    break
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert connected.wait(60)
    assert _rpc(r1, 1, "initialize", {"protocolVersion": 1})["result"]["protocolVersion"] == 1
    host_id = _acp_host(procs.dsn)
    sid = _rpc(r2, 2, "session/new", {"cwd": str(project_dir), "mcpServers": []})["result"][
        "sessionId"
    ]
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "echo over two routers"}]}
    assert _rpc(r1, 3, "session/prompt", prompt)["result"]["stopReason"] == "end_turn"
    assert done.wait(60)
    ids = [int(i) for i, _, _ in seen if i is not None]
    assert ids == sorted(set(ids))
    assert all(schema_errors(frame, "agent") == [] for _, _, frame in seen)
    # The server and its agent session live on the one host it was placed on.
    other = "h2" if host_id == "h1" else "h1"
    owned = {s["id"] for s in procs.hosts[host_id].http.get("/v1/sessions").json()["sessions"]}
    assert procs.hosts[other].http.get("/v1/sessions").json()["sessions"] == []
    assert len(owned) == 1
    # Last-Event-ID resumes through the other router, no gap and no duplicate.
    with r1.http.stream("GET", SERVER, headers={"Last-Event-ID": str(ids[-2])}) as r:
        first = next(_acp_events(r.iter_lines()))
    assert first[0] == str(ids[-1])
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
    assert r2.http.post(SERVER, json=cancel).status_code == 202
    bad = r1.http.post(SERVER, content=b"{not json")
    assert bad.status_code == 400  # the host's own answer, relayed
    assert r2.http.delete(SERVER).status_code == 204
    assert r1.http.get(SERVER).status_code == 204  # closed, on its host
    # Created again (a POST after DELETE does, as on one host): a stream open on it ends
    # with host_lost when its host is killed, and requests get 503 at once.
    assert _rpc(r2, 4, "initialize", {"protocolVersion": 1})["result"]["protocolVersion"] == 1
    streamed: list[tuple[str | None, str, Any]] = []
    opened = threading.Event()

    def follow() -> None:
        with r1.http.stream("GET", SERVER) as r:
            opened.set()
            streamed.extend(_acp_events(r.iter_lines()))

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    assert opened.wait(60)
    doomed = procs.hosts[host_id]
    doomed.proc.kill()  # the host process we started, by its pid
    doomed.proc.wait(30)
    follower.join(60)
    assert not follower.is_alive()
    assert streamed[-1][1] == "host_lost"
    assert streamed[-1][2]["hostId"] == host_id
    r = r2.http.post(SERVER, json=cancel)
    assert (r.status_code, r.json()["code"], r.json()["retryable"]) == (
        503, "HOST_UNAVAILABLE", True,
    )  # fmt: skip


def test_racing_routers_place_one_acp_server_on_one_host(
    procs: Processes, project_dir: Path
) -> None:
    """Twenty first requests for one server id through two routers at once: one row,
    one host, and every request reached it."""
    procs.host("h1")
    procs.host("h2")
    routers = [procs.router(), procs.router()]
    barrier = threading.Barrier(20)

    def first(i: int) -> int:
        with httpx.Client(
            base_url=routers[i % 2].url,
            headers={"Authorization": f"Bearer {USER_TOKEN}"},
            timeout=60,
        ) as client:
            barrier.wait()
            frame = {"jsonrpc": "2.0", "id": i, "method": "initialize",
                     "params": {"protocolVersion": 1}}  # fmt: skip
            return client.post(f"{SERVER}?agent=mock", json=frame).status_code

    statuses: list[int] = []
    threads = [threading.Thread(target=lambda i=i: statuses.append(first(i))) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert statuses == [200] * 20
    host_id = _acp_host(procs.dsn)
    # The server is on that host alone: agent sessions made through either router are.
    for rid, router in enumerate(routers, start=100):
        _rpc(router, rid, "session/new", {"cwd": str(project_dir), "mcpServers": []})
    other = "h2" if host_id == "h1" else "h1"
    assert len(procs.hosts[host_id].http.get("/v1/sessions").json()["sessions"]) == 2
    assert procs.hosts[other].http.get("/v1/sessions").json()["sessions"] == []
    assert routers[0].http.delete(SERVER).status_code == 204
    assert procs.hosts[host_id].http.get(SERVER).status_code == 204  # closed there


def test_a_stream_through_a_router_reports_the_durable_seq_without_ids(
    procs: Processes, project_dir: Path
) -> None:
    """``event: durable`` with ``{"durableSeq": N}``: at the start of a stream, and as
    shipping advances, until it reaches the last seq of a finished turn; such events
    carry no id, so Last-Event-ID resume is exactly as without them."""
    procs.host("h1")
    router = procs.router()
    sid = create(router, project_dir, "durable")["id"]
    assert "first" in turn_text(router, sid, "echo first")
    # The host ships every 0.2 s: once some of the first turn is durable, a stream opened
    # now starts with a durable event (before that, the host knows no durable seq yet).
    wait_for(
        lambda: (router.http.get(f"/v1/sessions/{sid}").json().get("durableSeq") or 0) > 0,
        "the first turn to be shipped",
    )
    r = router.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "stream 20 5"})
    assert r.status_code == 202, r.text
    rid = r.json()["requestId"]
    seen: list[tuple[str | None, str, Any]] = []
    ended: int | None = None
    with router.http.stream("GET", f"/v1/sessions/{sid}/events?from=1") as st:
        for item in _acp_events(st.iter_lines()):
            seen.append(item)
            _, event, data = item
            if event == "message" and (data["kind"], data.get("requestId")) == ("turn_ended", rid):
                ended = data["seq"]
            if ended is not None and event == "durable" and data["durableSeq"] >= ended:
                break
    assert ended is not None
    durables = [(i, d["durableSeq"]) for i, e, d in seen if e == "durable"]
    assert all(i is None for i, _ in durables)  # no id: not a journal entry
    values = [n for _, n in durables]
    assert values == sorted(set(values))  # only when it advances
    assert seen[0][1] == "durable"  # at the start: the first turn was shipped already
    assert values[-1] >= ended
    messages = [(int(i), d["seq"]) for i, e, d in seen if e == "message" and i is not None]
    assert all(i == seq for i, seq in messages)
    # Resuming after any entry gives the next entry, whatever durable events came between.
    middle = messages[len(messages) // 2][0]
    with router.http.stream(
        "GET", f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": str(middle)}
    ) as st:
        nxt = next(d for _i, e, d in _acp_events(st.iter_lines()) if e == "message")
    assert nxt["seq"] == messages[len(messages) // 2 + 1][1]
    # The same on the host itself (the router adds nothing: it relays).
    host = procs.hosts["h1"]
    with host.http.stream("GET", f"/v1/sessions/{sid}/events?tail=0") as st:
        first = next(_acp_events(st.iter_lines()))
    assert first[:2] == (None, "durable")
    assert first[2]["durableSeq"] >= ended


@pytest.mark.realagents
def test_sandbox_agents_client_through_a_router_and_its_server_through_another(
    acp_http_client: Path, procs: Processes, project_dir: Path
) -> None:
    """sandbox-agent's own client (npm ``acp-http-client``, written by others) through
    one router: its whole life, as against one gateway; the server it made and closed is
    found, closed, through the other router on the one host it was placed on."""
    procs.host("h1")
    procs.host("h2")
    r1, r2 = procs.router(), procs.router()
    path = "/v1/acp/js-fleet"
    config = {
        "module": str(acp_http_client),
        "baseUrl": r1.url,
        "token": USER_TOKEN,
        "path": path,
        "cwd": str(project_dir),
    }
    r = subprocess.run(
        ["node", str(SCRIPT), json.dumps(config)],
        capture_output=True, text=True, timeout=180, env=python_env(), check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "error" not in out, out["error"]
    assert out["stops"] == {
        "echo": "end_turn",
        "stream": "end_turn",
        "permission": "end_turn",
        "cancelled": "cancelled",
    }
    assert out["texts"].count("hi") == 1  # no duplicate across POST and stream
    _check_envelopes(out["envelopes"])
    gets = [x for x in out["http"] if x["method"] == "GET"]
    assert [(x["status"], x["type"].split(";")[0]) for x in gets] == [(200, "text/event-stream")]
    assert out["http"][-1]["method"] == "DELETE"
    assert out["http"][-1]["status"] == 204
    assert r2.http.get(path).status_code == 204  # closed, on the host r2 routes it to
    with FleetIndex.connect(procs.dsn) as index:
        host_id = index.acp_server_host("default", "js-fleet")
    other = "h2" if host_id == "h1" else "h1"
    assert procs.hosts[other].http.get("/v1/sessions").json()["sessions"] == []
    assert out["sessionId"] in [
        s["id"] for s in procs.hosts[str(host_id)].http.get("/v1/sessions").json()["sessions"]
    ]


@pytest.mark.parametrize("header", ["Expect: 100-continue", "Transfer-Encoding: chunked"])
def test_curl_posting_a_long_prompt_through_a_router_is_answered_at_once(
    procs: Processes, project_dir: Path, header: str
) -> None:
    """A body sent chunked reaches the host as one: httptools hands the router a chunked
    body's content, which it passed on under the head's ``transfer-encoding: chunked``.

    ``Expect: 100-continue`` (curl's with a large body; many HTTP clients', always):
    the client waits (curl by default one second) for leave to send its body. The
    router says ``100 Continue`` itself. It passed the header on instead: the host's
    ``100 Continue`` came back as if it were the answer, the client waited for the real
    one for ever, and the real one was left in the router's pooled connection for the
    next request through it -- another client's."""
    procs.host("h1")
    router = procs.router()
    sid = create(router, project_dir, "curl")["id"]
    prompt = "echo " + "x" * 2000
    body = json.dumps({"prompt": prompt})
    done = subprocess.run(
        # Waiting for leave 30 s, longer than it may take at all (20 s): without the
        # router's 100 Continue, curl fails.
        ["curl", "-sS", "--max-time", "20", "--expect100-timeout", "30",
         "-H", f"Authorization: Bearer {USER_TOKEN}", "-H", header,
         "-H", "Content-Type: application/json", "--data-binary", "@-", "-w", "\\n%{http_code}",
         f"{router.url}/v1/sessions/{sid}/prompt?wait=true"],
        input=body, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer, _, status = done.stdout.rpartition("\n")
    assert status == "200", done.stdout
    assert json.loads(answer)["stopReason"] == "end_turn"
    # The router's pooled connection to the host is in step: the next request gets
    # its own answer.
    assert "after" in turn_text(router, sid, "echo after")
