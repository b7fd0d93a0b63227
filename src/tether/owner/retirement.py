"""When the owner retires on its own: the idle TTL and the maximum lifetime.

:class:`Retirement` is the one owner of the retirement timer. The policy -- when the
next check is due, and whether the owner retires now -- is the lifecycle's
(:mod:`.lifecycle`, no I/O); this room arms the loop's timer for it and asks it again
when the timer fires or the last connection closes.

A connected caller may be about to send its request: expiring between our hello and
its request would reject work we just greeted. So a connection holds the owner open
(watchers do not: they follow the journal across owners, so retiring costs them
nothing); a status poll does not reset the TTL.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from tether.owner.admission import rearm
from tether.owner.lifecycle import OwnerLifecycle, OwnerState, StopReason

__all__ = ["Retirement"]


class Retirement:
    """The idle TTL and the maximum lifetime, checked by one timer.

    Args:
        lifecycle: the owner's lifecycle (its retirement policy).
        busy: whether a request is queued or running.
        held: whether a connection may be about to send work.
        retire: ends the owner, for the reason given.
    """

    def __init__(
        self,
        lifecycle: OwnerLifecycle,
        *,
        busy: Callable[[], bool],
        held: Callable[[], bool],
        retire: Callable[[StopReason], None],
    ) -> None:
        self._lifecycle = lifecycle
        self._busy = busy
        self._held = held
        self._retire = retire
        self._timer: asyncio.TimerHandle | None = None

    def schedule(self) -> None:
        """Arm the timer for the lifecycle's next check (a no-op once stopping)."""
        self._timer = rearm(self._timer, self._lifecycle.next_check(), self.check)

    def cancel(self) -> None:
        """The owner is stopping: no more checks."""
        self._timer = rearm(self._timer, None, self.check)

    def check(self) -> None:
        """Retire now if the policy says so; otherwise check again when it is due."""
        held = self._held()
        reason = self._lifecycle.retirement(time.monotonic(), busy=self._busy(), held=held)
        if reason is not None:
            self._retire(reason)
        elif self._lifecycle.state is OwnerState.IDLE and not held:
            self.schedule()

    def connection_closed(self) -> None:
        """A connection went away: the last one may have held an idle owner open."""
        if not self._held() and self._lifecycle.state is OwnerState.IDLE:
            self.check()
