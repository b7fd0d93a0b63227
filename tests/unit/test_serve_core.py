"""The gateway's cores with no server: body checks, the problem table, the token and bind
rules, the SSE ring. (They import neither Starlette nor uvicorn.)"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether import errors
from tether.serve import auth, bodies, problems, sse, stream

DETAIL_CODES = {
    "BAD_JSON",
    "WRONG_TYPE",
    "UNKNOWN_FIELD",
    "MISSING_FIELD",
    "BAD_VALUE",
    "BODY_TOO_LARGE",
    "UNSUPPORTED_MEDIA_TYPE",
}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        pytest.param(b"{", "BAD_JSON", id="truncated"),
        pytest.param(b"\xc3\x28", "BAD_JSON", id="not-utf8"),
        pytest.param(b"null", "WRONG_TYPE", id="null"),
        pytest.param(b'"text"', "WRONG_TYPE", id="string"),
        pytest.param(b'{"prompt": "x", "extra": 1}', "UNKNOWN_FIELD", id="unknown"),
        pytest.param(b'{"prompt": true}', "WRONG_TYPE", id="bool-prompt"),
        pytest.param(b'{"prompt": "x", "timeoutMs": true}', "WRONG_TYPE", id="bool-is-not-int"),
        pytest.param(b'{"prompt": "x", "timeoutMs": 1e400}', "WRONG_TYPE", id="inf"),
        pytest.param(b"{}", "MISSING_FIELD", id="missing"),
        pytest.param(b"", "MISSING_FIELD", id="empty-body"),
    ],
)
def test_bad_bodies_are_refused_with_their_code(body: bytes, code: str) -> None:
    """Each kind of bad body raises a UsageError naming its kind."""
    with pytest.raises(errors.UsageError) as caught:
        bodies.parse(body, bodies.PROMPT)
    assert caught.value.detail_code == code
    assert problems.status_of(caught.value) in (400, 422)


def test_good_bodies_keep_only_documented_fields() -> None:
    """A valid body comes back as given; null optional fields count as not given."""
    assert bodies.parse(b'{"prompt": "hi", "timeoutMs": null}', bodies.PROMPT) == {"prompt": "hi"}
    assert bodies.parse(b"  ", bodies.CANCEL) == {}
    value = bodies.parse(b'{"configId": "m", "value": false}', bodies.CONFIG)
    assert value == {"configId": "m", "value": False}


@given(st.binary(max_size=200))
def test_any_bytes_parse_or_raise_a_known_usage_error(data: bytes) -> None:
    """Fuzz: a body either parses or raises UsageError with one of the table's codes."""
    for spec in (bodies.ENSURE, bodies.PROMPT, bodies.CANCEL, bodies.CONFIG):
        code = None
        try:
            bodies.parse(data, spec)
        except errors.UsageError as exc:
            code = exc.detail_code
        assert code is None or code in DETAIL_CODES


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(), st.lists, max_leaves=5))
def test_any_prompt_value_is_blocks_or_a_usage_error(value: object) -> None:
    """Whatever JSON a client sends as ``prompt``, we get blocks or a 4xx, never a crash."""
    status = None
    blocks: list[dict[str, object]] = []
    body = ('{"prompt": ' + json.dumps(value) + "}").encode()
    try:
        blocks = bodies.prompt_blocks(bodies.parse(body, bodies.PROMPT)["prompt"])
    except errors.UsageError as exc:
        status = problems.status_of(exc)
    assert status is None or 400 <= status < 500
    assert all(isinstance(b, dict) and isinstance(b["type"], str) for b in blocks)


def test_media_type_and_size() -> None:
    """A body must say application/json; an empty one needs no type."""
    bodies.check_media_type(None, b"")
    bodies.check_media_type("application/json; charset=utf-8", b"{}")
    with pytest.raises(errors.UsageError) as caught:
        bodies.check_media_type("text/plain", b"{}")
    assert problems.status_of(caught.value) == 415
    assert problems.status_of(bodies.too_large(10, 5)) == 413


