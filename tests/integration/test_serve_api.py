"""``tether serve``'s JSON API, against a real gateway process, a real HTTP client and
real owners running the mock agent."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import python_env
from tests.integration._serve import (
    Gateway,
    gateway,
    mock_with_modes_config,
    parse_sse,
    spawn_gateway,
)

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = pytest.mark.integration
__all__ = ["gateway"]  # the fixture, imported for pytest

UNAUTHORIZED = {"type": "about:blank", "title": "Unauthorized", "status": 401}
NO_SUCH = "0" * 64
ROUTES = [
    ("GET", "/v1/sessions"),
    ("POST", "/v1/sessions"),
    ("GET", f"/v1/sessions/{NO_SUCH}"),
    ("DELETE", f"/v1/sessions/{NO_SUCH}"),
    ("POST", f"/v1/sessions/{NO_SUCH}/prompt"),
    ("POST", f"/v1/sessions/{NO_SUCH}/cancel"),
    ("POST", f"/v1/sessions/{NO_SUCH}/mode"),
    ("POST", f"/v1/sessions/{NO_SUCH}/config"),
    ("GET", f"/v1/sessions/{NO_SUCH}/events"),
    ("GET", f"/v1/sessions/{NO_SUCH}/history"),
    ("GET", f"/v1/sessions/{NO_SUCH}/transcript"),
    ("GET", f"/v1/sessions/{NO_SUCH}/export"),
    ("GET", f"/v1/sessions/{NO_SUCH}/processes"),
    ("GET", f"/v1/sessions/{NO_SUCH}/questions"),
    ("POST", f"/v1/sessions/{NO_SUCH}/questions/p-1"),
    ("POST", "/v1/acp/srv-x"),
    ("GET", "/v1/acp/srv-x"),
    ("DELETE", "/v1/acp/srv-x"),
    ("GET", "/v1/agents"),
    ("GET", "/v1/health"),
    ("GET", "/v1/openapi.json"),
    ("GET", "/metrics"),
]


def test_every_route_refuses_a_missing_or_wrong_token(gateway: Gateway) -> None:
    """No token, a wrong token or another scheme: 401 with nothing but "Unauthorized"."""
    bare = httpx.Client(base_url=gateway.url, timeout=10)
    for method, path in ROUTES:
        for headers in (
            {},
            {"Authorization": "Bearer wrong-token-wrong-token"},
            {"Authorization": f"Bearer {gateway.token}x"},
            {"Authorization": f"Basic {gateway.token}"},
        ):
            r = bare.request(method, path, headers=headers)
            assert r.status_code == 401, (method, path, headers)
            assert r.headers["content-type"] == "application/problem+json"
            assert r.json() == UNAUTHORIZED
            assert r.headers["www-authenticate"] == "Bearer"
    # The dashboard's files hold no data: the page loads, then asks for the token.
    page = bare.get("/ui/")
    assert page.status_code == 200
    assert "<title>Tether</title>" in page.text
    bare.close()


def test_the_token_file_is_private_and_shared_by_two_gateways(
    gateway: Gateway, tether_home: Path, project_dir: Path
) -> None:
    """The generated token is 0600 in TETHER_HOME; a second gateway on the same home uses
    it and serves the same sessions."""
    path = tether_home / "serve-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    sid = gateway.ensure(project_dir)
    second = spawn_gateway(tether_home)
    try:
        assert second.token == gateway.token
        r = second.http.get(f"/v1/sessions/{sid}")
        assert r.status_code == 200
        assert r.json()["status"]["status"] == "idle"
    finally:
        assert second.stop() in (0, -15)  # uvicorn re-raises SIGTERM once stopped


def test_bind_rules(tether_home: Path) -> None:
    """A non-loopback bind needs an explicit token; a short token and a stray argument are
    usage errors (exit 2, one line, no traceback)."""

    def serve(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether", "serve", *args],
            capture_output=True,
            text=True,
            timeout=30,
            env={**python_env(), "TETHER_HOME": str(tether_home)},
        )

    for args, says in (
        (("--host", "0.0.0.0", "--port", "0"), "explicit --token"),
        (("--token", "short"), "at least 16"),
        (("--unix", "/tmp/x.sock", "--port", "1"), "cannot be combined"),
        (("extra",), "takes no arguments"),
        (("--port", "70000"), "between 0 and 65535"),
    ):
        done = serve(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert says in done.stderr
        assert "Traceback" not in done.stderr


def test_session_routes_end_to_end(gateway: Gateway, project_dir: Path) -> None:
    """Create (201, then 200), list with filters, get, prompt (202) and its turn on the
    stream, history, transcript, export, processes, cancel, close twice, 404 after."""
    http = gateway.http
    body = {"agent": "mock", "cwd": str(project_dir), "name": "api"}
    created = http.post("/v1/sessions", json=body)
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    assert len(sid) == 64
    assert created.json()["ownerPid"] > 0
    again = http.post("/v1/sessions", json=body)
    assert (again.status_code, again.json()["id"], again.json()["created"]) == (200, sid, False)

    listed = http.get("/v1/sessions", params={"agent": "mock", "live": "1"}).json()["sessions"]
    assert [s["id"] for s in listed] == [sid]
    assert listed[0]["status"]["status"] == "idle"
    assert listed[0]["host"]
    assert http.get("/v1/sessions", params={"agent": "claude"}).json()["sessions"] == []
    assert http.get("/v1/sessions", params={"cwd": "/nowhere"}).json()["sessions"] == []
    assert http.get("/v1/sessions", params={"state": "closed"}).json()["sessions"] == []

    one = http.get(f"/v1/sessions/{sid}").json()
    assert one["name"] == "api"
    assert one["status"]["ownerPid"] == created.json()["ownerPid"]

    queued = gateway.prompt(sid, "stream 5 part")
    assert queued["requestId"].startswith("r-")
    entries = gateway.until_turn_end(sid, queued["requestId"], query=f"?from={queued['fromSeq']}")
    chunks = [
        e["frame"]["params"]["update"]["content"]["text"]
        for e in entries
        if e["kind"] == "acp"
        and e["frame"].get("method") == "session/update"
        and e["frame"]["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    ]
    assert chunks == [f"part {i}\n" for i in range(5)]
    assert entries[-1]["stopReason"] == "end_turn"

    turns = http.get(f"/v1/sessions/{sid}/history").json()["turns"]
    assert [t["requestId"] for t in turns] == [queued["requestId"]]
    assert turns[0]["by"]["client"] == "http"
    text = http.get(f"/v1/sessions/{sid}/transcript", params={"tail": "1"}).json()["turns"]
    assert text[0]["text"] == "".join(chunks)

    export = http.get(f"/v1/sessions/{sid}/export")
    assert export.headers["content-type"].startswith("application/x-ndjson")
    seqs = [json.loads(line)["seq"] for line in export.text.splitlines()]
    assert seqs == list(range(1, len(seqs) + 1))

    procs = http.get(f"/v1/sessions/{sid}/processes").json()
    roles = {p["role"]: p["pid"] for p in procs["processes"]}
    status = one["status"]
    assert roles["owner"] == status["ownerPid"]
    assert roles["agent"] == http.get(f"/v1/sessions/{sid}").json()["status"]["agentPid"]
    assert "keeper" in roles
    assert procs["leaseState"] == "open"

    nothing = http.post(f"/v1/sessions/{sid}/cancel")
    assert nothing.status_code == 200
    assert nothing.json()["cancelled"] is False

    closed = http.delete(f"/v1/sessions/{sid}")
    assert closed.status_code == 200
    assert closed.json()["survivors"] == []
    assert http.delete(f"/v1/sessions/{sid}").status_code == 200  # idempotent
    assert http.get(f"/v1/sessions/{sid}").json()["state"] == "closed"
    assert [
        s["id"] for s in http.get("/v1/sessions", params={"state": "closed"}).json()["sessions"]
    ] == [sid]
    after = http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "hello"})
    assert after.status_code == 404
    assert after.json()["detailCode"] == "NO_SESSION"


def test_unknown_sessions_are_404_problems(gateway: Gateway) -> None:
    """An unknown or malformed id is a 404 problem with Tether's NO_SESSION code."""
    for path in (
        f"/v1/sessions/{NO_SUCH}",
        "/v1/sessions/not-a-key",
        f"/v1/sessions/{NO_SUCH}/history",
    ):
        r = gateway.http.get(path)
        assert r.status_code == 404, path
        assert r.headers["content-type"] == "application/problem+json"
        doc = r.json()
        assert (doc["code"], doc["detailCode"], doc["status"]) == ("NO_SESSION", "NO_SESSION", 404)
        assert doc["type"] == "urn:tether:problem:NO_SESSION"
    assert gateway.http.delete(f"/v1/sessions/{NO_SUCH}").status_code == 404
    assert gateway.http.post(f"/v1/sessions/{NO_SUCH}/cancel").status_code == 404


