"""The state database under a live owner: noticing that it was removed or replaced.

Theory of operation
-------------------
An owner keeps SQLite connections to ``state.db`` open for its whole life. When the
file is removed, replaced (a rename over it), truncated or overwritten, or its
write-ahead log (``state.db-wal``) is deleted, those connections go on against an
inode nobody else reads, or against a file whose WAL index no longer matches it;
meanwhile every other process that opens ``state.db`` waits on the locks the owner
still holds and fails ``database is locked``. Before this room existed the owner went
on streaming (or froze on a lock wait on its loop), ``close`` failed, and SIGTERM waited
behind the lock waits (issue 21 item 6).

SQLite cannot tell us in time: it notices a moved file only on some writes
(``SQLITE_READONLY_DBMOVED``) and a truncated one not at all until it reads a page. So a
thread of ours looks at the files themselves once a second -- two ``stat`` calls, never
an ``open`` (closing a descriptor of the database drops SQLite's POSIX locks for the
whole process) -- and compares them with what they were when the owner started:

* ``state.db`` gone, or another inode at its path: removed or replaced;
* shorter than one page (512 bytes): truncated (an overwrite in place that keeps the
  size is not seen; SQLite reports that one as a damaged database);
* the WAL we saw gone, or another inode: removed (SQLite itself never deletes the WAL
  while a connection -- ours -- is open; a checkpoint truncates it in place).

The decision (:func:`lost_reason`) is pure; :class:`StateWatch` is the thread. On a
verdict the owner's registry is *lost* at once (:meth:`tether.state.registry.Registry.lose`:
every later call fails fast, a lock wait on the loop is interrupted), the running turn
ends with :class:`tether.errors.StateLost`, the owner shuts down as for a signal (the
agent's tree proven gone; records it cannot write are logged, not waited for), and a
``state-lost-<time>-<pid>-<session>.log`` note is left in ``logs/`` for ``tether doctor``.

Each look that finds the database in place also looks at the owner's lock file and
socket: a lock file removed from under it is taken again (or, taken by another owner
meanwhile, the owner stops), a socket removed is bound again
(:meth:`tether.owner.lock.SessionLock.retake`, :meth:`~tether.owner.lock.SessionLock.relisten`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from tether import _log, paths
from tether.errors import StateLost
from tether.owner.lifecycle import StopReason

if TYPE_CHECKING:
    from tether.owner.compose import Owner

__all__ = [
    "CHECK_S",
    "MIN_DB_BYTES",
    "Files",
    "StateWatch",
    "Watched",
    "lost_reason",
    "snapshot",
    "watch_state",
]

CHECK_S = 1.0  # how often the files are looked at: two stat calls
MIN_DB_BYTES = 512  # a database is at least one page, and pages are at least 512 bytes
logger = logging.getLogger("tether.owner")


class Files(NamedTuple):
    """What the state database's files look like at one moment."""

    db: paths.FileId | None  # None: no file at the path
    db_size_ok: bool  # at least one page long (shorter: truncated)
    wal: paths.FileId | None  # None: no WAL file


def lost_reason(seen: Files, now: Files) -> str | None:
    """Why the database the owner opened (``seen``) is no longer at its path, or None."""
    if now.db is None:
        return "was removed"
    if seen.db is not None and now.db != seen.db:
        return "was replaced by another file"
    if not now.db_size_ok:
        return "was truncated"
    if seen.wal is not None and now.wal != seen.wal:
        return "lost its write-ahead log (state.db-wal was removed or replaced)"
    return None


def remember(seen: Files, now: Files) -> Files:
    """The baseline after a look that found nothing wrong: a WAL created since counts."""
    return seen if seen.wal is not None else seen._replace(wal=now.wal)


