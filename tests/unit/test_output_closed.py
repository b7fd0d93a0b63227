"""Output over a real pipe whose reader has gone: one OutputClosed, then silence."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator

import pytest

from tether.cli.output import Output
from tether.errors import OutputClosed, TetherError

UPDATE = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}
PARAMS = {"sessionId": "s", "update": UPDATE}
CHUNK = {"jsonrpc": "2.0", "method": "session/update", "params": PARAMS}


def render_and_flush(out: Output) -> None:
    out.frame("in", CHUNK)  # direct: written at once; batched: kept until the flush
    out.flush()


@pytest.fixture
def closed_pipe() -> Iterator[io.TextIOWrapper]:
    """A text stream whose pipe has no reader (writes raise BrokenPipeError)."""
    r, w = os.pipe()
    os.close(r)
    stream = io.TextIOWrapper(io.FileIO(w, "w"), write_through=True)
    try:
        yield stream
    finally:
        stream.close()


@pytest.mark.parametrize("fmt", ["text", "json", "quiet"])
@pytest.mark.parametrize("batch", [False, True], ids=["direct", "batched"])
def test_closed_stdout_raises_output_closed_once(
    closed_pipe: io.TextIOWrapper, fmt: str, batch: bool
) -> None:
    """The first write (or flush) to a closed stdout raises OutputClosed; later ones are no-ops."""
    err = io.StringIO()
    out = Output(fmt, stdout=closed_pipe, stderr=err, batch=batch)
    with pytest.raises(OutputClosed):
        render_and_flush(out)
    assert out.closed
    out.frame("in", CHUNK)
    out.done("end_turn")
    out.control({"action": "x"}, text="x", quiet="x")
    assert err.getvalue() == ""


def test_error_after_stdout_closed_never_raises(closed_pipe: io.TextIOWrapper) -> None:
    """Reporting an error with stdout gone (json envelope on stdout) does not raise."""
    err = io.StringIO()
    out = Output("json", stdout=closed_pipe, stderr=err)
    out.error(TetherError("boom"))
    assert out.closed
    out.error(TetherError("again"))
    assert "[error] boom" in err.getvalue()


def test_closed_stderr_is_ignored(closed_pipe: io.TextIOWrapper) -> None:
    """Banners and error lines to a closed stderr are dropped, not raised."""
    out = Output("text", stdout=io.StringIO(), stderr=closed_pipe)
    out.banner("hello")
    out.error(TetherError("boom"))


def test_output_closed_exit_status() -> None:
    """A closed stdout exits 141 (128 + SIGPIPE), like a tool killed by SIGPIPE."""
    assert OutputClosed.exit_code == 141
