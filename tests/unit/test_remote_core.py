"""The remote client's sans-IO core: URLs, answers into results or Tether's errors, SSE."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether import errors as e
from tether.remote import core, http11, sse


@pytest.mark.parametrize(
    ("url", "where"),
    [
        pytest.param("http://127.0.0.1:8787", ("http", "127.0.0.1", 8787, "", ""), id="http"),
        pytest.param("http://gw", ("http", "gw", 80, "", ""), id="default-port"),
        pytest.param("https://t.example.org", ("https", "t.example.org", 443, "", ""), id="https"),
        pytest.param("http://[::1]:9/", ("http", "::1", 9, "", ""), id="ipv6"),
        pytest.param("https://proxy/tether/", ("https", "proxy", 443, "", "/tether"), id="prefix"),
        pytest.param("unix:/run/t.sock", ("unix", "localhost", 0, "/run/t.sock", ""), id="unix"),
        pytest.param("unix:///run/t.sock", ("unix", "localhost", 0, "/run/t.sock", ""), id="unix3"),
    ],
)
def test_urls(url: str, where: tuple[Any, ...]) -> None:
    """Each accepted form says where the server is."""
    t = core.parse_url(url)
    assert (t.scheme, t.host, t.port, t.socket_path, t.prefix) == where


@pytest.mark.parametrize(
    "url",
    [
        "ftp://x",
        "127.0.0.1:8787",
        "unix:relative.sock",
        "http://user:pw@host",
        "http://h/?q=1",
        "http://h:99999",
        "http://:80",
    ],
)
def test_bad_urls_are_usage_errors(url: str) -> None:
    """Anything else is a usage error naming the accepted forms or the fault."""
    with pytest.raises(e.UsageError):
        core.parse_url(url)


def test_a_request_carries_the_token_and_json() -> None:
    """The bearer token, a JSON body with its type, the prefix before the path."""
    target = core.parse_url("http://h/api")
    method, path, body = core.prompt("ab" * 32, "hi", timeout_ms=5)
    req = core.request(target, "tok", method, path, body)
    assert (req.method, req.path) == ("POST", f"/api/v1/sessions/{'ab' * 32}/prompt")
    assert req.headers["Authorization"] == "Bearer tok"
    assert req.headers["Content-Type"] == "application/json"
    assert json.loads(req.body or b"") == {"prompt": "hi", "timeoutMs": 5}
    assert not req.is_read
    method, path, _ = core.history("x", 3)
    assert path == "/v1/sessions/x/history?limit=3"
    assert core.request(target, None, method, path).is_read
    assert core.answer("x", "q/1", "allow", None)[1] == "/v1/sessions/x/questions/q%2F1"


def _problem(status: int, **doc: Any) -> bytes:
    return json.dumps({"type": "about:blank", "status": status, **doc}).encode()


@pytest.mark.parametrize(
    ("status", "body", "cls", "detail_code"),
    [
        pytest.param(
            404,
            _problem(
                404,
                title="NoSession",
                detail="no such session",
                code="NO_SESSION",
                detailCode="NO_SESSION",
                fields={"session_key": "k"},
            ),
            e.NoSession,
            "NO_SESSION",
            id="gateway-404",
        ),
        pytest.param(
            422,
            _problem(422, title="UsageError", detail="bad", code="USAGE", detailCode="BAD_VALUE"),
            e.UsageError,
            "BAD_VALUE",
            id="gateway-422",
        ),
        pytest.param(
            429,
            _problem(
                429,
                title="QueueOverloaded",
                detail="full",
                code="RUNTIME",
                detailCode="QUEUE_OVERLOADED",
            ),
            e.QueueOverloaded,
            "QUEUE_OVERLOADED",
            id="gateway-429",
        ),
        pytest.param(
            401, _problem(401, title="Unauthorized"), e.PermissionDenied, "UNAUTHORIZED", id="401"
        ),
        pytest.param(
            503,
            _problem(
                503,
                title="Service Unavailable",
                detail="h1 is down",
                code="HOST_UNAVAILABLE",
                retryable=True,
            ),
            e.HostUnavailable,
            "HOST_UNAVAILABLE",
            id="router-503",
        ),
        pytest.param(
            404,
            _problem(404, title="Not Found", detail="session x is unknown", code="NO_SESSION"),
            e.NoSession,
            "NO_SESSION",
            id="router-404",
        ),
        pytest.param(
            409,
            _problem(409, title="Conflict", detail="its host is up", code="HOST_AVAILABLE"),
            e.SessionClosed,
            "HOST_AVAILABLE",
            id="router-409-by-status",
        ),
        pytest.param(502, b"<html>bad gateway</html>", e.TetherError, None, id="proxy-html"),
        pytest.param(400, b"", e.UsageError, None, id="empty-4xx"),
    ],
)
def test_problems_become_the_errors_they_were(
    status: int, body: bytes, cls: type[e.TetherError], detail_code: str | None
) -> None:
    """A problem document comes back as its class, by name, code, or status."""
    with pytest.raises(e.TetherError) as raised:
        core.outcome(status, "application/problem+json", body)
    assert type(raised.value) is cls
    if detail_code is not None:
        assert raised.value.detail_code == detail_code


def test_a_gateway_problem_round_trips_every_class() -> None:
    """Whatever a gateway raises arrives as the same class with its message and fields
    (the document the gateway writes: tether.serve.problems, rebuilt here)."""
    for cls in e._all_subclasses(e.TetherError):
        exc = cls("it happened", session_key="k")
        doc = {
            "type": f"urn:tether:problem:{exc.detail_code}",
            "title": cls.__name__,
            "status": 500,
            "detail": exc.message,
            "code": exc.code,
            "detailCode": exc.detail_code,
            "retryable": exc.retryable,
            "fields": exc.fields,
        }
        back = e.error_from_wire(doc)
        assert (type(back), back.message, back.fields) == (cls, "it happened", exc.fields)
        assert back.exit_code == exc.exit_code


def test_success_is_json_and_anything_else_is_a_protocol_error() -> None:
    """2xx JSON is the result; 204 is None; a 2xx that is not JSON is the peer's fault."""
    assert core.outcome(200, "application/json", b'{"a":1}') == {"a": 1}
    assert core.outcome(204, "", b"") is None
    with pytest.raises(e.RemoteProtocolError):
        core.outcome(200, "text/html", b"<html>")


