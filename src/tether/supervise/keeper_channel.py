"""The control channel to a run's keeper: a socketpair, one JSON object per line each way.

The supervisor sends commands (``terminate``); the keeper reports events (``spawned``,
``spawn-failed``, ``exited``, ``extinct``), each handed to ``on_event`` as it is parsed.
Reads never block: the socket is watched with ``add_reader`` on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Callable
from typing import Any

__all__ = ["KeeperChannel"]


class KeeperChannel:
    """Our end of the keeper's control socketpair, watched on the running loop."""

    def __init__(self, sock: socket.socket, on_event: Callable[[dict[str, Any]], None]) -> None:
        self._sock = sock
        self._buf = b""
        self._on_event = on_event
        sock.setblocking(False)
        asyncio.get_running_loop().add_reader(sock.fileno(), self._on_readable)

    def send(self, obj: dict[str, Any]) -> None:
        try:
            self._sock.send((json.dumps(obj) + "\n").encode())
        except OSError:
            pass  # keeper gone; its exit is handled by the pidfd watch

    def drain(self) -> None:
        """Read whatever the keeper wrote and has not been parsed yet (never blocks)."""
        while self.read():
            pass

    def _on_readable(self) -> None:
        self.read()

    def read(self) -> bool:
        """One non-blocking read of the control socket; ``False`` on EAGAIN or EOF."""
        try:
            data = self._sock.recv(65536)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            return False
        self._buf += data
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            self._on_event(msg)
        return True

    def close(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        self._sock.close()
