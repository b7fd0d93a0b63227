"""The session's lock and socket: who owns the session, and where it listens.

An owner takes an exclusive ``flock`` on the session's lock file and holds it for its
whole life. The kernel releases it on any death, SIGKILL included, so "lock free" means
"no owner", and two racing starters produce exactly one owner (the loser says ``busy``
and exits).

Holding the lock makes the socket path ours: a socket file found there belongs to a
dead owner and is replaced. On the way out we remove the socket first, then release the
lock, so a caller never finds our socket while another owner already holds the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable

from tether import _os, sessions

__all__ = ["SessionLock"]

ConnectionHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class SessionLock:
    """The session's flock and Unix socket, held together for an owner's life."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.socket_path = str(sessions.socket_path(key))
        self._fd = -1
        self._server: asyncio.AbstractServer | None = None

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def acquire(self) -> bool:
        """Take the lock without waiting; False if another owner holds it."""
        fd = _os.current().try_lock_exclusive(str(sessions.lock_path(self.key)))
        if fd is None:
            return False
        self._fd = fd
        return True

    async def listen(self, handler: ConnectionHandler, *, limit: int) -> None:
        """Bind the session's socket (0600, in a 0700 directory) and serve ``handler``."""
        assert self.held, "bind only while holding the session lock"
        # We hold the lock, so a socket file here is a dead owner's: safe to replace.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        self._server = await asyncio.start_unix_server(handler, path=self.socket_path, limit=limit)
        os.chmod(self.socket_path, 0o600)

    def stop_listening(self) -> None:
        """Accept no new connections (the ones open stay open)."""
        if self._server is not None:
            self._server.close()

    def release(self) -> None:
        """Remove the socket, then release the lock. Idempotent."""
        self.stop_listening()
        if self._fd < 0:
            return
        # The socket is ours while we hold the lock: remove it, then let the lock go.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        os.close(self._fd)
        self._fd = -1
