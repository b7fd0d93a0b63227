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
from tests.integration._serve import Gateway, gateway

__all__ = ["gateway"]

pytestmark = pytest.mark.integration
SERVER = "/v1/acp/srv-1"


def _events(lines: Iterator[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(id, frame) of an SSE stream (comments skipped)."""
    event_id, data = None, []
    for line in lines:
        if line == "":
            if data and event_id is not None:
                yield event_id, json.loads("\n".join(data))
            event_id, data = None, []
        elif line.startswith("id: "):
            event_id = int(line[4:])
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
    seen: list[tuple[int, dict[str, Any]]] = []
    done = threading.Event()

    def read() -> None:
        # From the ring's start (Last-Event-ID 0): nothing said before we connect is lost.
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
    ids = [i for i, _ in seen]
    assert ids == sorted(set(ids))
    for _, frame in seen:
        assert schema_errors(frame, "agent") == []
        assert frame["params"]["sessionId"] == sid
    with gw.http.stream("GET", SERVER, headers={"Last-Event-ID": str(ids[-2])}) as r:
        first = next(_events(r.iter_lines()))
    assert first[0] == ids[-1]
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
    assert gw.http.post(SERVER, json=cancel).status_code == 202
    bad = gw.http.post(SERVER, content=b"{not json")
    assert bad.status_code == 400
    assert bad.headers["content-type"].startswith("application/problem+json")
    assert gw.http.delete(SERVER).status_code == 204
    assert gw.http.delete(SERVER).status_code == 204
    assert gw.http.get(SERVER).status_code == 204