def test_cancel_a_queued_request_and_the_running_turn(gateway: Gateway, project_dir: Path) -> None:
    """A queued prompt is removed by its request id; the running turn is cancelled and
    ends ``cancelled`` on the stream; the session stays warm."""
    sid = gateway.ensure(project_dir)
    running = gateway.prompt(sid, "sleep 60000")
    queued = gateway.prompt(sid, "echo never")
    assert queued["queuePosition"] >= 1
    removed = gateway.http.post(
        f"/v1/sessions/{sid}/cancel", json={"requestId": queued["requestId"]}
    )
    assert removed.json()["cancelled"] is True
    cancelled = gateway.http.post(f"/v1/sessions/{sid}/cancel", json={})
    assert cancelled.json()["cancelled"] is True
    entries = gateway.until_turn_end(sid, running["requestId"], query=f"?from={running['fromSeq']}")
    assert entries[-1]["stopReason"] == "cancelled"
    assert gateway.http.get(f"/v1/sessions/{sid}").json()["status"]["status"] == "idle"
    history = gateway.http.get(f"/v1/sessions/{sid}/history").json()["turns"]
    assert queued["requestId"] not in [t["requestId"] for t in history if t.get("stopReason")]


def test_mode_and_config_through_the_owner(
    gateway: Gateway, tether_home: Path, project_dir: Path
) -> None:
    """set mode and set config reach the agent; an id it refuses is a 4xx problem."""
    mock_with_modes_config(tether_home)
    sid = gateway.ensure(project_dir, agent="mockx")
    r = gateway.http.post(f"/v1/sessions/{sid}/mode", json={"modeId": "plan"})
    assert r.status_code == 200, r.text
    r = gateway.http.post(
        f"/v1/sessions/{sid}/config", json={"configId": "model", "value": "mock-large"}
    )
    assert r.status_code == 200, r.text
    assert any(o.get("currentValue") == "mock-large" for o in r.json().get("configOptions", []))
    refused = gateway.http.post(f"/v1/sessions/{sid}/mode", json={"modeId": "no-such-mode"})
    assert 400 <= refused.status_code < 500, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    kinds = [
        json.loads(x)["kind"]
        for x in gateway.http.get(f"/v1/sessions/{sid}/export").text.splitlines()
    ]
    assert "mode_set" in kinds
    assert "config_set" in kinds


