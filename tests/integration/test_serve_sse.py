"""``GET /v1/sessions/{id}/events``: the journal as Server-Sent Events, against a real
gateway. Resume without gap or duplicate, session_ended once, heartbeats, a slow client
dropped with its last seq, and a gateway restart that loses nothing."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from tests.integration._serve import Gateway, gateway, parse_sse, spawn_gateway

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = pytest.mark.integration
__all__ = ["gateway"]


def exported(gw: Gateway, sid: str, upto: int = 0) -> list[dict[str, Any]]:
    """The stored journal, once it holds seq ``upto``: an owner relays a batch of
    entries to its watchers just before it commits them, so a fast client can have
    seen the last ones a moment before they are stored."""
    deadline = time.monotonic() + 10
    while True:
        text = gw.http.get(f"/v1/sessions/{sid}/export").text
        entries = [json.loads(line) for line in text.splitlines()]
        if (entries and entries[-1]["seq"] >= upto) or time.monotonic() > deadline:
            return entries
        time.sleep(0.05)


def test_resume_with_last_event_id_has_no_gap_and_no_duplicate(
    gateway: Gateway, project_dir: Path
) -> None:
    """A client that leaves mid-turn and comes back with Last-Event-ID sees every entry
    of the turn exactly once, in seq order, each event's id equal to its seq."""
    sid = gateway.ensure(project_dir)
    turn = gateway.prompt(sid, "stream 3000 resume")
    first: list[dict[str, Any]] = []
    for event, data in gateway.events(sid, query=f"?from={turn['fromSeq']}"):
        assert event == "message"
        first.append(data)
        if len(first) == 500:
            break  # the client goes away mid-turn
    last = first[-1]["seq"]
    rest = []
    for event, data in gateway.events(sid, last_id=last):
        assert event == "message"
        rest.append(data)
        if data["kind"] == "turn_ended" and data["requestId"] == turn["requestId"]:
            break
    seen = [e["seq"] for e in first + rest]
    assert seen == list(range(seen[0], seen[0] + len(seen)))  # gapless, no duplicate
    stored = {e["seq"]: e for e in exported(gateway, sid, upto=seen[-1])}
    assert all(stored[e["seq"]] == e for e in first + rest)  # the journal's own entries
    chunks = [e for e in first + rest if e["kind"] == "acp" and "resume" in json.dumps(e["frame"])]
    assert len(chunks) >= 3000


def test_session_ended_is_delivered_once_and_ends_the_stream(
    gateway: Gateway, project_dir: Path
) -> None:
    """Closing the session delivers session_ended once, then the stream ends; asking
    again after it is 204 (a browser's EventSource stops reconnecting)."""
    sid = gateway.ensure(project_dir)
    turn = gateway.prompt(sid, "echo before the end")
    gateway.until_turn_end(sid, turn["requestId"], query=f"?from={turn['fromSeq']}")
    events: list[tuple[str, Any]] = []
    closed = False
    for event, data in gateway.events(sid, query="?tail=0&heartbeat=0.2"):
        events.append((event, data))
        if not closed:
            assert gateway.http.delete(f"/v1/sessions/{sid}").status_code == 200
            closed = True
    ends = [d for e, d in events if e == "message" and d["kind"] == "session_ended"]
    assert len(ends) == 1
    assert events[-1] == ("message", ends[0])  # nothing after it, and the stream ended
    r = gateway.http.get(
        f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": str(ends[0]["seq"])}
    )
    assert r.status_code == 204
    replayed = [d for e, d in gateway.events(sid, query="?from=1") if e == "message"]
    assert [d["seq"] for d in replayed] == [e["seq"] for e in exported(gateway, sid)]
    assert sum(d["kind"] == "session_ended" for d in replayed) == 1


def test_heartbeats_keep_an_idle_stream_open(gateway: Gateway, project_dir: Path) -> None:
    """With nothing to send, a comment line goes out every heartbeat interval."""
    sid = gateway.ensure(project_dir)
    beats = 0
    for event, _data in gateway.events(sid, query="?heartbeat=0.1"):
        if event == "comment":
            beats += 1
            if beats == 3:
                break
    assert beats == 3


def wait_for_turn(gw: Gateway, sid: str, rid: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        turns = gw.http.get(f"/v1/sessions/{sid}/history").json()["turns"]
        if any(t["requestId"] == rid and t.get("stopReason") for t in turns):
            return
        time.sleep(0.1)
    raise AssertionError("the turn did not end")


def _raw_sse(url: str, token: str, path: str) -> socket.socket:
    """A client that sends the request and then reads nothing (a tiny receive buffer)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    return sock


def test_a_client_that_falls_behind_is_dropped_with_its_last_seq(
    tether_home: Path, project_dir: Path
) -> None:
    """A client that stops reading while a big turn streams gets ``lagged`` with the
    last seq it was sent and is disconnected; the turn finishes regardless, and a
    reconnect from that seq replays the rest from the journal without a gap."""
    gw = spawn_gateway(tether_home, env={"TETHER_SERVE_RING": "64"})
    try:
        sid = gw.ensure(project_dir)
        slow = _raw_sse(gw.url, gw.token, f"/v1/sessions/{sid}/events?tail=0")
        fast_turn = gw.prompt(sid, "stream 20000 lagging")
        # The turn ends although the slow client reads nothing.
        wait_for_turn(gw, sid, fast_turn["requestId"])
        raw = b""
        slow.settimeout(30)
        while b"event: lagged" not in raw or not raw.endswith(b"\r\n\r\n"):
            chunk = slow.recv(65536)
            if not chunk:
                break
            raw += chunk
        slow.close()
        assert b"event: lagged" in raw
        body = raw.split(b"\r\n\r\n", 1)[1].decode()
        # De-chunk loosely: SSE lines survive; chunk-size lines are hex and never "id:".
        lines = body.replace("\r\n", "\n").split("\n")
        events = list(parse_sse(iter(lines)))
        ids = [d["seq"] for e, d in events if e == "message"]
        lagged = [d for e, d in events if e == "lagged"]
        assert len(lagged) == 1
        assert lagged[0]["lastSeq"] == ids[-1]
        rest = []
        for _event, data in gw.events(sid, last_id=lagged[0]["lastSeq"]):
            rest.append(data)
            if data["kind"] == "turn_ended":
                break
        seen = ids + [d["seq"] for d in rest]
        assert seen == list(range(seen[0], seen[0] + len(seen)))
        metrics = gw.http.get("/metrics").text
        assert "tether_serve_sse_lagged_total 1" in metrics
    finally:
        gw.close_all()
        gw.stop()


def test_a_restarted_gateway_resumes_the_stream(tether_home: Path, project_dir: Path) -> None:
    """The gateway keeps no state: stop it mid-turn, start another, resume from the last
    id seen, and nothing is missing or repeated."""
    first = spawn_gateway(tether_home)
    sid = first.ensure(project_dir)
    turn = first.prompt(sid, "stream 200 restart ; sleep 1500 ; stream 200 after")
    seen: list[dict[str, Any]] = []
    for event, data in first.events(sid, query=f"?from={turn['fromSeq']}"):
        assert event == "message"
        seen.append(data)
        if len(seen) == 100:
            break
    first.stop()
    second = spawn_gateway(tether_home)
    try:
        for _event, data in second.events(sid, last_id=seen[-1]["seq"]):
            seen.append(data)
            if data["kind"] == "turn_ended":
                break
        seqs = [e["seq"] for e in seen]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert seen[-1]["stopReason"] == "end_turn"
    finally:
        second.close_all()
        second.stop()
