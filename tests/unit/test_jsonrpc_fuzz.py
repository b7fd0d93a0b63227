"""Property tests: the decoder never raises on peer input, and valid traffic round-trips exactly."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.jsonrpc import (
    EOF,
    NEED_DATA,
    JsonRpcConnection,
    LineFramer,
    Notification,
    Oversized,
    ProtocolViolation,
    Request,
    Response,
    encode,
)

# The shared 2-core machine makes wall-clock deadlines flaky; the examples are cheap anyway.
FUZZ = settings(deadline=None, max_examples=300)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    """Split data at the given offsets (taken modulo its length, in any order)."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


cuts = st.lists(st.integers(min_value=0, max_value=10_000), max_size=30)

# Fragments that look like JSON-RPC, so random bytes reach deep into classification rather
# than failing at the first byte.
fragments = st.sampled_from(
    [
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"\n",
        b"\r\n",
        b" ",
        b'"jsonrpc":"2.0"',
        b'"jsonrpc":"1.0"',
        b'"id":',
        b'"method":',
        b'"params":',
        b'"result":',
        b'"error":',
        b'{"code":-32603,"message":"x"}',
        b"0",
        b"1",
        b"1.0",
        b"-1",
        b"true",
        b"null",
        b"NaN",
        b'"0"',
        b'"session/prompt"',
        b"\xff",
        b"\xc3",
        b'"\\ud800"',
    ]
)
peer_bytes = st.one_of(st.binary(max_size=400), st.lists(fragments, max_size=60).map(b"".join))


def drain_all(conn: JsonRpcConnection) -> list[Any]:
    out: list[Any] = []
    while True:
        event = conn.next_event()
        if event is NEED_DATA or event is EOF:
            return out
        out.append(event)


@FUZZ
@given(data=peer_bytes, cuts=cuts, max_frame=st.sampled_from([8, 64, 1 << 20]))
def test_arbitrary_bytes_only_ever_yield_events(
    data: bytes, cuts: list[int], max_frame: int
) -> None:
    """Any bytes, chunked any way, produce only events, NEED_DATA and EOF, never an exception."""
    conn = JsonRpcConnection(max_frame_bytes=max_frame)
    # Some pending requests, so responses in the noise can match (or go stale).
    for i in range(3):
        conn.send_request("session/prompt", {"sessionId": f"s{i}"}, now=0.0)
    kinds = (Request, Notification, Response, ProtocolViolation)
    for chunk in chunked(data, cuts):
        conn.receive_data(chunk)
        assert all(isinstance(e, kinds) for e in drain_all(conn))
    conn.receive_data(b"")
    assert all(isinstance(e, kinds) for e in drain_all(conn))
    assert conn.next_event() is EOF
    # Whatever the noise did, the tables are still consistent with what was sent.
    assert set(conn.pending) <= {0, 1, 2}
    assert conn.stats.frames_in >= conn.stats.malformed + conn.stats.oversized


@FUZZ
@given(data=peer_bytes, cuts=cuts, max_frame=st.sampled_from([4, 32, 1 << 20]))
def test_framer_chunking_does_not_change_frames(
    data: bytes, cuts: list[int], max_frame: int
) -> None:
    """The framer yields the same frames however the stream is chunked, with bounded memory."""

    def run(chunks: list[bytes]) -> list[bytes | Oversized]:
        framer = LineFramer(max_frame)
        out: list[bytes | Oversized] = []
        for chunk in [*chunks, b""]:
            framer.feed(chunk)
            while (frame := framer.next_frame()) is not None and frame is not EOF:
                out.append(frame)
            assert framer.buffered <= max_frame
        return out

    whole = run([data])
    pieces = run(chunked(data, cuts))

    # Oversized lengths are lower bounds that depend on where the chunks fell.
    def norm(xs: list[bytes | Oversized]) -> list[bytes | str]:
        return ["<oversized>" if isinstance(x, Oversized) else x for x in xs]

    assert norm(pieces) == norm(whole)
    assert all(len(f) <= max_frame for f in whole if isinstance(f, bytes))


# --- round trip ----------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
params = st.one_of(
    st.none(),
    st.lists(json_values, max_size=4),
    st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)
request_ids = st.one_of(st.integers(min_value=-(2**31), max_value=2**31), st.text(max_size=8))

N_OURS = 6


@st.composite
def peer_traffic(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Requests and notifications from the peer, interleaved with answers to our N_OURS requests."""
    messages: list[dict[str, Any]] = []
    used: set[Any] = set()
    for _ in range(draw(st.integers(0, 8))):
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": draw(st.text(max_size=12))}
        p = draw(params)
        if p is not None:
            message["params"] = p
        if draw(st.booleans()):
            rid = draw(request_ids.filter(lambda r: (type(r), r) not in used))
            used.add((type(rid), rid))
            message = {"jsonrpc": "2.0", "id": rid, **message}
        messages.append(message)
    answered = draw(st.permutations(range(N_OURS)))[: draw(st.integers(0, N_OURS))]
    for our_id in answered:
        if draw(st.booleans()):
            reply = {"jsonrpc": "2.0", "id": our_id, "result": draw(json_values)}
        else:
            error = {"code": draw(st.integers(-33000, 0)), "message": draw(st.text(max_size=10))}
            reply = {"jsonrpc": "2.0", "id": our_id, "error": error}
        messages.insert(draw(st.integers(0, len(messages))), reply)
    return messages


def expected_event(message: dict[str, Any]) -> Any:
    if "method" not in message:
        our = message["id"]
        method = "session/prompt" if our % 2 else "initialize"
        session = f"s{our}" if our % 2 else None
        return Response(our, message.get("result"), message.get("error"), method, session)
    if "id" in message:
        return Request(message["id"], message["method"], message.get("params"))
    return Notification(message["method"], message.get("params"))


@FUZZ
@given(traffic=peer_traffic(), cuts=cuts, crlf=st.booleans())
def test_valid_traffic_round_trips(
    traffic: list[dict[str, Any]], cuts: list[int], crlf: bool
) -> None:
    """Valid messages, encoded and split arbitrarily, come out as exactly the same events."""
    conn = JsonRpcConnection()
    for i in range(N_OURS):
        if i % 2:
            conn.send_request("session/prompt", {"sessionId": f"s{i}"}, now=0.0)
        else:
            conn.send_request("initialize", now=0.0)
    stream = b"".join(encode(m) for m in traffic)
    if crlf:
        stream = stream.replace(b"\n", b"\r\n")
    events: list[Any] = []
    for chunk in chunked(stream, cuts):
        conn.receive_data(chunk)
        events += drain_all(conn)
    assert events == [expected_event(m) for m in traffic]
    assert [e.raw for e in events] == traffic
    answered = {m["id"] for m in traffic if "method" not in m}
    assert set(conn.pending) == set(range(N_OURS)) - answered
    assert conn.stats.frames_in == len(traffic)
