"""``Session.watch``: the session's journal, followed in a thread, as asyncio events.

The follower (:func:`tether.operations.watch`) is blocking; it runs in a worker thread
and hands entries over through a bounded queue, so a consumer that falls behind holds
the thread back (never an unbounded buffer). Leaving the loop stops the follower.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from tether import _aio, operations
from tether.events import Event

__all__ = ["watch_journal"]


async def watch_journal(
    with_home: Callable[..., Any],
    key: str,
    *,
    from_seq: int | None,
    tail: int | None,
    follow: bool,
) -> AsyncIterator[Event]:
    """Session ``key``'s journal as typed events (see :meth:`tether.client.Session.watch`).

    ``with_home`` runs a blocking operation in the client's home
    (:meth:`tether.client.Client._with_home`).
    """
    import threading

    from tether.events import event_from_entry
    from tether.state.journal.entry import parse_line
    from tether.state.journal.follow import Follower

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, str] | BaseException | None] = asyncio.Queue(256)
    followers: list[Follower] = []
    stop = threading.Event()

    def emit(seq: int, line: str) -> None:
        # Back-pressure: the thread waits while the consumer is behind.
        asyncio.run_coroutine_threadsafe(queue.put((seq, line)), loop).result()

    def work() -> None:
        try:
            with_home(
                operations.watch,
                key,
                emit,
                from_seq=from_seq,
                tail=tail,
                follow=follow,
                stop=stop,
                on_start=followers.append,
                door="library",
            )
        except BaseException as exc:
            asyncio.run_coroutine_threadsafe(queue.put(exc), loop).result()
        else:
            asyncio.run_coroutine_threadsafe(queue.put(None), loop).result()

    thread = _aio.spawn(asyncio.to_thread(work))
    try:
        while True:
            item = await queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield event_from_entry(parse_line(item[1]))
    finally:
        stop.set()
        for follower in followers:
            follower.interrupt()
        while not thread.done():  # unblock a producer waiting on a full queue
            with contextlib.suppress(asyncio.QueueEmpty):
                queue.get_nowait()
            await asyncio.sleep(0.01)