def test_pick_session_prefers_the_open_one() -> None:
    """Of several incarnations (a router keeps lost ones), the open one, else the last."""
    rows = [
        {"id": "a", "agent": "mock", "cwd": "/w", "name": "", "state": "lost"},
        {"id": "b", "agent": "mock", "cwd": "/w", "name": "", "state": "open"},
        {"id": "c", "agent": "mock", "cwd": "/w", "name": "", "state": "closed"},
        {"id": "d", "agent": "mock", "cwd": "/w", "name": "x", "state": "open"},
    ]
    assert core.pick_session(rows, "mock", "/w", "")["id"] == "b"  # type: ignore[index]
    assert core.pick_session(rows[2:3], "mock", "/w", "")["id"] == "c"  # type: ignore[index]
    assert core.pick_session(rows, "codex", "/w", "") is None


STREAM = (
    b"retry: 1000\n\n"
    b": heartbeat\n\n"
    b'id: 7\ndata: {"seq":7,"kind":"acp"}\n\n'
    b'event: lagged\ndata: {"lastSeq":7}\n\n'
    b'id: 8\r\ndata: {"seq":8,\r\ndata: "kind":"turn_ended"}\r\n\r\n'
)


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=8))
def test_sse_decoding_does_not_depend_on_how_bytes_arrive(cuts: list[int]) -> None:
    """However the stream is cut into reads, the same events come out, and the last id."""
    decoder = sse.SseDecoder()
    events = []
    start = 0
    for cut in [*sorted(set(cuts)), len(STREAM)]:
        decoder.receive_data(STREAM[start:cut])
        events += decoder.next_events()
        start = cut
    expected = [("message", 7), ("lagged", None), ("message", 8)]
    assert [(ev.event, ev.id) for ev in events] == expected
    assert events[2].json() == {"seq": 8, "kind": "turn_ended"}
    assert decoder.last_id == 8