def test_agents_health_metrics_and_openapi(gateway: Gateway, project_dir: Path) -> None:
    """The registry's agents, health, Prometheus text and an OpenAPI document naming
    every route."""
    agents = gateway.http.get("/v1/agents").json()["agents"]
    assert {"mock", "claude", "codex"} <= {a["name"] for a in agents}
    health = gateway.http.get("/v1/health").json()
    assert health["status"] == "ok"
    assert health["pid"] == gateway.proc.pid
    sid = gateway.ensure(project_dir)
    turn = gateway.prompt(sid, "echo counted")  # the agent starts: run_spawn_total
    gateway.until_turn_end(sid, turn["requestId"], query=f"?from={turn['fromSeq']}")
    # An owner's counters reach the registry from its status writer, a few ms after
    # the turn (never on its event loop): a scrape right after may precede them.
    deadline = time.monotonic() + 10
    while "run_spawn_total" not in (metrics := gateway.http.get("/metrics")).text:
        assert time.monotonic() < deadline, "the owner's counters never reached /metrics"
        time.sleep(0.02)
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "tether_serve_requests_total " in metrics.text
    assert "run_spawn_total" in metrics.text  # the registry's counters
    doc = gateway.http.get("/v1/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    for method, path in ROUTES:
        path = path.replace(NO_SUCH, "{id}").replace("p-1", "{qid}")
        assert (method, path.replace("srv-x", "{serverId}")) in documented


BAD_INPUT = [
    # (method, path, content, headers, status, detailCode)
    ("POST", "/v1/sessions", b"{not json", {}, 400, "BAD_JSON"),
    ("POST", "/v1/sessions", b"\xff\xfe", {}, 400, "BAD_JSON"),
    ("POST", "/v1/sessions", b"[1, 2]", {}, 422, "WRONG_TYPE"),
    (
        "POST",
        "/v1/sessions",
        b'{"agent": "mock", "cwd": "/", "colour": 1}',
        {},
        422,
        "UNKNOWN_FIELD",
    ),
    ("POST", "/v1/sessions", b'{"agent": 5, "cwd": "/"}', {}, 422, "WRONG_TYPE"),
    (
        "POST",
        "/v1/sessions",
        b'{"agent": "mock", "cwd": "/", "fresh": "yes"}',
        {},
        422,
        "WRONG_TYPE",
    ),
    ("POST", "/v1/sessions", b'{"agent": "mock", "cwd": "/", "ttl": true}', {}, 422, "WRONG_TYPE"),
    ("POST", "/v1/sessions", b'{"cwd": "/"}', {}, 422, "MISSING_FIELD"),
    ("POST", "/v1/sessions", b'{"agent": "mock", "cwd": "relative"}', {}, 422, "BAD_VALUE"),
    ("POST", "/v1/sessions", b'{"agent": "rm -rf /", "cwd": "/"}', {}, 422, "BAD_VALUE"),
    (
        "POST",
        "/v1/sessions",
        b'{"agent": "mock", "cwd": "/", "permissions": "all"}',
        {},
        422,
        "BAD_VALUE",
    ),
    ("POST", "/v1/sessions", b'{"agent": "mock", "cwd": "/", "ttl": -1}', {}, 422, "BAD_VALUE"),
    (
        "POST",
        "/v1/sessions",
        b'{"agent": "mock", "cwd": "/"}',
        {"content-type": "text/plain"},
        415,
        "UNSUPPORTED_MEDIA_TYPE",
    ),
    ("POST", "/v1/sessions/{sid}/prompt", b'{"prompt": 5}', {}, 422, "WRONG_TYPE"),
    ("POST", "/v1/sessions/{sid}/prompt", b'{"prompt": "  "}', {}, 422, "BAD_VALUE"),
    ("POST", "/v1/sessions/{sid}/prompt", b'{"prompt": [{"text": "x"}]}', {}, 422, "BAD_VALUE"),
    ("POST", "/v1/sessions/{sid}/prompt", b'{"prompt": "x", "timeoutMs": 0}', {}, 422, "BAD_VALUE"),
    (
        "POST",
        "/v1/sessions/{sid}/prompt",
        b'{"prompt": "x", "timeoutMs": 1.5}',
        {},
        422,
        "WRONG_TYPE",
    ),
    ("POST", "/v1/sessions/{sid}/prompt", b"", {}, 422, "MISSING_FIELD"),
    ("POST", "/v1/sessions/{sid}/cancel", b'{"requestId": 7}', {}, 422, "WRONG_TYPE"),
    ("POST", "/v1/sessions/{sid}/cancel", b"x" * 70_000, {}, 413, "BODY_TOO_LARGE"),
    ("POST", "/v1/sessions/{sid}/mode", b'{"modeId": ""}', {}, 422, "BAD_VALUE"),
    (
        "POST",
        "/v1/sessions/{sid}/config",
        b'{"configId": "model", "value": 3}',
        {},
        422,
        "WRONG_TYPE",
    ),
    ("GET", "/v1/sessions?state=weird", b"", {}, 422, "BAD_VALUE"),
    ("GET", "/v1/sessions?colour=red", b"", {}, 422, "UNKNOWN_FIELD"),
    ("GET", "/v1/sessions/{sid}/history?limit=abc", b"", {}, 422, "BAD_VALUE"),
    ("GET", "/v1/sessions/{sid}/history?limit=-1", b"", {}, 422, "BAD_VALUE"),
    ("GET", "/v1/sessions/{sid}/events?from=0", b"", {}, 422, "BAD_VALUE"),
    ("GET", "/v1/sessions/{sid}/events?from=1&tail=2", b"", {}, 422, "BAD_VALUE"),
    ("GET", "/v1/sessions/{sid}/events?heartbeat=0", b"", {}, 422, "BAD_VALUE"),
    ("GET", "/v1/sessions/{sid}/events", b"", {"last-event-id": "abc"}, 422, "BAD_VALUE"),
]


def test_bad_input_is_a_4xx_problem(gateway: Gateway, project_dir: Path) -> None:
    """Bad JSON, unknown fields, wrong types, missing fields, bad values, oversized
    bodies, other media types, bad query parameters: each a 4xx problem, never a 500,
    and the session is untouched."""
    sid = gateway.ensure(project_dir)
    for method, path, content, headers, status, code in BAD_INPUT:
        sent = {"content-type": "application/json", **headers}
        r = gateway.http.request(method, path.format(sid=sid), content=content, headers=sent)
        where = (method, path, content[:40])
        assert r.status_code == status, (where, r.text)
        assert r.headers["content-type"] == "application/problem+json", where
        assert r.json()["detailCode"] == code, (where, r.json())
    # An oversized body sent without a length (chunked) is cut off too.
    chunked = gateway.http.post(
        f"/v1/sessions/{sid}/cancel",
        content=iter([b'{"requestId": "', b"x" * 70_000, b'"}']),
        headers={"content-type": "application/json"},
    )
    assert chunked.status_code == 413
    # Routing: an unknown path and a method a route does not take.
    assert gateway.http.get("/v1/nothing").status_code == 404
    assert gateway.http.get("/v1/nothing").headers["content-type"] == "application/problem+json"
    wrong = gateway.http.put("/v1/sessions")
    assert wrong.status_code == 405
    assert wrong.headers["content-type"] == "application/problem+json"
    # Nothing of that reached the session.
    assert gateway.http.get(f"/v1/sessions/{sid}/history").json()["turns"] == []
    assert gateway.http.get(f"/v1/sessions/{sid}").json()["status"]["status"] == "idle"


def test_a_prompt_over_the_configured_limit_is_413(tether_home: Path, project_dir: Path) -> None:
    """``promptMaxBytes`` bounds a prompt's body (64 MiB by default)."""
    (tether_home / "config.toml").write_text("promptMaxBytes = 4096\n")
    os.chmod(tether_home / "config.toml", 0o600)
    small = spawn_gateway(tether_home)
    try:
        sid = small.ensure(project_dir)
        r = small.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "x" * 5000})
        assert r.status_code == 413
        assert r.json()["detailCode"] == "BODY_TOO_LARGE"
        assert (
            small.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "hello"}).status_code
            == 202
        )
    finally:
        small.close_all()
        small.stop()


