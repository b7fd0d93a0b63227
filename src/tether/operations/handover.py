"""Items from one producer to an event loop, bounded, with one wakeup per batch.

The journal follower's hand-over (:mod:`tether.operations.watching`): its thread puts
what it read from the database, waiting while the loop is ``bound`` entries behind;
its live phase, on the loop itself, puts without waiting and waits for :meth:`room`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

TYPE_CHECKING = False  # asyncio is loaded by the asyncio flavour only
if TYPE_CHECKING:
    import asyncio

__all__ = ["BOUND", "Handover"]

T = TypeVar("T")

BOUND = 8192  # entries handed over and not yet taken by the loop, before the thread waits
HANDOVER_WAIT_S = 0.1  # a waiting hand-over looks again this often (bounded by ``close``)


class Handover(Generic[T]):
    """Items from one producer thread to the event loop, bounded, one wakeup per batch.

    The thread calls :meth:`put` (waiting while ``bound`` entries are untaken) and
    :meth:`finish`; the loop calls :meth:`take`, and is woken through ``wake`` (called
    on the loop) whenever there is something to take.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, wake: Callable[[], None], bound: int = BOUND
    ) -> None:
        self.loop = loop
        self.bound = bound
        self._wake = wake
        self._cond = threading.Condition()
        self._items: list[T] = []
        self._count = 0  # entries the untaken items stand for
        self._scheduled = False  # a wakeup is on its way to the loop
        self._closed = False  # the reader left: nothing waits any more
        self.finished = False  # the producer is done (and ``error`` is its outcome)
        self.error: BaseException | None = None
        self._room: asyncio.Future[None] | None = None  # a producer on the loop waits

    def put_now(self, item: T, count: int = 1) -> None:
        """Hand ``item`` over from the loop itself: never waits (see :meth:`room`)."""
        with self._cond:
            first = self._add(item, count)
        if first:
            self._wake()

    def _add(self, item: T, count: int) -> bool:
        """Under the lock: add ``item``; whether the reader is to be woken for it."""
        self._items.append(item)
        self._count += count
        if self._scheduled:
            return False
        self._scheduled = True
        return True

    async def room(self) -> None:
        """On the loop: return once fewer than ``bound`` entries wait (or the reader left)."""
        while self._count >= self.bound and not self._closed:
            self._room = self.loop.create_future()
            await self._room

    def _make_room(self) -> None:
        room, self._room = self._room, None
        if room is not None:
            from tether import _aio  # (on the loop: asyncio is loaded)

            _aio.resolve(room)

    def put(self, item: T, count: int = 1) -> None:
        """Hand ``item`` (standing for ``count`` entries) over (the producer's thread)."""
        with self._cond:
            while self._count >= self.bound and not self._closed:
                self._cond.wait(HANDOVER_WAIT_S)
            first = self._add(item, count)
        if first:
            self._schedule()

    def finish(self, error: BaseException | None) -> None:
        """The producer is done, with ``error`` if it failed (the producer's thread)."""
        with self._cond:
            self.finished = True
            self.error = error
            self._scheduled = True
        self._schedule()

    def poke(self) -> None:
        """Wake the reader with nothing handed over (the producer's thread)."""
        with self._cond:
            if self._scheduled:
                return
            self._scheduled = True
        self._schedule()

    def _schedule(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody reads
            self.loop.call_soon_threadsafe(self._wake)

    def take(self) -> tuple[list[T], bool]:
        """Everything handed over so far, and whether the producer has finished (then
        nothing more comes): on the loop. A waiting producer goes on."""
        with self._cond:
            items, self._items = self._items, []
            self._count = 0
            self._scheduled = False
            self._cond.notify_all()
        self._make_room()
        return items, self.finished

    def close(self) -> None:
        """The reader left: a waiting :meth:`put` returns (what it hands over is dropped)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._make_room()
