"""The owner's lifecycle, and its retirement policy, as a transition table with no I/O.

Theory of operation
-------------------
An owner moves through five states::

    STARTING --STARTED--> IDLE <--JOB_ENDED-- RUNNING
                           |  --JOB_STARTED-->   |
                           +--STOP_REQUESTED--> STOPPING --STOPPED--> STOPPED
                                       (also from STARTING and RUNNING)

``RUNNING`` means one request (a turn, a mode or option change) is at the agent;
``IDLE`` means none is. ``STOPPING`` is absorbing until the shell has torn everything
down (answered every waiting caller, proven the agent tree gone, released socket and
lock) and feeds ``STOPPED``. A job that was running when the stop came still ends
(``JOB_ENDED`` in ``STOPPING`` stays ``STOPPING``); no job starts once stopping.

The transitions live in one table, h11 style: a key that is not in the table *is* the
error. A miss raises :class:`~tether.errors.InvalidTransition` and leaves the machine in
``STOPPED``: a bug must not leave an owner looking as if it served.

Alongside the state the machine keeps what the retirement policy needs, with the time
passed in (monotonic seconds):

* the *first* stop reason wins (``close`` racing the idle TTL is reported as whichever
  came first);
* **idle TTL**: an owner idle for ``idle_ttl`` seconds retires -- unless a caller holds
  it (``held``): expiring between our ``hello`` and the caller's request would reject
  work we just greeted, so the shell asks again when that caller lets go;
* **max lifetime**: an owner older than ``max_lifetime`` retires at its next idle
  moment; it never cuts a turn;
* nothing retires while requests wait in the queue (``busy``).

:meth:`OwnerLifecycle.retirement` is the decision; :meth:`OwnerLifecycle.next_check`
says when to ask again. ``0`` disables either limit.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from tether._table import Table
from tether.errors import InvalidTransition

__all__ = ["LEGAL", "OwnerInput", "OwnerLifecycle", "OwnerState", "StopReason"]


class OwnerState(enum.Enum):
    """Where an owner is in its life."""

    STARTING = "starting"
    IDLE = "idle"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class OwnerInput(enum.Enum):
    """What the shell tells the machine happened."""

    STARTED = "started"  # lock held, socket bound, leftovers reconciled: serving
    JOB_STARTED = "job-started"
    JOB_ENDED = "job-ended"
    STOP_REQUESTED = "stop-requested"
    STOPPED = "stopped"  # everything torn down, socket and lock released


class StopReason(enum.StrEnum):
    """Why an owner stops (the first reason asked wins). The values are the words the
    journal (``owner_stopped``), the logs and the errors carry."""

    CLOSE = "close"  # the session was closed
    TERMINATE = "terminate"  # the operator's immediate end
    IDLE_TTL = "idle-ttl"
    MAX_LIFETIME = "max-lifetime"
    STATE_LOST = "state-lost"  # state.db went away under us
    LOCK_LOST = "lock-lost"  # our lock file was removed, and another owner took its path
    FATAL_ERROR = "fatal-error"
    SIGTERM = "signal-SIGTERM"
    SIGINT = "signal-SIGINT"
    SIGHUP = "signal-SIGHUP"

    @property
    def ends_session(self) -> bool:
        """The session ends with the owner (close, terminate); else it stays resumable."""
        return self in (StopReason.CLOSE, StopReason.TERMINATE)

    @property
    def is_retirement(self) -> bool:
        """The owner retires by itself (idle TTL, max lifetime): a clean close of the run."""
        return self in (StopReason.IDLE_TTL, StopReason.MAX_LIFETIME)


_S = OwnerState
_I = OwnerInput

_TRANSITIONS: Final[Mapping[tuple[OwnerState, OwnerInput], OwnerState]] = {
    (_S.STARTING, _I.STARTED): _S.IDLE,
    (_S.STARTING, _I.STOP_REQUESTED): _S.STOPPING,
    (_S.IDLE, _I.JOB_STARTED): _S.RUNNING,
    (_S.IDLE, _I.STOP_REQUESTED): _S.STOPPING,
    (_S.RUNNING, _I.JOB_ENDED): _S.IDLE,
    (_S.RUNNING, _I.STOP_REQUESTED): _S.STOPPING,
    # The job that was running when the stop came still ends (cancelled or abandoned).
    (_S.STOPPING, _I.JOB_ENDED): _S.STOPPING,
    (_S.STOPPING, _I.STOP_REQUESTED): _S.STOPPING,
    (_S.STOPPING, _I.STOPPED): _S.STOPPED,
}

#: Every (state, input) pair the table accepts; exported for tests and docs.
LEGAL: Final = frozenset(_TRANSITIONS)

_TABLE: Final = Table("owner", _TRANSITIONS, fail=_S.STOPPED)


class OwnerLifecycle:
    """The sans-IO lifecycle of one owner, with its idle TTL and max lifetime.

    Args:
        now: monotonic time the owner started (max lifetime counts from it).
        idle_ttl: seconds idle before retiring; 0 = never.
        max_lifetime: seconds after which the owner retires when next idle; 0 = never.
    """

    def __init__(self, *, now: float, idle_ttl: float = 0.0, max_lifetime: float = 0.0) -> None:
        self.state = OwnerState.STARTING
        self.idle_ttl = idle_ttl
        self.max_lifetime = max_lifetime
        self.started_at = now
        self.idle_since: float | None = None
        self.stop_reason: StopReason | None = None

    def __repr__(self) -> str:
        return (
            f"OwnerLifecycle(state={self.state.name}, idle_since={self.idle_since!r}, "
            f"stop_reason={self.stop_reason!r})"
        )

    @property
    def is_stopping(self) -> bool:
        """True once a stop was requested (no new work is admitted)."""
        return self.state in (OwnerState.STOPPING, OwnerState.STOPPED)

    def feed(self, event: OwnerInput, now: float) -> OwnerState:
        """Apply one input.

        Raises:
            InvalidTransition: the table has no such transition (the machine is left
                ``STOPPED``).
        """
        try:
            new = _TABLE.next(self.state, event)
        except InvalidTransition:
            self.state = _TABLE.after_miss(self.state)
            raise
        if new is OwnerState.IDLE:
            self.idle_since = now
        else:
            self.idle_since = None
        self.state = new
        return new

    def request_stop(self, reason: StopReason, now: float) -> bool:
        """Ask to stop for ``reason``; True if this was the first request (its reason wins)."""
        first = not self.is_stopping
        if first:
            self.stop_reason = reason
            self.feed(OwnerInput.STOP_REQUESTED, now)
        return first

    def retirement(self, now: float, *, busy: bool, held: bool) -> StopReason | None:
        """The reason to retire now (``MAX_LIFETIME``, ``IDLE_TTL``), or None.

        Args:
            now: monotonic time.
            busy: requests wait in the queue.
            held: a caller holds the owner open (connected, or waiting for a turn).
        """
        if self.state is not OwnerState.IDLE or busy:
            return None
        if self.max_lifetime > 0 and now >= self.started_at + self.max_lifetime:
            return StopReason.MAX_LIFETIME
        if (
            self.idle_ttl > 0
            and self.idle_since is not None
            and now >= self.idle_since + self.idle_ttl
            and not held
        ):
            return StopReason.IDLE_TTL
        return None

    def next_check(self) -> float | None:
        """When :meth:`retirement` may next say yes (while idle); None if never."""
        if self.state is not OwnerState.IDLE:
            return None
        times = []
        if self.max_lifetime > 0:
            times.append(self.started_at + self.max_lifetime)
        if self.idle_ttl > 0 and self.idle_since is not None:
            times.append(self.idle_since + self.idle_ttl)
        return min(times) if times else None
