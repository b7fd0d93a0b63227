"""A server's unexpected failure leaves its traceback on the server's stderr: its caller
got only ``500 an unexpected failure`` (before, the traceback went nowhere, and the 500s
of bench/scale.py's closes could not be read)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

pytest.importorskip("starlette", reason="the gateway's routes (the serve extra)")

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from tether.serve.app import endpoint
from tether.serve.command import server_logs


@pytest.fixture
def tether_logger() -> Iterator[None]:
    """The ``tether`` logger as it was, restored after the test configured it."""
    root = logging.getLogger("tether")
    saved = (list(root.handlers), root.level, root.propagate)
    try:
        yield
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
        root.propagate = saved[2]


class _Gateway:
    def __init__(self) -> None:
        self.problems_total: dict[int, int] = {}


def _failing_app() -> TestClient:
    @endpoint
    async def broken(request: Request) -> Response:
        raise ValueError("filedescriptor out of range in select()")

    app = Starlette(routes=[Route("/v1/sessions/{id}", broken, methods=["DELETE"])])
    app.state.gateway = _Gateway()
    return TestClient(app)


@pytest.mark.usefixtures("tether_logger")
def test_an_unexpected_failure_is_a_500_and_its_traceback_is_on_stderr() -> None:
    """The caller gets a plain 500; the server's stderr gets the route and the traceback."""
    stderr = io.StringIO()
    server_logs(verbose=False, stream=stderr)
    answer = _failing_app().delete("/v1/sessions/abc")
    assert answer.status_code == 500
    assert "filedescriptor" not in answer.text  # nothing internal goes to the caller
    lines = [json.loads(x) for x in stderr.getvalue().splitlines()]
    assert len(lines) == 1, stderr.getvalue()
    assert lines[0]["level"] == "error"
    assert lines[0]["event"] == "unexpected failure in DELETE /v1/sessions/abc"
    assert "ValueError: filedescriptor out of range in select()" in lines[0]["exc"]


@pytest.mark.usefixtures("tether_logger")
def test_a_server_logs_warnings_not_information() -> None:
    """Warnings and errors reach stderr; information stays out of it."""
    stderr = io.StringIO()
    server_logs(verbose=False, stream=stderr)
    logging.getLogger("tether.serve").info("routine")
    logging.getLogger("tether.state.journal").warning("journal write failed (disk I/O error)")
    events = [json.loads(x)["event"] for x in stderr.getvalue().splitlines()]
    assert events == ["journal write failed (disk I/O error)"]
