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
  short blocking calls), in the caller's context (its ``TETHER_HOME``). There it reads
  the *stored* entries (the database is never read on the loop), makes them into items
  (``entry``) and hands them over through one bounded
  :class:`~tether.operations.handover.Handover`: one wakeup of the loop per batch, not
  per entry; while ``bound`` entries wait for the loop, the thread waits.
* The *live* owner is followed on the loop itself (the follower's ``attach``: the same
  ``watch`` request and frame handlers as the blocking flavour, through
  :func:`tether.ipc.client.pump`), while the thread waits, idle, until the owner lets
  go. So a live entry never crosses a thread: the gateway's SSE hub makes a run of them
  into SSE bytes (``block``) where it relays them, and a warm turn costs no thread
  wakeup, no GIL hand-over and no self-pipe write (issue 23: a third of the gateway's
  CPU per streamed turn, and a hundred such threads contending in a burst).
  Back-pressure: the live phase reads the owner's socket only while fewer than
  ``bound`` entries wait (the owner, never slowed by a follower, drops it with
  ``lagged`` if it falls far behind, and the follower re-reads from the database) -- a
  slow reader holds back only its own follower, and memory stays bounded.
* The follower's error reaches the reader after everything it handed over.
* Leaving the iteration (the end, ``break``, an error, a cancellation) stops the
  follower, cancels its live phase (closing the owner's socket), wakes a blocked read
  and a blocked hand-over, and waits for the thread a bounded time
  (:func:`tether._aio.settle`, through further cancellations).

``tests/unit/test_follow_bridge.py`` fails on a bridge from a follower into a loop
anywhere else.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import AsyncGenerator, Callable
from typing import Any, Generic, TypeVar

from tether.errors import OwnerUnavailable
from tether.operations.handover import BOUND, Handover
from tether.policy import access
from tether.state.journal.follow import Emit, EmitBlock, Follower, follow_session

TYPE_CHECKING = False  # asyncio is loaded by the asyncio flavour only: the CLI's watch
if TYPE_CHECKING:  # follows without it
    import asyncio

__all__ = ["Handover", "watch", "watch_async", "watch_batches"]

T = TypeVar("T")

CLEANUP_S = 5.0  # how long a reader that leaves waits for the follower thread to let go
# How often the follower's thread, idle while the loop follows the live owner, checks
# that the loop is still there. A loop that ends the usual way (``asyncio.run``)
# cancels the live phase and the thread goes on at once; only a loop closed with its
# tasks pending resolves nothing. Rare, so rarely: a gateway following a thousand
# sessions wakes ~17 times a second for it, not 200.
LIVE_CHECK_S = 60.0


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
        self.live: asyncio.Task[bool] | None = None  # following the live owner, on the loop

    def sinks(self, put: Callable[[T, int], None]) -> tuple[Emit, EmitBlock | None]:
        """The follower's ``emit`` and ``emit_block``: each makes its item where the
        follower reads and hands it to ``put`` (``Handover.put`` in the follower's thread,
        ``Handover.put_now`` on the loop)."""
        entry, block, counted = self.entry, self.block, self.counted

        def emit(seq: int, line: str) -> None:
            item = entry(seq, line)
            if item is not None:
                put(item, counted(item))

        def emit_block(first: int, last: int, lines: list[bytes]) -> None:
            assert block is not None
            item = block(first, last, lines)
            put(item, counted(item))

        return emit, (emit_block if block is not None else None)

    def attach_live(self, follower: Follower) -> bool:
        """The follower's :attr:`~Follower.attach`, from its thread: follow the live
        owner on the loop (``_live``), so that a live entry never crosses a thread; this
        thread waits, idle, until the owner lets go. Whether an owner served."""
        import asyncio
        import concurrent.futures

        from tether import sessions

        if self.stop.is_set():
            return True
        loop = self.handover.loop
        path = sessions.socket_path(follower.key)  # here: this thread has the caller's home
        try:
            future = asyncio.run_coroutine_threadsafe(self._live(follower, path), loop)
        except RuntimeError:  # the loop closed: nobody reads
            self.stop.set()
            return True
        while True:
            try:
                return future.result(LIVE_CHECK_S)
            except concurrent.futures.CancelledError:
                return True  # the reader left (stop_now cancelled it)
            except concurrent.futures.TimeoutError:
                if loop.is_closed():  # no stop_now will come
                    self.stop.set()
                    return True

    async def _live(self, follower: Follower, path: str) -> bool:
        """On the loop: one live attachment, from the follower's cursor until the owner
        lets go (its entries made into items here and handed over without a thread)."""
        import asyncio

        from tether.ipc import protocol
        from tether.ipc.aio_client import AsyncOwnerConnection
        from tether.ipc.client import pump
        from tether.state.journal.follow import BLOCK_RECV, HELLO_TIMEOUT_S, LIVE_ENDS

        self.live = asyncio.current_task()
        if self.stop.is_set():
            return True
        try:
            conn = await AsyncOwnerConnection.connect(
                path, timeout=HELLO_TIMEOUT_S, limit=BLOCK_RECV
            )
        except OwnerUnavailable:
            return False
        if conn.hello.get("stopping"):
            conn.close()
            return False
        follower.deliver_to(*self.sinks(self.handover.put_now))  # ``room`` bounds them
        try:
            rid, payload, prefix = follower.watch_request()
            await conn.send("watch", payload, None, request_id=rid)
            tracker = protocol.ResponseTracker(rid)
            on_frame, on_raw, on_block = follower.live_handlers(prefix)
            while True:
                result = pump(
                    conn.lines, tracker, on_frame=on_frame, on_raw=on_raw, on_block=on_block
                )
                if result is not None:
                    follower.live_ended(result)
                    return True
                await self.handover.room()  # back-pressure: the reader takes first
                await conn.fill(BLOCK_RECV)
        except LIVE_ENDS:
            return True  # back to the database from the cursor; the entries are all there
        finally:
            conn.close()
            follower.deliver_to(*self.sinks(self.handover.put))
            self.live = None

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
        from tether import _aio

        loop = ended.get_loop()

        def work() -> None:
            error: BaseException | None = None
            try:
                if home is not None:
                    from tether import paths

                    paths.use_home(home)  # this thread's copy of the caller's context
                emit, emit_block = self.sinks(self.handover.put)
                watch(
                    key,
                    emit,
                    check=check,
                    stop=self.stop,
                    on_start=self.started,
                    emit_block=emit_block,
                    attach=self.attach_live,
                    **kwargs,
                )
            except BaseException as exc:  # the reader gets it, after what came before it
                error = exc
            finally:
                self.handover.finish(error)
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                    loop.call_soon_threadsafe(_aio.resolve, ended)

        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(work,), name=f"follow-{key[:8]}")
        thread.daemon = True
        thread.start()

    def stop_now(self) -> None:
        """On the loop: the reader left."""
        self.stop.set()
        self.handover.close()
        if self.live is not None:
            self.live.cancel()  # the follower's thread, waiting for it, goes on and ends
        for follower in self.followers:
            follower.interrupt()


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
