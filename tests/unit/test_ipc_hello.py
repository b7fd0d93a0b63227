"""Both IPC client flavours say the same thing when an owner's hello does not come:
no socket, a silent owner (stopped, hung), a hello of another IPC version."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.errors import OwnerUnavailable, OwnerUnresponsive
from tether.ipc import protocol
from tether.ipc.aio_client import AsyncOwnerConnection
from tether.ipc.client import OwnerConnection


def _serve(path: Path, hello: bytes | None) -> Iterator[None]:
    """A listener at ``path`` that says ``hello`` (None: nothing) to each caller."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    held: list[socket.socket] = []
    done = threading.Event()

    def run() -> None:
        listener.settimeout(0.05)
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)
            if hello is not None:
                conn.sendall(hello)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


@pytest.fixture
def sock_path(tmp_path: Path) -> Path:
    return tmp_path / "o.sock"


def _both(path: Path) -> list[BaseException]:
    """What each flavour raised connecting to ``path`` (0.2 s for the hello)."""
    raised: list[BaseException] = []
    try:
        OwnerConnection.connect(str(path), timeout=0.2).close()
    except OwnerUnavailable as exc:
        raised.append(exc)

    async def aio() -> None:
        (await AsyncOwnerConnection.connect(str(path), timeout=0.2)).close()

    try:
        asyncio.run(aio())
    except OwnerUnavailable as exc:
        raised.append(exc)
    return raised


def test_no_socket_is_no_owner(sock_path: Path) -> None:
    raised = _both(sock_path)
    assert [type(e) for e in raised] == [OwnerUnavailable, OwnerUnavailable]
    assert all(str(e).startswith(f"no owner at {sock_path}") for e in raised)


def test_a_silent_owner_is_unresponsive_not_absent(sock_path: Path) -> None:
    for _ in _serve(sock_path, None):
        raised = _both(sock_path)
    assert [type(e) for e in raised] == [OwnerUnresponsive, OwnerUnresponsive]
    assert all("did not say hello within 0.2 s" in str(e) for e in raised)


def test_another_ipc_version_is_refused_by_name(sock_path: Path) -> None:
    hello = json.dumps({"type": "hello", "v": protocol.VERSION + 1}).encode() + b"\n"
    for _ in _serve(sock_path, hello):
        raised = _both(sock_path)
    assert [type(e) for e in raised] == [OwnerUnavailable, OwnerUnavailable]
    assert all(f"speaks IPC v{protocol.VERSION + 1}" in str(e) for e in raised)


def test_a_hello_we_speak_connects_both_ways(sock_path: Path) -> None:
    hello = json.dumps({"type": "hello", "v": protocol.VERSION, "generation": 3}).encode()
    for _ in _serve(sock_path, hello + b"\n"):
        assert _both(sock_path) == []
