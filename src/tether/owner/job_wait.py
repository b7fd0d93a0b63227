"""The FIFO's wait for the running request, cut short by a shutdown.

:class:`JobWait` owns the shutdown signal the owner's loop waits on. Until shutdown is
requested, the loop waits for the running request to end; after, for
``CANCEL_SETTLE_S`` more. The shutdown already sent ``session/cancel``; an agent that
ignores it (a hung or late turn) must not hold `sessions close`, a signal or the idle
TTL hostage until the turn ceiling. The request is then abandoned (its task cancelled,
which abandons the ACP request) and its caller gets ``QUEUE_OWNER_SHUTTING_DOWN``.
"""

from __future__ import annotations

import asyncio

from tether import _aio
from tether.errors import OwnerShuttingDown
from tether.owner.lifecycle import OwnerLifecycle

__all__ = ["CANCEL_SETTLE_S", "JobWait"]

CANCEL_SETTLE_S = 1.0  # on shutdown, how long the active turn may take to end `cancelled`


class JobWait:
    """Waits for the running request; abandons it once shutdown is requested."""

    def __init__(self, lifecycle: OwnerLifecycle) -> None:
        self._lifecycle = lifecycle
        self._stop_event = asyncio.Event()  # set once, by stop()

    def stop(self) -> None:
        """Shutdown was requested: a wait under way gives the request CANCEL_SETTLE_S."""
        self._stop_event.set()

    async def wait(self, task: asyncio.Task[None]) -> None:
        """Wait for the active job; once shutdown is requested, for CANCEL_SETTLE_S more.

        Raises:
            OwnerShuttingDown: the job was abandoned (its task cancelled).
            Whatever the job's task raised.
        """
        while not task.done() and not self._lifecycle.is_stopping:
            stop = _aio.spawn(self._stop_event.wait())
            try:
                await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
        if not task.done():
            await asyncio.wait({task}, timeout=CANCEL_SETTLE_S)
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
            if not task.cancelled():
                task.result()  # it finished (or failed) while being cancelled
            reason = self._lifecycle.stop_reason or ""
            raise OwnerShuttingDown(f"the owner is shutting down ({reason})")
        task.result()
