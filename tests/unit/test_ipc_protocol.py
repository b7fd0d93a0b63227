"""IPC v2 framing and validation (:mod:`tether.ipc.protocol`), no I/O."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.ipc import protocol
from tether.ipc.protocol import Envelope, IpcRejected, ResponseTracker, parse_request

MALFORMED = "QUEUE_PROTOCOL_MALFORMED_MESSAGE"
TEXT = [{"type": "text", "text": "hi"}]


def frame(**over: Any) -> bytes:
    """A valid prompt envelope, with fields replaced (a value of ``...`` removes it)."""
    env: dict[str, Any] = {
        "v": 2,
        "requestId": "r-1",
        "kind": "prompt",
        "deadlineMs": None,
        "payload": {"prompt": TEXT},
    }
    env.update(over)
    env = {k: v for k, v in env.items() if v is not ...}
    return json.dumps(env).encode()


def rejected(line: bytes, **kw: Any) -> IpcRejected:
    with pytest.raises(IpcRejected) as info:
        parse_request(line, **kw)
    return info.value


# --- envelope-level rejections ------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "detail", "rid"),
    [
        # not JSON at all, or not UTF-8, or nested beyond the parser's recursion limit
        (b"{this is not json", "QUEUE_PROTOCOL_INVALID_JSON", None),
        (b"", "QUEUE_PROTOCOL_INVALID_JSON", None),
        (b"\xff\xfe\xfa", "QUEUE_PROTOCOL_INVALID_JSON", None),
        (b"[" * 100_000 + b"]" * 100_000, "QUEUE_PROTOCOL_INVALID_JSON", None),
        # JSON, but not an object
        (b"[]", MALFORMED, None),
        (b'"prompt"', MALFORMED, None),
        (b"null", MALFORMED, None),
        (b"42", MALFORMED, None),
        # requestId
        (frame(requestId=...), MALFORMED, None),
        (frame(requestId=""), MALFORMED, None),
        (frame(requestId=7), MALFORMED, None),
        (frame(requestId=None), MALFORMED, None),
        (frame(requestId="r" * 201), MALFORMED, None),
        # version (the requestId is known by then, so the error names it)
        (frame(v=...), "QUEUE_PROTOCOL_UNSUPPORTED_VERSION", "r-1"),
        (frame(v=1), "QUEUE_PROTOCOL_UNSUPPORTED_VERSION", "r-1"),
        (frame(v="2"), "QUEUE_PROTOCOL_UNSUPPORTED_VERSION", "r-1"),
        (frame(v=3), "QUEUE_PROTOCOL_UNSUPPORTED_VERSION", "r-1"),
        # kind
        (frame(kind=...), "QUEUE_PROTOCOL_UNKNOWN_KIND", "r-1"),
        (frame(kind="explode"), "QUEUE_PROTOCOL_UNKNOWN_KIND", "r-1"),
        (frame(kind="PROMPT"), "QUEUE_PROTOCOL_UNKNOWN_KIND", "r-1"),
        (frame(kind=["prompt"]), "QUEUE_PROTOCOL_UNKNOWN_KIND", "r-1"),
        # deadlineMs
        (frame(deadlineMs=-1), MALFORMED, "r-1"),
        (frame(deadlineMs=1.5), MALFORMED, "r-1"),
        (frame(deadlineMs="100"), MALFORMED, "r-1"),
        (frame(deadlineMs=True), MALFORMED, "r-1"),
        # ownerGeneration
        (frame(ownerGeneration="1"), MALFORMED, "r-1"),
        (frame(ownerGeneration=1.0), MALFORMED, "r-1"),
        (frame(ownerGeneration=False), MALFORMED, "r-1"),
        # payload
        (frame(payload=[]), MALFORMED, "r-1"),
        (frame(payload="x"), MALFORMED, "r-1"),
        (frame(payload=None), MALFORMED, "r-1"),
    ],
)
def test_envelope_rejections(line: bytes, detail: str, rid: str | None) -> None:
    exc = rejected(line)
    assert exc.detail_code == detail
    assert exc.request_id == rid
    wire = exc.to_wire()
    assert wire["detailCode"] == detail
    assert wire["retryable"] is False
    assert wire["origin"] == "protocol"


def test_too_large_is_checked_before_parsing() -> None:
    line = frame(payload={"prompt": [{"type": "text", "text": "x" * 200}]})
    assert parse_request(line, max_frame_bytes=len(line)).request_id == "r-1"
    exc = rejected(line, max_frame_bytes=len(line) - 1)
    assert exc.detail_code == "QUEUE_REQUEST_TOO_LARGE"
    assert exc.request_id is None
    # even garbage is "too large" first: the size check must not parse anything
    assert rejected(b"{" * 65, max_frame_bytes=64).detail_code == "QUEUE_REQUEST_TOO_LARGE"


def test_default_limit_is_64_mebibytes() -> None:
    """Users pipe logs and diffs into prompts: acpx accepts 64 MiB messages (issue 9 item 9)."""
    assert protocol.DEFAULT_MAX_FRAME_BYTES == 64 * 1024 * 1024
    body = b"x" * protocol.DEFAULT_MAX_FRAME_BYTES
    assert rejected(body + b"x").detail_code == "QUEUE_REQUEST_TOO_LARGE"


# --- per-kind payload validation ---------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        ("prompt", {"prompt": TEXT}),
        ("prompt", {"prompt": TEXT, "wait": False, "permissionMode": "approve-all"}),
        ("prompt", {"prompt": [{"type": "text", "text": "a"}, {"type": "image", "data": ""}]}),
        ("cancel", {}),
        ("cancel", {"targetRequestId": "r-9"}),
        ("cancel", {"targetRequestId": None}),
        ("set_mode", {"modeId": "plan"}),
        ("set_config_option", {"configId": "model", "value": "mock-large"}),
        ("set_config_option", {"configId": "fast", "value": True}),
        ("set_config_option", {"configId": "n", "value": 3}),
        ("status", {}),
        ("status", {"anything": "ignored"}),
        ("close", {}),
        ("close", {"discard": True}),
        ("start_agent", {}),
        ("prompt", {"prompt": TEXT, "control": True}),
        ("prompt", {"prompt": TEXT, "wait": False, "updates": False}),
        ("watch", {"fromSeq": 3, "control": True}),
        ("answer", {"interactionId": "p-1", "answer": "allow"}),
        ("answer", {"interactionId": "e-1", "answer": "accept", "content": {"name": "Ada"}}),
    ],
)
def test_valid_payloads(kind: str, payload: dict[str, Any]) -> None:
    env = parse_request(frame(kind=kind, payload=payload, deadlineMs=250, ownerGeneration=3))
    assert env == Envelope("r-1", kind, payload, 250, 3)


def test_payload_defaults_to_empty_object() -> None:
    env = parse_request(frame(kind="status", payload=...))
    assert env.payload == {}
    assert env.deadline_ms is None
    assert env.owner_generation is None


def test_trailing_newline_is_accepted() -> None:
    assert parse_request(frame() + b"\n").kind == "prompt"


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        ("prompt", {}),
        ("prompt", {"prompt": []}),
        ("prompt", {"prompt": "hi"}),
        ("prompt", {"prompt": ["hi"]}),
        ("prompt", {"prompt": [TEXT[0], None]}),
        ("prompt", {"prompt": TEXT, "wait": "yes"}),
        ("prompt", {"prompt": TEXT, "wait": 1}),
        ("cancel", {"targetRequestId": 5}),
        ("cancel", {"targetRequestId": ["r-1"]}),
        ("set_mode", {}),
        ("set_mode", {"modeId": 1}),
        ("set_mode", {"modeId": None}),
        ("set_config_option", {"value": "x"}),
        ("set_config_option", {"configId": 1, "value": "x"}),
        ("set_config_option", {"configId": "model"}),
        ("set_config_option", {"configId": "model", "value": None}),
        ("set_config_option", {"configId": "model", "value": ["a"]}),
        ("set_config_option", {"configId": "model", "value": {"a": 1}}),
        ("prompt", {"prompt": TEXT, "control": "yes"}),
        ("prompt", {"prompt": TEXT, "updates": 0}),
        ("watch", {"control": 1}),
        ("answer", {"answer": "allow"}),
        ("answer", {"interactionId": "p-1"}),
        ("answer", {"interactionId": 7, "answer": "allow"}),
        ("answer", {"interactionId": "e-1", "answer": "accept", "content": ["Ada"]}),
        ("close", {"discard": "yes"}),
    ],
)
def test_invalid_payloads(kind: str, payload: dict[str, Any]) -> None:
    exc = rejected(frame(kind=kind, payload=payload))
    assert exc.detail_code == MALFORMED
    assert exc.request_id == "r-1"


def test_request_frame_round_trips() -> None:
    line = protocol.request_frame("r-x", "set_mode", {"modeId": "plan"}, deadline_ms=5)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert parse_request(line) == Envelope("r-x", "set_mode", {"modeId": "plan"}, 5, None)
    line = protocol.request_frame("r-y", "close", {}, owner_generation=4)
    assert parse_request(line).owner_generation == 4


def test_encode_is_one_line_even_with_newlines_in_strings() -> None:
    data = protocol.encode({"type": "update", "text": "a\nb\u2028c"})
    assert data.endswith(b"\n")
    assert data.count(b"\n") == 1
    assert json.loads(data)["text"] == "a\nb\u2028c"


# --- hypothesis: the parser is total ------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes_give_an_envelope_or_a_rejection(data: bytes) -> None:
    outcome: Envelope | IpcRejected
    try:
        outcome = parse_request(data, max_frame_bytes=256)
    except IpcRejected as exc:
        outcome = exc
    assert isinstance(outcome, Envelope | IpcRejected)
    if isinstance(outcome, IpcRejected):
        assert outcome.detail_code.startswith("QUEUE_")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "v": st.sampled_from([2, 1, "2", None]) | _json,
            "requestId": st.sampled_from(["r-1", ""]) | _json,
            "kind": st.sampled_from(sorted(protocol.KINDS)) | _json,
            "deadlineMs": st.none() | st.integers() | _json,
            "ownerGeneration": st.integers() | _json,
            "payload": st.fixed_dictionaries(
                {},
                optional={
                    "prompt": st.just(TEXT) | _json,
                    "modeId": st.text() | _json,
                    "configId": st.text() | _json,
                    "value": _json,
                    "targetRequestId": _json,
                    "wait": _json,
                },
            )
            | _json,
        },
    )
)
def test_structured_envelopes_give_an_envelope_or_a_rejection(obj: dict[str, Any]) -> None:
    """Near-valid envelopes: every field either well-typed or arbitrary JSON."""
    outcome: Envelope | IpcRejected
    try:
        outcome = parse_request(json.dumps(obj).encode())
    except IpcRejected as exc:
        outcome = exc
    if isinstance(outcome, IpcRejected):
        assert outcome.detail_code.startswith("QUEUE_")
        return
    env = outcome
    assert env.kind in protocol.KINDS
    assert env.request_id == obj["requestId"]
    assert isinstance(env.payload, dict)


# --- ResponseTracker: what the caller accepts, in which order ------------------------


def f(kind: str, rid: str | None = "r-1") -> dict[str, Any]:
    return {"type": kind, "requestId": rid}


@pytest.mark.parametrize(
    "sequence",
    [
        ["ack", "result"],
        ["ack", "error"],
        ["ack", "update", "update", "permission", "session_ended", "result"],
        ["error"],  # rejected on admission: no ack, one terminal frame
        ["result"],
    ],
)
def test_tracker_accepts_valid_orders(sequence: list[str]) -> None:
    t = ResponseTracker("r-1")
    assert t.feed({"type": "hello", "v": 2})  # hello is never counted
    for kind in sequence:
        assert t.feed(f(kind)) is not None
    assert t.finished
    assert t.seen_types == sequence
    assert t.frames == len(sequence)


@pytest.mark.parametrize(
    ("sequence", "message"),
    [
        (["ack", "ack"], "second ack"),
        (["ack", "result", "result"], "after the terminal"),
        (["ack", "result", "update"], "after the terminal"),
        (["ack", "error", "ack"], "after the terminal"),
        (["error", "result"], "after the terminal"),
        (["update"], "before the ack"),
        (["permission"], "before the ack"),
        (["update", "ack"], "before the ack"),
    ],
)
def test_tracker_rejects_bad_orders(sequence: list[str], message: str) -> None:
    t = ResponseTracker("r-1")
    with pytest.raises(ValueError, match=message):  # noqa: PT012 -- the violation is the sequence
        for kind in sequence:
            t.feed(f(kind))


def test_tracker_ignores_other_requests_frames() -> None:
    t = ResponseTracker("r-1")
    assert t.feed(f("ack", "r-2")) is None
    assert t.feed(f("result", "r-2")) is None
    assert not t.acked
    assert not t.finished
    t.feed(f("ack"))
    assert t.feed(f("update", "r-2")) is None
    t.feed(f("result"))
    assert t.feed(f("result", "r-2")) is None  # another request's: still ignored
    assert t.seen_types == ["ack", "result"]


def test_tracker_accepts_broadcasts_without_request_id() -> None:
    """``session_ended`` is broadcast with requestId null, before or after the ack."""
    t = ResponseTracker("r-1")
    assert t.feed(f("session_ended", None)) is not None
    t.feed(f("ack"))
    assert t.feed(f("session_ended", None)) is not None
    t.feed(f("error", None))  # a rejection whose requestId could not be read
    assert t.finished
