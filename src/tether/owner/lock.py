"""The session's lock and socket: who owns the session, and where it listens.

An owner takes an exclusive ``flock`` on the session's lock file and holds it for its
whole life. The kernel releases it on any death, SIGKILL included, so "lock free" means
"no owner", and two racing starters produce exactly one owner (the loser says ``busy``
and exits).

Holding the lock makes the socket path ours: a socket file found there belongs to a
dead owner and is replaced. On the way out we remove the socket first, then release the
lock, so a caller never finds our socket while another owner already holds the lock.

Files can go from under a live owner: an operator clears ``TETHER_HOME/run`` (or the
whole home), a tmp cleaner removes an old socket in ``/tmp``. Two rules keep that from
stranding a session:

* we remove only the socket *we* bound (the same inode at the path): after the home was
  removed and a new owner of the same session started, the old owner on its way out
  (its state lost) used to unlink the new owner's socket -- which then lived on, holding
  the lock and its agent, reachable by nobody;
* while we hold the lock on the lock file that is at its path, a socket missing or not
  ours is put back (:meth:`SessionLock.relisten`, from the owner's file watch): callers
  reach us again within a second;
* a lock file removed from under us is taken again at its path (:meth:`SessionLock.retake`)
  -- else a caller finding no socket would start a second owner of the session beside
  us, with its own agent and the same journal. If another owner got there first, we
  are superseded and stop (``lock-lost``), ending our agent by proof.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable

from tether import _os, paths, sessions
from tether.paths import FileId

__all__ = ["SessionLock"]

ConnectionHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class SessionLock:
    """The session's flock and Unix socket, held together for an owner's life."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.socket_path = str(sessions.socket_path(key))
        self._lock_path = str(sessions.lock_path(key))
        self._fd = -1
        self._server: asyncio.AbstractServer | None = None
        self._serving: tuple[ConnectionHandler, int] | None = None  # listen()'s, to bind again
        self._bound: FileId | None = None  # the socket we bound, to remove only it

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def acquire(self) -> bool:
        """Take the lock without waiting; False if another owner holds it."""
        fd = _os.current().try_lock_exclusive(self._lock_path)
        if fd is None:
            return False
        self._fd = fd
        return True

    async def listen(self, handler: ConnectionHandler, *, limit: int) -> None:
        """Bind the session's socket (0600, in a 0700 directory) and serve ``handler``."""
        assert self.held, "bind only while holding the session lock"
        self._serving = (handler, limit)
        await self._bind()

    async def _bind(self) -> None:
        assert self._serving is not None
        handler, limit = self._serving
        paths.socket_dir()  # made again if it was removed
        # We hold the lock, so a socket file here is a dead owner's: safe to replace.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        self._server = await asyncio.start_unix_server(handler, path=self.socket_path, limit=limit)
        os.chmod(self.socket_path, 0o600)
        self._bound = _file_id(self.socket_path)

    def _held_at_path(self) -> bool | None:
        """Whether the file we hold the lock on is the one at the lock path; None if we
        hold none (or cannot tell)."""
        if self._fd < 0:
            return None
        try:
            held = os.fstat(self._fd)
        except OSError:
            return None
        return _file_id(self._lock_path) == (held.st_dev, held.st_ino)

    def lock_moved(self) -> bool:
        """Whether the file we hold the lock on is no longer the one at the lock path
        (removed or replaced): :meth:`retake`. (Any thread.)"""
        return self._held_at_path() is False

    def retake(self) -> bool:
        """Take the lock on the file now at the lock path (creating it); True if we hold
        it now, False if another owner does (we are superseded). Our old lock goes."""
        if self._fd < 0:
            return False
        # sessions.lock_path makes run/ again if it went with the file.
        fd = _os.current().try_lock_exclusive(str(sessions.lock_path(self.key)))
        if fd is None:
            return False
        os.close(self._fd)  # its file is gone from the path: nobody else can lock it
        self._fd = fd
        return True

    def socket_lost(self) -> bool:
        """Whether we serve, hold the lock file that is at its path, and the socket at
        its path is missing or not ours: :meth:`relisten` puts it back. (Any thread.)"""
        if self._server is None or not self._server.is_serving():
            return False
        if _file_id(self.socket_path) == self._bound:
            return False
        # Our lock's file no longer at its path (removed, replaced): the path is not
        # ours to take until retake() made it ours again.
        return self._held_at_path() is True

    async def relisten(self) -> bool:
        """Bind the session's socket again if it was lost (see the module); True if it
        was. The connections open stay."""
        if not self.socket_lost():
            return False
        old = self._server
        await self._bind()
        if old is not None:
            old.close()  # its path was already gone: closing it unlinks nothing of ours
        return True

    def stop_listening(self) -> None:
        """Accept no new connections (the ones open stay open)."""
        if self._server is not None:
            self._server.close()

    def release(self) -> None:
        """Remove the socket, then release the lock. Idempotent."""
        self.stop_listening()
        if self._fd < 0:
            return
        # Remove our socket (only ours: see the module), then let the lock go.
        if self._bound is not None and _file_id(self.socket_path) == self._bound:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)
        os.close(self._fd)
        self._fd = -1


def _file_id(path: str) -> FileId | None:
    """:func:`tether.paths.file_id`, with an unreadable path as no file (never ours)."""
    try:
        return paths.file_id(path)
    except OSError:
        return None
