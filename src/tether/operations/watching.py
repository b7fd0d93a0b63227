"""Following a session's journal: the one follow bridge, blocking and asyncio.

:func:`watch` is the blocking flavour: the visibility check, then the journal follower
(:func:`tether.state.journal.follow.follow_session`: the stored entries, then the live owner's,
across owner restarts, until the session ends or the caller stops it) in the caller's
thread, handing entries to callbacks. The CLI's ``sessions watch`` and a turn's rest
read by ``tether prompt`` use it.

:func:`watch_async` (entries) and :func:`watch_batches` (batches of whatever the caller
makes of them) are the asyncio flavour, and the only bridge from that blocking follower
into an event loop -- the gateway's SSE hubs, the ACP door's attachments, the library's
``Session.watch`` and a turn's rest (:mod:`.turn_rest`) all go through it:

* The follower runs in a thread of its own (a daemon thread, not the loop's executor: a
  follow lasts as long as its reader stays, and the executor's few workers are for
  short blocking calls), in the caller's context (its ``TETHER_HOME``).
* What it delivers is made into items *in that thread* (``entry``/``block``: the
  gateway turns a block of live entries into SSE bytes there, off the loop) and handed
  over through one bounded :class:`Handover`: one wakeup of the loop per batch, not per
  entry. Back-pressure: while ``bound`` entries wait for the loop, the thread waits (the
  owner, never slowed by a follower, drops it with ``lagged`` if it falls far behind,
  and the follower re-reads from the database) -- a slow reader holds back only its
  own follower, and memory stays bounded.
* The follower's error reaches the reader after everything it handed over.
* Leaving the iteration (the end, ``break``, an error, a cancellation) stops the
  follower, wakes a blocked read and a blocked hand-over, and waits for the thread a
  bounded time (:func:`tether._aio.settle`, through further cancellations).

``tests/unit/test_follow_bridge.py`` fails on a bridge from a follower into a loop
anywhere else.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import AsyncGenerator, Callable
from typing import Any, Generic, TypeVar

from tether.policy import access
from tether.state.journal.follow import Follower, follow_session

TYPE_CHECKING = False  # asyncio is loaded by the asyncio flavour only: the CLI's watch
if TYPE_CHECKING:  # follows without it
    import asyncio

__all__ = ["Handover", "watch", "watch_async", "watch_batches"]

T = TypeVar("T")

BOUND = 8192  # entries handed over and not yet taken by the loop, before the thread waits
CLEANUP_S = 5.0  # how long a reader that leaves waits for the follower thread to let go
HANDOVER_WAIT_S = 0.1  # a waiting hand-over looks again this often (bounded by ``close``)


def watch(key: str, emit: Callable[[int, str], None], *, check: bool = True, **kwargs: Any) -> int:
    """Follow session ``key``'s journal in this thread, once the visibility check allows.

    Takes :func:`tether.state.journal.follow.follow_session`'s keyword arguments (``from_seq``,
    ``tail``, ``follow``, ``stop``, ``on_start``, ``control``, ``flush``, ``emit_block``,
    ``door``, ``on_damage``). ``check``: False for a caller that checked already (with
    :func:`tether.operations.open_journal` or :func:`tether.operations.last_seq`). The
    live part is checked again by the owner, against the kernel's view of us.

    Returns:
        The last ``seq`` delivered.

    Raises:
        NoSession: no such session.
        VisibilityDenied: the requester may not watch this session.
        Whatever ``emit`` (or ``emit_block``, ``flush``) raised, unchanged.
    """
    if check:
        access.authorize(key, "watch")
    return int(follow_session(key, emit, **kwargs))


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

    def put(self, item: T, count: int = 1) -> None:
        """Hand ``item`` (standing for ``count`` entries) over (the producer's thread)."""
        with self._cond:
            while self._count >= self.bound and not self._closed:
                self._cond.wait(HANDOVER_WAIT_S)
            self._items.append(item)
            self._count += count
            if self._scheduled:
                return
            self._scheduled = True
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
            return items, self.finished

    def close(self) -> None:
        """The reader left: a waiting :meth:`put` returns (what it hands over is dropped)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


async def watch_batches(
    key: str,
    entry: Callable[[int, str], T | None],
    *,
    block: Callable[[int, int, list[bytes]], T] | None = None,
    count: Callable[[T], int] | None = None,
    bound: int = BOUND,
    on_start: Callable[[int], None] | None = None,
    home: str | None = None,
    check: bool = True,
    **kwargs: Any,
) -> AsyncGenerator[list[T], None]:
    """Session ``key``'s journal followed in a thread, as batches of items on the loop.

    Args:
        entry: makes an entry ``(seq, public JSON line)`` into an item, in the follower's
            thread; None drops it there.
        block: makes a run of live entries ``(first, last, lines)`` into one item, in the
            follower's thread (see :class:`tether.state.journal.follow.Follower`); without it,
            every entry goes through ``entry``.
        count: how many entries an item stands for (1 without it): the bound counts
            entries.
        bound: entries handed over and not yet taken before the follower's thread waits.
        on_start: told (on the loop, before any batch) the first seq to be delivered.
        home: the ``TETHER_HOME`` to follow in (default: the caller's).
        check: False for a caller that checked visibility already (see :func:`watch`).
        kwargs: :func:`tether.state.journal.follow.follow_session`'s ``from_seq``, ``tail``,
            ``follow``, ``control``, ``door``, ``on_damage``.

    Yields:
        Each batch the loop takes: a non-empty list of items, in seq order.

    Raises:
        NoSession: no such session.
        VisibilityDenied: the requester may not watch this session.
        Whatever the follower raised, after every item it handed over.

    Cancellation (or the iteration left early): the follower is stopped and its thread
    given ``CLEANUP_S`` to let go before the cancellation propagates.
    """
    import asyncio

    from tether import _aio

    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    ended: asyncio.Future[None] = loop.create_future()
    side = _FollowerSide(Handover(loop, ready.set, bound), entry, block, count)
    side.start(key, home, check, kwargs, ended)
    try:
        tell = on_start
        while True:
            ready.clear()
            items, finished = side.handover.take()
            if tell is not None and side.firsts:
                tell(side.firsts[0])
                tell = None
            if items:
                yield items
                continue
            if finished:
                if side.handover.error is not None:
                    raise side.handover.error
                return
            await ready.wait()
    finally:
        side.stop_now()
        await _aio.settle(ended, CLEANUP_S)


class _FollowerSide(Generic[T]):
    """The follower's thread of :func:`watch_batches`: it makes the items there and
    hands them over; :meth:`stop_now` (from the loop) stops it."""

    def __init__(
        self,
        handover: Handover[T],
        entry: Callable[[int, str], T | None],
        block: Callable[[int, int, list[bytes]], T] | None,
        count: Callable[[T], int] | None,
    ) -> None:
        self.handover = handover
        self.entry = entry
        self.block = block
        self.counted = count or (lambda _item: 1)
        self.stop = threading.Event()
        self.followers: list[Follower] = []
        self.firsts: list[int] = []  # the first seq to be delivered, once started

    def emit(self, seq: int, line: str) -> None:
        item = self.entry(seq, line)
        if item is not None:
            self.handover.put(item, self.counted(item))

    def emit_block(self, first: int, last: int, lines: list[bytes]) -> None:
        assert self.block is not None
        item = self.block(first, last, lines)
        self.handover.put(item, self.counted(item))

    def started(self, follower: Follower) -> None:
        # Before any entry: a batch taken implies a start seen (and its first seq).
        self.firsts.append(follower.cursor)
        self.followers.append(follower)
        self.handover.poke()  # the reader is told the first seq even if no entry follows

    def start(
        self,
        key: str,
        home: str | None,
        check: bool,
        kwargs: dict[str, Any],
        ended: asyncio.Future[None],
    ) -> None:
        """Start the follower's thread; ``ended`` is resolved on its loop once it let go."""
        loop = ended.get_loop()

        def work() -> None:
            error: BaseException | None = None
            try:
                if home is not None:
                    from tether import paths

                    paths.use_home(home)  # this thread's copy of the caller's context
                watch(
                    key,
                    self.emit,
                    check=check,
                    stop=self.stop,
                    on_start=self.started,
                    emit_block=self.emit_block if self.block is not None else None,
                    **kwargs,
                )
            except BaseException as exc:  # the reader gets it, after what came before it
                error = exc
            finally:
                self.handover.finish(error)
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                    loop.call_soon_threadsafe(_resolve, ended)

        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(work,), name=f"follow-{key[:8]}")
        thread.daemon = True
        thread.start()

    def stop_now(self) -> None:
        self.stop.set()
        self.handover.close()
        for follower in self.followers:
            follower.interrupt()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def watch_async(
    key: str, *, bound: int = BOUND, home: str | None = None, check: bool = True, **kwargs: Any
) -> AsyncGenerator[tuple[int, str], None]:
    """Session ``key``'s entries ``(seq, public JSON line)``, followed in a thread
    (:func:`watch_batches`, whose arguments it takes) and read on the loop one by one.

    Cancellation: as :func:`watch_batches`.
    """
    batches = watch_batches(key, _pair, bound=bound, home=home, check=check, **kwargs)
    try:
        async for batch in batches:
            for item in batch:
                yield item
    finally:
        await batches.aclose()


def _pair(seq: int, line: str) -> tuple[int, str]:
    return seq, line
