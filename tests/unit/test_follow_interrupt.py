"""A follower interrupted while it connects to the owner does not start a watch: the
interrupt found no connection to wake, so the follower looks at its stop flag once it
has one (else it waited on the owner until the session ended)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tether.state.journal import follow


class FakeConn:
    """An owner connection that records what was asked of it."""

    def __init__(self) -> None:
        self.hello: dict[str, Any] = {}
        self.sent: list[str] = []
        self.closed = False
        self.before_block: Any = None

    def send(self, method: str, _payload: Any, **_kw: Any) -> None:
        self.sent.append(method)

    def wait(self, _rid: str, **_kw: Any) -> dict[str, Any]:
        raise OSError("the owner went away")  # ends a watch that was started

    def close(self) -> None:
        self.closed = True


def test_an_interrupt_during_the_connect_stops_the_watch_before_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop = threading.Event()
    follower = follow.Follower(object(), "k" * 64, 1, lambda _s, _l: None, stop=stop)  # type: ignore[arg-type]
    conn = FakeConn()

    def connect(_path: str, **_kw: Any) -> FakeConn:
        follower.interrupt()  # from another thread, while we connected
        return conn

    monkeypatch.setattr(follow.OwnerConnection, "connect", staticmethod(connect))
    assert follower._attach()
    assert conn.sent == []
    assert conn.closed
    assert follower.conn is None