def snapshot(path: str) -> Files:
    """Look at ``path`` and its ``-wal``: two ``stat`` calls, nothing opened.

    Never ``open()`` the database file in an owner: closing any descriptor of it drops
    every POSIX lock this process holds on it -- SQLite's own, for its connections.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Files(None, False, paths.file_id(path + "-wal"))
    return Files((st.st_dev, st.st_ino), st.st_size >= MIN_DB_BYTES, paths.file_id(path + "-wal"))


class Watched:
    """One owner's watch: its database's files as it first saw them, what to call."""

    def __init__(
        self,
        watch: StateWatch,
        path: str,
        on_lost: Callable[[str], None],
        each_look: Callable[[], None] | None,
    ) -> None:
        self._watch = watch
        self.path = path
        self.on_lost = on_lost
        self.each_look = each_look  # the owner's other files: its socket (owner.lock)
        self.seen = snapshot(path)

    def stop(self) -> None:
        """Stop looking for this owner (idempotent; does not wait)."""
        self._watch.remove(self)


class StateWatch:
    """A daemon thread that looks once a second for each owner added (one: an owner's
    own process; all of them: a session host's, tether.sessionhost) and calls an
    owner's ``on_lost(why)`` once if its database's files changed under it (see the
    module docstring). Add an owner once its connections are open."""

    def __init__(self, *, interval: float = CHECK_S) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._watched: list[Watched] = []
        self._thread: threading.Thread | None = None

    def add(
        self,
        path: str,
        on_lost: Callable[[str], None],
        each_look: Callable[[], None] | None = None,
    ) -> Watched:
        watched = Watched(self, path, on_lost, each_look)
        with self._lock:
            self._watched.append(watched)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="tether-state-watch", daemon=True
                )
                self._thread.start()
        return watched

    def remove(self, watched: Watched) -> None:
        with self._lock:
            if watched in self._watched:
                self._watched.remove(watched)

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            with self._lock:
                watched = list(self._watched)
            if not watched:
                with self._lock:
                    if not self._watched:  # nobody left to look for: the thread ends
                        self._thread = None
                        return
                continue
            looks: dict[str, Files] = {}  # one look per database, whoever shares it
            for one in watched:
                self._look(one, looks)

    def _look(self, one: Watched, looks: dict[str, Files]) -> None:
        try:
            now = looks[one.path] if one.path in looks else snapshot(one.path)
        except OSError:
            return  # a transient error reading a file is no verdict
        looks[one.path] = now
        why = lost_reason(one.seen, now)
        if why is None:
            one.seen = remember(one.seen, now)
            if one.each_look is not None:
                one.each_look()
            return
        self.remove(one)
        one.on_lost(f"the state database {one.path} {why} while this owner ran")


def watch_state(owner: Owner, watch: StateWatch | None = None) -> Watched:
    """Start watching the owner's state database (``watch``: a session host's, shared
    by its owners; else a thread of its own); on a verdict, stop the owner."""
    loop = asyncio.get_running_loop()

    def on_lost(why: str) -> None:  # on the watch thread
        owner.registry.lose(why)  # now: a lock wait on the loop ends at once
        owner.heartbeat.lose()  # and its thread writes nothing more to that path
        loop.call_soon_threadsafe(_state_lost, owner, why)

    def files_check() -> None:  # on the watch thread
        if owner.lock.lock_moved():
            loop.call_soon_threadsafe(_retake, owner)
        elif owner.lock.socket_lost():
            loop.call_soon_threadsafe(_relisten, owner)

    return (watch or StateWatch()).add(owner.registry.path, on_lost, files_check)


def _retake(owner: Owner) -> None:
    """On the loop: our lock file was removed; take the one at its path, or stop."""
    if owner.ending.done or not owner.lock.lock_moved():
        return
    try:
        retaken = owner.lock.retake()
    except OSError as exc:  # no verdict (a full disk, a permission): the next look retries
        _log.event("lock_retake_failed", logging.WARNING, session_key=owner.key, error=str(exc))
        return
    if retaken:
        _log.event("lock_restored", logging.WARNING, session_key=owner.key)
        owner.spawn(_bind_again(owner))
        return
    _log.event("lock_lost", logging.ERROR, session_key=owner.key)
    owner.heartbeat.lose()  # the session's row is the new owner's now
    owner.request_shutdown(StopReason.LOCK_LOST)


def _relisten(owner: Owner) -> None:
    """On the loop: put the session's socket back (:meth:`SessionLock.relisten`)."""
    if owner.ending.done:
        return
    owner.spawn(_bind_again(owner))


async def _bind_again(owner: Owner) -> None:
    try:
        restored = await owner.lock.relisten()
    except OSError as exc:  # no verdict: the next look tries again
        _log.event("socket_restore_failed", logging.WARNING, session_key=owner.key, error=str(exc))
        return
    if restored:
        _log.event("socket_restored", logging.WARNING, session_key=owner.key)


def _state_lost(owner: Owner, why: str) -> None:
    """On the loop: end the running turn with the error, stop the owner, leave a note."""
    message = (
        f"{why}; the owner stops (what it would record has nowhere to go)."
        " The sessions recorded there are gone; `tether doctor` reports it."
    )
    _log.event("state_lost", logging.ERROR, session_key=owner.key, why=why)
    _leave_note(owner.key, why)
    active = owner.active
    owner.request_shutdown(StopReason.STATE_LOST)
    if active is not None:
        active.finish(error=StateLost(message, path=owner.registry.path))


def _leave_note(key: str, why: str) -> None:
    """``logs/state-lost-<UTC time>-<pid>-<session>.log``: what ``tether doctor`` reports
    (one per session: a session host's owners all leave theirs in the same second)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    with contextlib.suppress(OSError):
        path = os.path.join(paths.logs_dir(), f"state-lost-{stamp}-{os.getpid()}-{key[:12]}.log")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{stamp} owner pid {os.getpid()} of session {key}: {why}\n")
