"""HTTP problem documents back into the exception tree (``error_from_wire``), and the
remote client's SSE framing: no I/O."""

from __future__ import annotations

import json

import pytest

from tether import errors
from tether.client.remote_stream import SseEvent, SseParser
from tether.serve import problems


@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(errors.NoSession("no such session", session_key="k"), id="no-session"),
        pytest.param(errors.AlreadyAnswered("late", answer="allow"), id="already-answered"),
        pytest.param(errors.QueueOverloaded("full"), id="overloaded"),
        pytest.param(errors.PromptTimeout("slow", phase="turn"), id="timeout"),
        pytest.param(errors.UsageError("bad", detail_code="BAD_VALUE", field="x"), id="usage"),
        pytest.param(errors.VisibilityDenied("hidden", rule="r"), id="visibility"),
        pytest.param(errors.HostUnavailable("down"), id="fleet"),
    ],
)
def test_a_problem_document_is_the_error_the_gateway_raised(exc: errors.TetherError) -> None:
    """The gateway's problem document (:func:`tether.serve.problems.problem`) comes back
    as the very class, with its message, detail code and fields."""
    _status, doc = problems.problem(exc)
    back = errors.error_from_wire(json.loads(json.dumps(doc)))
    assert type(back) is type(exc)
    assert back.message == exc.message
    assert back.detail_code == exc.detail_code
    assert back.fields == exc.fields
    assert back.exit_code == exc.exit_code


@pytest.mark.parametrize(
    ("status", "title", "cls", "detail_code"),
    [
        pytest.param(401, "Unauthorized", errors.PermissionDenied, "UNAUTHORIZED", id="401"),
        pytest.param(404, "Not Found", errors.UsageError, "NOT_FOUND", id="404"),
        pytest.param(405, "Method Not Allowed", errors.UsageError, "METHOD_NOT_ALLOWED", id="405"),
        pytest.param(418, "I'm a teapot", errors.UsageError, "HTTP_418", id="other-4xx"),
        pytest.param(504, "Gateway Timeout", errors.TetherTimeout, "TIMEOUT", id="504"),
        pytest.param(500, "Internal Server Error", errors.TetherError, "RUNTIME_ERROR", id="500"),
    ],
)
def test_a_plain_problem_is_the_class_its_status_says(
    status: int, title: str, cls: type[errors.TetherError], detail_code: str
) -> None:
    """A problem with no Tether error behind it (a 401, an unknown route, a proxy's
    5xx) becomes the class of its status; a refused token is PermissionDenied."""
    back = errors.error_from_wire(problems.plain(status, title))
    assert type(back) is cls
    assert back.detail_code == detail_code
    assert str(status) in back.message


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        pytest.param(503, "HOST_UNAVAILABLE", errors.HostUnavailable, id="host-unavailable"),
        pytest.param(503, "INDEX_UNAVAILABLE", errors.IndexUnavailable, id="index-unavailable"),
        pytest.param(404, "NO_SESSION", errors.NoSession, id="no-session"),
        pytest.param(401, "UNAUTHORIZED", errors.PermissionDenied, id="unauthorized"),
        pytest.param(422, "BAD_VALUE", errors.UsageError, id="bad-value"),
    ],
)
def test_a_routers_problem_is_the_class_its_code_names(
    status: int, code: str, cls: type[errors.TetherError]
) -> None:
    """A fleet router's own problems carry a detail code in ``code`` (no class name):
    it names the class where one defines it, else the status decides."""
    doc = {"type": "about:blank", "title": "t", "status": status, "detail": "d", "code": code}
    back = errors.error_from_wire(doc)
    assert type(back) is cls
    assert back.detail_code == code


def test_the_ipc_form_is_unchanged() -> None:
    """An IPC error (``type`` the class name) is read as before, ``status`` or not."""
    wire = errors.NoSession("gone", session_key="k").to_wire()
    assert type(errors.error_from_wire(wire)) is errors.NoSession
    assert type(errors.error_from_wire({"message": "m"})) is errors.TetherError


def test_sse_framing() -> None:
    """Events end at a blank line; ids, names and multi-line data are kept; comments,
    ``retry:`` and data-less events are dropped."""
    parser = SseParser()
    lines = [
        "retry: 1000",
        "",
        ": heartbeat",
        "",
        "id: 7",
        'data: {"seq":7}',
        "",
        "event: lagged",
        "data: {",
        'data: "lastSeq": 7}',
        "",
        "id: 8",
        "",
    ]
    events = [e for e in map(parser.feed, lines) if e is not None]
    assert events == [
        SseEvent("message", "7", '{"seq":7}'),
        SseEvent("lagged", None, '{\n"lastSeq": 7}'),
    ]


def test_an_internal_error_names_what_failed_even_when_it_says_nothing() -> None:
    """A bare ``assert`` fails with an empty message: the caller was told
    ``internal error: `` and nothing more (the owner on an unsupported event loop)."""
    from tether.errors import InternalError

    bare = InternalError.of(AssertionError(), "details in /x/owner.log")
    assert str(bare) == "unexpected error: AssertionError (details in /x/owner.log)"
    said = InternalError.of(ValueError("bad seq"), "details in /x/owner.log")
    assert str(said) == "unexpected error: ValueError: bad seq (details in /x/owner.log)"
    assert bare.detail_code == "INTERNAL_ERROR"
