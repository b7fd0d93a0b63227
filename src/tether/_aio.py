"""Tasks and cleanup on asyncio: the one module that starts tasks.

Theory of operation. A task we start must belong to someone who will wait for it or
cancel it; and the loop holds only a weak reference to a task, so a task whose handle
we drop can be garbage collected mid-flight. Every task in Tether is therefore started
here, by :func:`spawn`, which hands the task back and, given a ``keep`` set, holds it
there until it ends (given a ``group``, the :class:`asyncio.TaskGroup` holds it). The
caller still decides when it is cancelled and awaited -- this module adds no policy.

Cleanup that must finish even though we are being cancelled (reaping a tree, closing a
session, stopping a follower thread) goes through :func:`shielded` (its error is the
caller's), :func:`cleanup` (its error is logged and dropped: we are already leaving)
or :func:`settle` (give a task a bounded time to end). All three run the work as its
own task, so a cancellation of ours does not cut it short; if we are cancelled while
waiting, we wait again for the work (bounded by ``timeout``, not cut short by further
cancellations either) and then let the cancellation propagate. We never wrap a shield
in ``suppress(Exception)``: that swallows the error without a word and leaves the work
running behind a cancellation that no longer waits for it.

``tests/unit/test_aio_lint.py`` fails on a ``create_task``/``ensure_future`` call
anywhere under ``src/tether`` but here, and on ``asyncio.shield`` inside a
``suppress(...)`` block.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

__all__ = ["cleanup", "resolve", "settle", "shielded", "spawn"]

T = TypeVar("T")

logger = logging.getLogger("tether.aio")


def spawn(
    coro: Coroutine[Any, Any, T],
    *,
    keep: set[asyncio.Task[Any]] | None = None,
    group: asyncio.TaskGroup | None = None,
    name: str | None = None,
) -> asyncio.Task[T]:
    """Start ``coro`` as a task on the running loop and return it.

    Args:
        coro: the work.
        keep: a set that holds the task until it ends (it is discarded then).
        group: start it in this task group instead (the group holds and awaits it).
        name: the task's name, for debugging.

    Returns:
        The task; the caller cancels and awaits it on its own paths.
    """
    if group is not None:
        task = group.create_task(coro, name=name)
    else:
        task = asyncio.get_running_loop().create_task(coro, name=name)
    if keep is not None:
        keep.add(task)
        task.add_done_callback(keep.discard)
    return task


async def _wait_through(task: asyncio.Future[Any], timeout: float | None) -> BaseException | None:
    """Wait for ``task`` (up to ``timeout``) through any cancellation of ours; return the
    first cancellation that arrived meanwhile, if any."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    caught: BaseException | None = None
    while not task.done():
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            break
        try:
            # asyncio.wait never cancels what it waits for: no shield is needed.
            await asyncio.wait({task}, timeout=remaining)
        except asyncio.CancelledError as exc:
            caught = caught or exc
    return caught


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark ``task``'s error as seen (we are leaving; nobody else will ask)."""
    if task.done() and not task.cancelled():
        task.exception()


async def settle(task: asyncio.Future[Any], timeout: float | None) -> None:
    """Give ``task`` up to ``timeout`` seconds to end; its error is retrieved and dropped.

    Cancellation: not cut short by a cancellation of ours; one that arrives meanwhile
    propagates once the wait is over. The task itself is never cancelled here.
    """
    caught = await _wait_through(task, timeout)
    _retrieve(task)
    if caught is not None:
        raise caught


async def shielded(aw: Awaitable[T], *, timeout: float | None = None) -> T:
    """Await ``aw`` to its end even if we are cancelled meanwhile.

    Returns:
        ``aw``'s result.

    Raises:
        Whatever ``aw`` raises.

    Cancellation: ``aw`` runs as its own task and is not cancelled; we wait for it
    again (up to ``timeout`` seconds; None: until it ends), through further
    cancellations too, and then the cancellation propagates (``aw``'s own error, if
    any, is then dropped).
    """
    task = asyncio.ensure_future(aw)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await _wait_through(task, timeout)
        _retrieve(task)
        raise


async def cleanup(aw: Awaitable[T], *, timeout: float | None = None, what: str = "") -> T | None:
    """:func:`shielded`, for cleanup on a path that is already leaving: ``aw``'s error
    is logged (debug) and None returned instead.

    Cancellation: as :func:`shielded`.
    """
    try:
        return await shielded(aw, timeout=timeout)
    except Exception as exc:  # we are already leaving: the cleanup's failure is no news
        logger.debug("cleanup %s failed: %r", what or aw, exc)
        return None


def resolve(future: asyncio.Future[None]) -> None:
    """Wake whoever awaits ``future`` (a timer's or another thread's callback), unless
    something already did."""
    if not future.done():
        future.set_result(None)
