"""ACP over HTTP (``/v1/acp/{serverId}``) on a real ``tether serve``, with a raw HTTP
client making sandbox-agent 0.4.2's requests (its npm ``acp-http-client`` is not
installed here): POST in, answers and 202s, SSE out with ids and Last-Event-ID, DELETE."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.acp_schema import schema_errors
from tests.integration._journal import count, journal_when
from tests.integration._serve import Gateway, gateway

__all__ = ["gateway"]

pytestmark = pytest.mark.integration
SERVER = "/v1/acp/srv-1"


def _events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(id, frame) of an SSE stream (comments skipped)."""
    event_id, data = None, []
    for line in lines:
        if line == "":
            if data and event_id is not None:
                yield event_id, json.loads("\n".join(data))
            event_id, data = None, []
        elif line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            data.append(line[6:])


def _rpc(gw: Gateway, rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    frame = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    assert schema_errors(frame, "client") == []
    r = gw.http.post(f"{SERVER}?agent=mock", json=frame)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    assert answer["id"] == rid
    assert schema_errors(answer, "agent", method) == []
    return answer


def test_acp_over_http_post_sse_delete(gateway: Gateway, project_dir: Path) -> None:
    """initialize, new and prompt are answered in their POSTs; the turn's updates come
    on the stream with ids; Last-Event-ID resumes after an id; a notification is 202;
    DELETE closes, twice."""
    gw = gateway
    assert _rpc(gw, 1, "initialize", {"protocolVersion": 1})["result"]["protocolVersion"] == 1
    new = _rpc(gw, 2, "session/new", {"cwd": str(project_dir), "mcpServers": []})
    sid = new["result"]["sessionId"]
    seen: list[tuple[str, dict[str, Any]]] = []
    done = threading.Event()

    def read() -> None:
        # From the start (Last-Event-ID 0): nothing said before we connect is lost.
        with gw.http.stream("GET", SERVER, headers={"Last-Event-ID": "0"}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            for item in _events(r.iter_lines()):
                seen.append(item)
                if "over http" in json.dumps(item[1]):
                    break
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "echo over http"}]}
    assert _rpc(gw, 3, "session/prompt", prompt)["result"]["stopReason"] == "end_turn"
    assert done.wait(30)
    ids = [int(i) for i, _ in seen]  # one session: each id is its journal seq
    assert ids == sorted(set(ids))
    for _, frame in seen:
        assert schema_errors(frame, "agent") == []
        assert frame["params"]["sessionId"] == sid
    with gw.http.stream("GET", SERVER, headers={"Last-Event-ID": str(ids[-2])}) as r:
        first = next(_events(r.iter_lines()))
    assert first[0] == str(ids[-1])
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
    assert gw.http.post(SERVER, json=cancel).status_code == 202
    bad = gw.http.post(SERVER, content=b"{not json")
    assert bad.status_code == 400
    assert bad.headers["content-type"].startswith("application/problem+json")
    assert gw.http.delete(SERVER).status_code == 204
    assert gw.http.delete(SERVER).status_code == 204
    assert gw.http.get(SERVER).status_code == 204


def _read_until(gw: Gateway, last_event_id: str, text: str) -> list[tuple[str, dict[str, Any]]]:
    """A stream from ``last_event_id``, read until an event mentions ``text``."""
    out = []
    with gw.http.stream("GET", SERVER, headers={"Last-Event-ID": last_event_id}) as r:
        assert r.status_code == 200
        for item in _events(r.iter_lines()):
            assert schema_errors(item[1], "agent") == []
            out.append(item)
            if text in json.dumps(item[1]):
                break
    return out


