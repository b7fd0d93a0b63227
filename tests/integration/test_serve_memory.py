"""The gateway's memory under many streams, against a real gateway: one turn relayed to
hundreds of SSE clients that do not read is not copied per stream, and the memory comes
back once they are gone. Limits (generous), not timings: RSS from /proc."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from tests.integration._serve import Gateway, gateway

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = pytest.mark.integration
__all__ = ["gateway"]

STREAMS = 300
MIB = 1024 * 1024


def _kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def _sse_clients(gw: Gateway) -> int:
    return int(gw.http.get("/v1/health").json()["sseClients"])


def _until(check: object, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_one_turn_to_many_idle_streams_is_not_copied_per_stream_and_memory_returns(
    gateway: Gateway, project_dir: Path
) -> None:
    sid = gateway.ensure(project_dir)
    warm = gateway.prompt(sid, "echo warm")
    gateway.until_turn_end(sid, warm["requestId"], query=f"?from={warm['fromSeq']}")
    host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
    socks: list[socket.socket] = []
    try:
        for _ in range(STREAMS):  # clients that connect and never read
            sock = socket.create_connection((host, int(port)), timeout=10)
            socks.append(sock)
            sock.sendall(
                f"GET /v1/sessions/{sid}/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Authorization: Bearer {gateway.token}\r\n\r\n".encode()
            )
        _until(lambda: _sse_clients(gateway) >= STREAMS, "the streams were not all held")
        with_streams = _kib(gateway.proc.pid, "VmRSS")
        turn = gateway.prompt(sid, "stream 2000 x")  # ~0.5 MB of journal entries
        gateway.until_turn_end(sid, turn["requestId"], query=f"?from={turn['fromSeq']}")
        peak = _kib(gateway.proc.pid, "VmHWM")
        # Each stream holds a bounded window of the turn, not all of it (before: the
        # whole turn per stream, ~+130 MiB here).
        assert peak - with_streams < 48 * MIB, (with_streams, peak)
    finally:
        for sock in socks:
            sock.close()
    _until(lambda: _sse_clients(gateway) == 0, "the closed streams were still counted")
    # Given back once the relay is quiet (before: kept at the peak for good).
    _until(
        lambda: _kib(gateway.proc.pid, "VmRSS") < with_streams + 16 * MIB,
        f"RSS stayed at {_kib(gateway.proc.pid, 'VmRSS') // MIB} MiB"
        f" (with the streams open: {with_streams // MIB} MiB)",
        seconds=30,
    )
