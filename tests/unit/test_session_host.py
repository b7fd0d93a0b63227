"""A session host's pieces without owners: what it answers a start, how much it takes
for the files it may open, each task's log context, each line's log file."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import resource
import socket
from pathlib import Path
from typing import Any

import pytest

from tether import _log, sessionhost
from tether.owner import host as host_mod
from tether.owner.host import SessionHost
from tether.owner.host_logs import SessionLogs


def request(host: SessionHost, payload: Any, n_fds: int = 2) -> dict[str, Any]:
    pipes = [os.pipe() for _ in range(n_fds)]
    fds = [w for _, w in pipes]
    try:
        return dict(host._take(json.dumps(payload).encode(), fds))
    finally:
        for r, _ in pipes:
            os.close(r)


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Any:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = {"A": "1", "TETHER_OWNER_OF": "session-host"}
    started: list[str] = []

    async def make() -> SessionHost:
        return SessionHost(theirs, 2, env)

    made = asyncio.run(make())
    monkeypatch.setattr(made, "_start", lambda key, fd: started.append(key) or _held(made, key))
    yield made, started
    ours.close()
    theirs.close()


def _held(host: SessionHost, key: str) -> None:
    host.tasks[object()] = key  # type: ignore[index]  # a stand-in for the owner's task


def test_a_start_of_the_host_s_environment_is_taken_until_the_host_is_full(host: Any) -> None:
    made, started = host
    env = {"A": "1", "TETHER_OWNER_OF": "k1"}  # the hint differs per session: no matter
    assert request(made, {"key": "k1", "env": env}) == {"ok": True, "sessions": 1}
    assert request(made, {"key": "k2", "env": env}) == {"ok": True, "sessions": 2}
    assert request(made, {"key": "k3", "env": env}) == {"ok": False, "full": True, "sessions": 2}
    assert started == ["k1", "k2"]


def test_another_environment_is_refused_and_a_bad_request_answered(host: Any) -> None:
    made, started = host
    other = request(made, {"key": "k", "env": {"A": "2"}})
    assert other["refused"] is True
    assert request(made, {"key": "k"})["ok"] is False
    assert "malformed" in request(made, {"key": "k", "env": {"A": "1"}}, n_fds=1)["error"]
    assert "malformed" in request(made, ["not", "an", "object"])["error"]
    assert started == []


def test_a_stopping_host_takes_no_more(host: Any) -> None:
    made, started = host
    made.stopping = "signal-SIGTERM"
    assert request(made, {"key": "k", "env": {"A": "1"}}) == {"ok": False, "retiring": True}
    assert started == []


def test_environment_id_ignores_only_the_requester_hint() -> None:
    a = sessionhost.environment_id({"X": "1", "TETHER_OWNER_OF": "a"})
    assert a == sessionhost.environment_id({"TETHER_OWNER_OF": "b", "X": "1"})
    assert a != sessionhost.environment_id({"X": "2", "TETHER_OWNER_OF": "a"})


@pytest.mark.parametrize(
    ("soft", "hard", "asked", "raised_to", "held"),
    [
        (1024, 4096, 50, 128 + 24 * 50, 50),  # raised to what fifty need
        (1024, 1024, 50, None, (1024 - 128) // 24),  # cannot be raised: fewer sessions
        (65536, 65536, 50, None, 50),  # enough already: untouched
    ],
)
def test_a_host_raises_its_open_files_limit_or_takes_fewer(
    monkeypatch: pytest.MonkeyPatch,
    soft: int,
    hard: int,
    asked: int,
    raised_to: int | None,
    held: int,
) -> None:
    limits = {"now": (soft, hard)}
    set_to: list[int] = []

    def setrlimit(_which: int, value: tuple[int, int]) -> None:
        set_to.append(value[0])
        limits["now"] = value

    monkeypatch.setattr(resource, "getrlimit", lambda _which: limits["now"])
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    assert host_mod._room_for(asked) == held
    assert set_to == ([raised_to] if raised_to is not None else [])


def test_each_task_logs_with_its_own_context() -> None:
    """Two hosted owners bind their session to their own tasks: neither's lines carry
    the other's, and nothing is left bound outside them."""
    seen: dict[str, dict[str, Any]] = {}

    async def owner(key: str) -> None:
        _log.bind_task(sessionId=key)
        await asyncio.sleep(0)
        seen[key] = _log.context()

    async def main() -> None:
        await asyncio.gather(owner("a"), owner("b"))

    asyncio.run(main())
    assert seen["a"]["sessionId"] == "a"
    assert seen["b"]["sessionId"] == "b"
    assert "sessionId" not in _log.context()


def test_a_line_goes_to_its_session_s_log_and_the_rest_to_the_host_s(
    tether_home: Path,
) -> None:
    host_stream = io.StringIO()
    handler = SessionLogs(host_stream)
    handler.setFormatter(_log.JsonFormatter())
    logger = logging.getLogger("tether.test.hostlogs")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        logger.info("mine", extra={"tether_fields": {"sessionId": "k" * 64}})
        logger.info("the host's", extra={"tether_fields": {}})
        handler.forget("k" * 64)
        logger.info("again", extra={"tether_fields": {"session_key": "k" * 64}})
    finally:
        logger.removeHandler(handler)
        handler.forget("k" * 64)
    from tether import sessions

    lines = Path(sessions.log_path("k" * 64)).read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["mine", "again"]
    assert [json.loads(line)["event"] for line in host_stream.getvalue().splitlines()] == [
        "the host's"
    ]