def test_sse_ids_are_journal_seqs_and_resume_from_the_journal(
    gateway: Gateway, project_dir: Path
) -> None:
    """Each event's id is the journal seq of the entry it relays (the session's own
    journal says so); Last-Event-ID resumes without gap or duplicate from an event id
    (the ring) and from a seq the stream never sent as an id (the journal); a bad id
    is a 400."""
    gw = gateway
    _rpc(gw, 1, "initialize", {"protocolVersion": 1})
    sid = _rpc(gw, 2, "session/new", {"cwd": str(project_dir), "mcpServers": []})["result"][
        "sessionId"
    ]
    for rid, text in ((3, "stream 4 first"), (4, "stream 4 second")):
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        assert _rpc(gw, rid, "session/prompt", prompt)["result"]["stopReason"] == "end_turn"
    everything = _read_until(gw, "0", "second 3")
    seqs = [int(i) for i, _ in everything]
    assert seqs == sorted(set(seqs))
    # the gateway's home is the test's
    entries = {e["seq"]: e for e in journal_when(sid, count("turn_ended", 2))}
    for seq, frame in everything:
        entry = entries[int(seq)]
        assert entry["kind"] == "acp"
        assert entry["frame"]["params"]["update"] == frame["params"]["update"]
    assert _read_until(gw, str(seqs[3]), "second 3") == everything[4:]
    gap = next(k for k in range(1, len(seqs)) if seqs[k] > seqs[k - 1] + 1)
    assert _read_until(gw, str(seqs[gap - 1] + 1), "second 3") == everything[gap:]
    bad = gw.http.get(SERVER, headers={"Last-Event-ID": "x.y"})
    assert bad.status_code == 400
    assert gw.http.delete(SERVER).status_code == 204


def test_an_http_client_serves_the_agents_file_reads(gateway: Gateway, project_dir: Path) -> None:
    """A client over HTTP that advertises fs gets the agent's fs/read_text_file on its
    event stream (a request, its id on the stream), answers it with a POST (202), and
    the agent reads the client's content."""
    gw = gateway
    caps = {"fs": {"readTextFile": True, "writeTextFile": False}}
    _rpc(gw, 1, "initialize", {"protocolVersion": 1, "clientCapabilities": caps})
    sid = _rpc(gw, 2, "session/new", {"cwd": str(project_dir), "mcpServers": []})["result"][
        "sessionId"
    ]
    answered: list[dict[str, Any]] = []

    def prompt() -> None:
        params = {"sessionId": sid, "prompt": [{"type": "text", "text": "read /etc/hostname"}]}
        answered.append(_rpc(gw, 3, "session/prompt", params))

    turn = threading.Thread(target=prompt, daemon=True)
    turn.start()
    chunks = []
    # From the start: the request may be out before the stream connects (the ring
    # holds everything yet, live-only events too).
    with gw.http.stream("GET", SERVER, headers={"Last-Event-ID": "0"}) as r:
        for event_id, frame in _events(r.iter_lines()):
            assert schema_errors(frame, "agent") == []
            if frame.get("method") == "fs/read_text_file":
                assert "~" in event_id  # a live-only event: no journal entry is it
                assert frame["params"] == {"sessionId": sid, "path": "/etc/hostname"}
                reply = {"jsonrpc": "2.0", "id": frame["id"], "result": {"content": "via http"}}
                assert schema_errors(reply, "client") == []
                assert gw.http.post(SERVER, json=reply).status_code == 202
            update = frame.get("params", {}).get("update", {})
            if update.get("sessionUpdate") == "agent_message_chunk":
                chunks.append(update["content"]["text"])
                break
    turn.join(30)
    assert chunks == ["via http"]
    assert answered[0]["result"]["stopReason"] == "end_turn"
    assert gw.http.delete(SERVER).status_code == 204


def test_a_stream_opened_before_its_server_waits_for_it(
    gateway: Gateway, project_dir: Path
) -> None:
    """sandbox-agent's client opens its stream together with its first POST: a stream
    of a server not created yet waits for it and gets its events from the first one;
    once the server is deleted, a stream is 204."""
    gw = gateway
    early = "/v1/acp/srv-early"
    seen: list[dict[str, Any]] = []
    connected, done = threading.Event(), threading.Event()

    def read() -> None:
        with gw.http.stream("GET", early) as r:
            assert r.status_code == 200
            connected.set()
            for _, frame in _events(r.iter_lines()):
                seen.append(frame)
                if "early bird" in json.dumps(frame):
                    break
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert connected.wait(30)  # the headers came before the server exists
    frame = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
    assert gw.http.post(f"{early}?agent=mock", json=frame).status_code == 200
    params = {"cwd": str(project_dir), "mcpServers": []}
    new = {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": params}
    sid = gw.http.post(early, json=new).json()["result"]["sessionId"]
    text = [{"type": "text", "text": "echo early bird"}]
    prompt = {"jsonrpc": "2.0", "id": 3, "method": "session/prompt"}
    r = gw.http.post(early, json={**prompt, "params": {"sessionId": sid, "prompt": text}})
    assert r.json()["result"]["stopReason"] == "end_turn"
    assert done.wait(30)
    assert all(schema_errors(f, "agent") == [] for f in seen)
    assert gw.http.delete(early).status_code == 204
    assert gw.http.get(early).status_code == 204