def test_terminate_ends_the_session_at_once(gateway: Gateway, project_dir: Path) -> None:
    """POST terminate ends the session at once and says how; again, it reports the end."""
    sid = gateway.ensure(project_dir)
    turn = gateway.prompt(sid, "sleep 60000")
    assert turn["requestId"]
    first = gateway.http.post(f"/v1/sessions/{sid}/terminate")
    assert first.status_code == 200, first.text
    assert first.json()["terminated"] is True
    again = gateway.http.post(f"/v1/sessions/{sid}/terminate").json()
    assert again["alreadyEnded"] is True
    assert gateway.http.get(f"/v1/sessions/{sid}").json()["state"] == "closed"


def test_a_turn_is_in_the_history_the_moment_its_wait_answer_is(
    gateway: Gateway, project_dir: Path
) -> None:
    """The owner answers a turn once its end is stored: a transcript asked for right
    after each answer already holds the turn, ended (before, it could still read as
    running: the answer raced the journal's writer)."""
    sid = gateway.ensure(project_dir)
    for i in range(25):
        r = gateway.http.post(f"/v1/sessions/{sid}/prompt?wait=true", json={"prompt": f"echo n{i}"})
        assert r.status_code == 200, r.text
        turns = gateway.http.get(f"/v1/sessions/{sid}/transcript").json()["turns"]
        assert len(turns) == i + 1
        assert turns[-1]["stopReason"] == "end_turn", turns[-1]
        assert turns[-1]["text"] == f"n{i}"


