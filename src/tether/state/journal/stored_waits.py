"""Callbacks waiting until the journal writer has stored a seq: answers after the record.

A turn's caller is answered once the turn's end is stored, never before (issue 23's
review): a caller told ``end_turn`` whose owner was killed a moment later found the
journal saying ``owner-lost`` for the same turn, and a reader asking for the history
right after the answer found the turn still running. The loop registers what to run
(:meth:`StoredWaits.add`); the writer's thread says how far it has stored
(:meth:`reached`) and the due callbacks run on the loop. While the disk refuses writes
nothing waits (:meth:`failing`): a failing disk is a stated condition, never a stall.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable


class StoredWaits:
    """``(seq, callback)`` pairs released once the writer has stored ``seq``."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None, stored: int) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._reached = stored  # the highest seq stored, as the writer's thread said
        self._bypass = False  # failing or stopped: nothing waits
        self._waiting: list[tuple[int, Callable[[], None]]] = []

    def add(self, seq: int, callback: Callable[[], None]) -> None:
        """On the loop: run ``callback`` once ``seq`` is stored (now, if it is)."""
        with self._lock:
            if not self._bypass and seq > self._reached:
                self._waiting.append((seq, callback))
                return
        callback()

    def reached(self, seq: int) -> None:
        """From the writer's thread: everything up to ``seq`` is stored."""
        with self._lock:
            self._reached = seq
            self._bypass = False
            if not self._waiting:
                return
            due = [cb for s, cb in self._waiting if s <= seq]
            self._waiting = [(s, cb) for s, cb in self._waiting if s > seq]
        self._run(due)

    def failing(self) -> None:
        """From the writer's thread: writes fail (or it stopped): release every wait, and
        let new ones through at once until a batch is stored again."""
        with self._lock:
            self._bypass = True
            due, self._waiting = [cb for _, cb in self._waiting], []
        self._run(due)

    def _run(self, due: list[Callable[[], None]]) -> None:
        if not due:
            return
        loop = self._loop
        if loop is None:  # no loop (tests): run them here
            for callback in due:
                callback()
            return
        try:
            loop.call_soon_threadsafe(_run_all, due)
        except RuntimeError:  # the loop is closed: the owner is gone, and its callers
            pass


def _run_all(due: list[Callable[[], None]]) -> None:
    for callback in due:
        callback()
