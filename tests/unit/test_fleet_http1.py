"""The bytes the router writes itself (pure)."""

from __future__ import annotations

import json

from tether.fleet import http1


def test_a_forwarded_head_carries_the_fleet_credential_not_the_users() -> None:
    head = http1.RequestHead(
        b"POST",
        b"/v1/sessions/abc/prompt?x=1",
        [
            (b"authorization", b"Bearer user"),
            (b"host", b"router:1"),
            (b"connection", b"keep-alive"),
            (b"content-length", b"2"),
            (b"last-event-id", b"7"),
        ],
    )
    raw = http1.encode_request_head(head, b"127.0.0.1:9", [(b"authorization", b"Bearer fleet")])
    assert raw == (
        b"POST /v1/sessions/abc/prompt?x=1 HTTP/1.1\r\nhost: 127.0.0.1:9\r\n"
        b"content-length: 2\r\nlast-event-id: 7\r\nauthorization: Bearer fleet\r\n\r\n"
    )
    assert head.path == "/v1/sessions/abc/prompt"


def test_the_last_complete_event_id_is_found_whatever_the_cut() -> None:
    stream = b'id: 41\ndata: {}\n\nid: 42\ndata: {"id: 99"}\n\nid: 4'
    assert http1.last_event_id(stream) == 42  # "id: 4" is not a whole line yet
    assert http1.last_event_id(stream + b"3\n") == 43
    assert http1.last_event_id(b"data: {}\n\n") is None
    assert http1.last_event_id(b"id: 5\n") == 5


def test_problem_documents_say_whether_to_retry() -> None:
    raw = http1.problem(503, "Service Unavailable", "down", code="HOST_UNAVAILABLE",
                        retryable=True, hostId="h1")  # fmt: skip
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert b"retry-after: 1" in head
    assert b"content-type: application/problem+json" in head
    assert json.loads(body) == {
        "type": "about:blank", "title": "Service Unavailable", "status": 503, "detail": "down",
        "code": "HOST_UNAVAILABLE", "retryable": True, "hostId": "h1",
    }  # fmt: skip


def test_session_ids_and_injected_events() -> None:
    assert http1.session_id_of("/v1/sessions/abc/events") == "abc"
    assert http1.session_id_of("/v1/sessions/abc") == "abc"
    assert http1.session_id_of("/v1/sessions") is None
    assert http1.session_id_of("/v1/sessions/") is None
    event = http1.sse_event("host_lost", {"lastSeq": 3})
    assert event == b'event: host_lost\ndata: {"lastSeq":3}\n\n'
    assert http1.chunk(event) == b"%x\r\n" % len(event) + event + b"\r\n"