def test_the_peer_a_terminate_records_is_the_socket_not_a_forwarded_header(
    gateway: Gateway, project_dir: Path
) -> None:
    """A header is a claim: ``X-Forwarded-For`` from a local client never becomes the
    peer the journal records as having ended the session."""
    from tests.integration._journal import count, journal_when

    sid = gateway.ensure(project_dir)
    r = gateway.http.post(
        f"/v1/sessions/{sid}/terminate",
        headers={"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"},
    )
    assert r.status_code == 200, r.text
    ended = [e for e in journal_when(sid, count("session_ended")) if e["kind"] == "session_ended"]
    assert len(ended) == 1
    peer = ended[0]["requestedBy"]["peer"]
    assert peer.startswith("127.0.0.1:"), peer
    assert "203.0.113.9" not in str(ended[0])


def test_questions_are_listed_and_answered_over_http(gateway: Gateway, project_dir: Path) -> None:
    """With a controller stream open (``?control=1``) the agent's permission request
    waits: it is listed, a bad answer is 422 and leaves it open, the first valid answer
    reaches the agent (the turn goes on), a second is 409, an unknown id 404."""
    sid = gateway.ensure(project_dir)  # approve-reads: an edit is asked
    seen: list[dict[str, object]] = []

    def control() -> None:
        client = httpx.Client(
            base_url=gateway.url, headers={"Authorization": f"Bearer {gateway.token}"}
        )
        with client.stream("GET", f"/v1/sessions/{sid}/events?control=1&tail=0") as r:
            for event, data in parse_sse(r.iter_lines()):
                if event == "message":
                    seen.append(data)
                    if data["kind"] == "turn_ended":
                        break
        client.close()

    watcher = threading.Thread(target=control)
    watcher.start()
    wait(lambda: gateway.http.get(f"/v1/sessions/{sid}").json()["status"]["watchers"] >= 1)
    turn = gateway.prompt(sid, "tool edit README.md")
    questions = wait(lambda: gateway.http.get(f"/v1/sessions/{sid}/questions").json()["questions"])
    (question,) = questions
    assert question["question"] == "permission"
    assert question["toolCall"]["kind"] == "edit"
    url = f"/v1/sessions/{sid}/questions/{question['id']}"
    bad = gateway.http.post(url, json={"answer": "perhaps"})
    assert bad.status_code == 422, bad.text
    assert gateway.http.post(url, json={"answer": 1}).json()["detailCode"] == "WRONG_TYPE"
    ok = gateway.http.post(url, json={"answer": "allow"})
    assert ok.status_code == 200, ok.text
    late = gateway.http.post(url, json={"answer": "deny"})
    assert late.status_code == 409
    assert late.json()["detailCode"] == "ALREADY_ANSWERED"
    unknown = gateway.http.post(f"/v1/sessions/{sid}/questions/p-nothing", json={"answer": "allow"})
    assert unknown.status_code == 404
    watcher.join(timeout=60)
    assert not watcher.is_alive()
    kinds = [e["kind"] for e in seen]
    assert "interaction_opened" in kinds
    assert "interaction_resolved" in kinds
    assert seen[-1]["requestId"] == turn["requestId"]
    assert seen[-1]["stopReason"] == "end_turn"
    assert "permission: allowed" in json.dumps(seen)
    assert gateway.http.get(f"/v1/sessions/{sid}/questions").json()["questions"] == []


def wait(check: Any, timeout: float = 30.0) -> Any:
    """Poll ``check`` until it returns something true (bounded; never a timed assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("the condition never held")
        time.sleep(0.05)