def test_sse_refuses_what_is_not_an_event_stream() -> None:
    """An id that is not a seq, or a line past the limit: RemoteProtocolError."""
    with pytest.raises(e.RemoteProtocolError):
        sse.SseDecoder().receive_data(b"id: seven\n")
    with pytest.raises(e.RemoteProtocolError):
        sse.SseDecoder(max_line=10).receive_data(b"data: " + b"x" * 20)
    with pytest.raises(e.RemoteProtocolError):
        sse.Event("message", 1, "{not json").json()


# --- HTTP/1.1 framing (tether.remote.http11) -------------------------------------------

CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nx-trailer: 1\r\n\r\n"
)
LENGTH = b'HTTP/1.1 201 Created\r\nContent-Length: 7\r\nContent-Type: a/json\r\n\r\n{"a":1}'
CLOSE = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end"
INTERIM = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"


@pytest.mark.parametrize(
    ("raw", "status", "body", "keep_alive"),
    [
        pytest.param(CHUNKED, 200, b"hello, world", True, id="chunked"),
        pytest.param(LENGTH, 201, b'{"a":1}', True, id="length"),
        pytest.param(CLOSE, 200, b"until the end", False, id="until-close"),
        pytest.param(INTERIM, 204, b"", True, id="interim-then-204"),
    ],
)
@given(cuts=st.lists(st.integers(min_value=1, max_value=200), max_size=6))
def test_responses_are_read_however_bytes_arrive(
    raw: bytes, status: int, body: bytes, keep_alive: bool, cuts: list[int]
) -> None:
    """Each framing gives its status, body and keep-alive, whatever the reads' sizes."""
    reader = http11.ResponseReader("GET")
    got = b""
    start = 0
    for cut in [*sorted({c for c in cuts if c < len(raw)}), len(raw)]:
        reader.receive_data(raw[start:cut])
        got += reader.take_body()
        start = cut
    reader.receive_data(b"")  # the server closes (it may, after any response)
    got += reader.take_body()
    assert (reader.status, got, reader.done, reader.keep_alive) == (status, body, True, keep_alive)
    assert not reader.closed_early


def test_a_cut_response_is_not_whole() -> None:
    """The connection closing mid-body leaves the response unfinished, said as such."""
    reader = http11.ResponseReader("GET")
    reader.receive_data(LENGTH[:-3])
    reader.receive_data(b"")
    assert (reader.done, reader.closed_early) == (False, True)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"SSH-2.0-OpenSSH\r\n\r\n", id="not-http"),
        pytest.param(b"HTTP/1.1 2xx OK\r\n\r\n", id="bad-status"),
        pytest.param(b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", id="bad-header"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", id="bad-length"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", id="bad-chunk"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", id="overrun"
        ),
        pytest.param(b"HTTP/1.1 200 OK\r\n" + b"x: y\r\n" * 20000, id="huge-head"),
    ],
)
def test_malformed_responses_are_the_peers_fault(raw: bytes) -> None:
    """Parse, or raise RemoteProtocolError: nothing else."""
    with pytest.raises(e.RemoteProtocolError):
        http11.ResponseReader("GET").receive_data(raw)


def test_request_bytes() -> None:
    """A request line, Host, the headers, and always a Content-Length."""
    raw = http11.request_bytes("POST", "/v1/x", "h:1", {"A": "b"}, b"{}")
    assert raw == b"POST /v1/x HTTP/1.1\r\nHost: h:1\r\nA: b\r\nContent-Length: 2\r\n\r\n{}"
    assert b"Content-Length: 0\r\n" in http11.request_bytes("DELETE", "/", "h", {}, None)


def test_the_remote_flags_parse() -> None:
    """--server and --token-file are global; sessions rehome takes an id, --to-host and
    --replay; other commands refuse rehome's options."""
    from tether.cli._parse import parse

    inv = parse(["--server", "unix:/x.sock", "sessions", "rehome", "abcd1234", "--to-host", "h2"])
    assert (inv.server, inv.subcommand, inv.session, inv.to_host) == (
        "unix:/x.sock",
        "rehome",
        "abcd1234",
        "h2",
    )
    inv = parse(["mock", "--token-file", "/t", "sessions", "rehome", "--replay", "--key", "ab"])
    assert (inv.token_file, inv.replay, inv.key) == ("/t", True, "ab")
    with pytest.raises(e.UsageError):
        parse(["mock", "status", "--replay"])
    with pytest.raises(e.UsageError):
        parse(["--server", "", "mock", "status"])
