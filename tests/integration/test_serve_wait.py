"""``POST /v1/sessions/{id}/prompt?wait=true`` against a real gateway and real owners: the
answer is the turn's end (stop reason, text, updates, seq range), the turn is journaled as
any other, the full path (no owner running) answers the same, a client that leaves
mid-wait does not cancel the turn, and a turn's error is the answer's error."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
from tests.integration._serve import Gateway, gateway, spawn_gateway
from tests.integration.test_serve_warm import metric, stored

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = pytest.mark.integration
__all__ = ["gateway"]


def wait_prompt(gw: Gateway, sid: str, text: str, **extra: Any) -> Any:
    return gw.http.post(
        f"/v1/sessions/{sid}/prompt?wait=true", json={"prompt": text, **extra}, timeout=60
    )


def check_answer(gw: Gateway, sid: str, answer: dict[str, Any], chunks: int) -> None:
    """The answer matches what the journal stored of the turn."""
    rid = answer["requestId"]
    assert answer["sessionKey"] == sid
    assert answer["stopReason"] == "end_turn"
    assert answer["text"] == "".join(f"x {i}\n" for i in range(chunks))
    updates = dict(answer["updates"])
    assert updates.pop("agent_message_chunk") == chunks
    assert set(updates) <= {"available_commands_update"}  # an agent starting for the turn
    assert answer["events"] == f"/v1/sessions/{sid}/events?from={answer['fromSeq']}"
    journal = stored(gw, sid, answer["lastSeq"] + 1)
    mine = [e for e in journal if e.get("requestId") == rid]
    kinds = [e["kind"] for e in mine]
    assert kinds[:2] == ["prompt_queued", "turn_started"]
    assert kinds[-1] == "turn_ended"
    assert mine[0]["seq"] >= answer["fromSeq"]  # the cursor is before the whole turn
    agent = [e for e in mine if e["kind"] == "acp" and e["direction"] == "in"]
    assert answer["lastSeq"] == agent[-1]["seq"]  # the turn's last agent frame
    assert mine[-1]["seq"] > answer["lastSeq"]


def test_a_waiting_prompt_answers_with_its_turns_end(gateway: Gateway, project_dir: Path) -> None:
    """Back-to-back waiting prompts on a live owner (the loop path): each answered with
    its own turn, as journaled; an SSE prompt between them is unaffected."""
    sid = gateway.ensure(project_dir)
    for chunks in (1, 3, 200):
        r = wait_prompt(gateway, sid, f"stream {chunks} x")
        assert r.status_code == 200, r.text
        check_answer(gateway, sid, r.json(), chunks)
    turn = gateway.prompt(sid, "echo between")
    gateway.until_turn_end(sid, turn["requestId"], query=f"?from={turn['fromSeq']}")
    r = wait_prompt(gateway, sid, "stream 2 x")
    check_answer(gateway, sid, r.json(), 2)
    assert metric(gateway, 'tether_serve_prompts_total{path="loop"}') == 5


def test_a_waiting_prompt_with_no_owner_running_starts_one(
    tether_home: Path, project_dir: Path
) -> None:
    """An owner that retired on its idle TTL: the waiting prompt takes the full path
    (which starts a new owner) and reads the turn from the journal; the same answer."""
    gw = spawn_gateway(tether_home)
    try:
        sid = gw.ensure(project_dir, ttl=1)
        check_answer(gw, sid, wait_prompt(gw, sid, "stream 2 x").json(), 2)
        deadline = time.monotonic() + 30
        while gw.http.get(f"/v1/sessions/{sid}").json()["status"].get("ownerPid"):
            assert time.monotonic() < deadline, "the owner did not retire"
            time.sleep(0.2)
        threads = metric(gw, 'tether_serve_prompts_total{path="thread"}')
        r = wait_prompt(gw, sid, "stream 4 x")
        assert r.status_code == 200, r.text
        check_answer(gw, sid, r.json(), 4)
        assert metric(gw, 'tether_serve_prompts_total{path="thread"}') == threads + 1
    finally:
        gw.close_all()
        gw.stop()


def test_a_client_leaving_mid_wait_does_not_cancel_the_turn(
    gateway: Gateway, project_dir: Path
) -> None:
    """The client disconnects while its turn runs: the turn runs to its end anyway."""
    sid = gateway.ensure(project_dir)
    gateway.prompt(sid, "echo warm")
    host, port = gateway.url.removeprefix("http://").split(":")
    body = b'{"prompt":"sleep 1500 ; echo survived"}'
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            f"POST /v1/sessions/{sid}/prompt?wait=true HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {gateway.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        deadline = time.monotonic() + 30
        while True:  # the turn is running
            status = gateway.http.get(f"/v1/sessions/{sid}").json()["status"]
            if status.get("currentKind") == "prompt":
                rid = status["currentRequest"]
                break
            assert time.monotonic() < deadline, "the turn never started"
            time.sleep(0.05)
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            sock.recv(1)  # no answer yet: the request is held while the turn runs
    # The client is gone; the turn goes on to its end.
    deadline = time.monotonic() + 30
    while True:
        ended = [
            e
            for e in stored(gateway, sid, 0)
            if e["kind"] == "turn_ended" and e.get("requestId") == rid
        ]
        if ended:
            break
        assert time.monotonic() < deadline, "the turn never ended"
        time.sleep(0.1)
    assert ended[0]["stopReason"] == "end_turn"
    assert "cancel" not in ended[0]


def test_a_turns_error_is_the_answers_error(gateway: Gateway, project_dir: Path) -> None:
    """A turn past its deadline: the answer is that error, as a problem document."""
    sid = gateway.ensure(project_dir)
    r = wait_prompt(gateway, sid, "sleep 5000", timeoutMs=300)
    assert r.status_code >= 400
    problem = r.json()
    assert problem["code"] == "TIMEOUT", problem


def test_wait_takes_a_boolean(gateway: Gateway, project_dir: Path) -> None:
    """``wait`` is 0, 1, true or false; anything else is refused before any prompt."""
    sid = gateway.ensure(project_dir)
    r = gateway.http.post(f"/v1/sessions/{sid}/prompt?wait=soon", json={"prompt": "echo x"})
    assert r.status_code == 422
    assert r.json()["fields"] == {"field": "wait"}
    r = gateway.http.post(f"/v1/sessions/{sid}/prompt?wait=false", json={"prompt": "echo x"})
    assert r.status_code == 202


def test_the_waiting_form_is_in_the_openapi_document(gateway: Gateway) -> None:
    """The document names the ``wait`` parameter and the 200 answer's fields."""
    op = gateway.http.get("/v1/openapi.json").json()["paths"]["/v1/sessions/{id}/prompt"]["post"]
    assert "wait" in [p["name"] for p in op["parameters"]]
    schema = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert {"stopReason", "text", "updates", "fromSeq", "lastSeq"} <= set(schema["properties"])