def _subclasses(cls: type[errors.TetherError]) -> list[type[errors.TetherError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out += _subclasses(sub)
    return out


@pytest.mark.parametrize("cls", _subclasses(errors.TetherError), ids=lambda c: c.__name__)
def test_every_error_class_has_a_status_and_usage_errors_are_4xx(
    cls: type[errors.TetherError],
) -> None:
    """The problem table covers the whole tree; the caller's mistakes are never 5xx."""
    status, doc = problems.problem(cls("boom", secret_field="x", stderr_tail="hidden"))
    assert 400 <= status < 600
    assert doc["status"] == status
    assert doc["detailCode"] == cls.default_detail_code
    assert "stderr_tail" not in doc["fields"]
    if issubclass(cls, errors.UsageError | errors.NoSession):
        assert 400 <= status < 500


@pytest.mark.parametrize(
    ("cls", "status"),
    [
        (errors.NoSession, 404),
        (errors.QueueOverloaded, 429),
        (errors.SessionClosed, 409),
        (errors.OwnerUnavailable, 503),
        (errors.PromptTimeout, 504),
        (errors.AgentExited, 502),
        (errors.PermissionDenied, 403),
        (errors.InternalError, 500),
    ],
)
def test_problem_statuses(cls: type[errors.TetherError], status: int) -> None:
    assert problems.status_of(cls("x")) == status


def test_an_agent_refusing_our_params_is_422() -> None:
    exc = errors.AgentRequestError("no such mode", acp={"code": -32602})
    assert problems.status_of(exc) == 422
    assert problems.status_of(errors.AgentRequestError("crash", acp={"code": -32603})) == 502


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("example.org", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert auth.is_loopback(host) is loopback


def test_token_rules(tether_home: Path) -> None:
    """Generated once (0600, stable); a non-loopback bind needs --token; short tokens and
    a token file others can read are refused; comparison needs the Bearer scheme."""
    token, path = auth.choose_token(None, "127.0.0.1")
    assert path is not None
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert auth.choose_token(None, None) == (token, path)
    assert len(token) >= 40
    with pytest.raises(errors.UsageError, match="explicit --token"):
        auth.choose_token(None, "0.0.0.0")
    assert auth.choose_token("x" * 20, "0.0.0.0") == ("x" * 20, None)
    with pytest.raises(errors.UsageError, match="at least"):
        auth.choose_token("short", None)
    assert auth.authorized(f"Bearer {token}", token)
    assert auth.authorized(f"bearer {token}", token)
    assert not auth.authorized(token, token)
    assert not auth.authorized(f"Basic {token}", token)
    assert not auth.authorized(None, token)
    assert not auth.authorized(f"Bearer {token[:-1]}", token)
    os.chmod(path, 0o644)
    with pytest.raises(errors.StatePermission, match="readable by other users"):
        auth.load_or_create_token()


def test_sse_lines_never_carry_a_carriage_return() -> None:
    """JSON allows CR only between tokens; SSE would read it as a line end."""
    assert stream.sse_event(3, '{"a":\r1}') == 'id: 3\ndata: {"a":1}\n\n'
    assert sse.sse_control("lagged", {"lastSeq": 9}) == 'event: lagged\ndata: {"lastSeq":9}\n\n'


def test_the_ring_keeps_the_newest_entries_within_its_bounds() -> None:
    """Past its bound the ring drops its oldest entries in bulk and says where it starts;
    a cursor inside it gets the entries from there; session_ended marks the end."""

    async def run() -> None:
        hub = stream.Hub("k" * 64, asyncio.get_running_loop(), ring_entries=16)
        hub._started(1)
        for seq in range(1, 41):
            hub._take([hub._chunk(seq, f'{{"seq":{seq},"kind":"acp"}}')])
        assert hub.ring_count <= 16
        assert hub.first == hub.chunks[0].first
        assert [c.first for c in hub.chunks] == list(range(hub.first, 41))
        assert hub.next_seq == 41
        got = hub.slice_from(hub.first + 2)
        assert got is not None
        data, cursor = got
        assert cursor == 41
        assert data.startswith(f"id: {hub.first + 2}\n".encode())
        assert data.count(b"\nid: ") == 40 - hub.first - 2
        assert hub.slice_from(41) is None
        assert not hub.ended
        hub._take([hub._chunk(41, '{"seq":41,"kind":"session_ended"}')])
        assert hub.ended

    asyncio.run(run())
