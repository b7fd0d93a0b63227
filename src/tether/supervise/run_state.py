"""A run's lifecycle -- one agent process tree from spawn to proven extinction.

Theory of operation
-------------------
A run moves through four states::

    STARTING --SPAWNED--> RUNNING --STOP_REQUESTED / PROCESS_EXITED--> EXITING
        |                                                                 |
        +--SPAWN_FAILED--> EXITED <----------EXTINCTION_PROVEN------------+

``EXITING`` covers both "we asked it to stop" and "the root exited on its own": in
either case descendants may still be alive (a ``setsid`` grandchild, a daemon), so
the run is over only when the shell has *proven* extinction (``ECHILD``, or
``populated 0``) and feeds ``EXTINCTION_PROVEN``. "Stopped" means reaped, not
signalled.

The transitions live in one table, h11 style: a key that is not in the table *is*
the error. A miss raises :class:`~tether.errors.InvalidTransition` and leaves the
machine in ``EXITED``, so a bug cannot leave a run looking alive forever.

Alongside the states, :class:`RunLifecycle` keeps the bookkeeping that makes end
paths honest (the OpenClaw and sandbox-agent lessons in process-ownership.md §7):

* the *first* stop reason wins (a manual cancel racing a timeout is reported as
  whichever arrived first), and later requests are no-ops;
* :meth:`RunLifecycle.finalize` returns ``True`` exactly once, so exactly one
  ``session-ended`` is emitted, with a reason, whoever calls it;
* after settlement no output is delivered (a late chunk must not leak into a
  report that was already written);
* two deadlines -- overall and no-output -- computed from the time passed in
  (no clock reads here); output re-arms the no-output watchdog.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from tether._table import Table
from tether.errors import InvalidTransition
from tether.termination import TerminationReason

__all__ = ["RunInput", "RunLifecycle", "RunState", "TerminationReason"]


class RunState(enum.Enum):
    """Where a run is in its life."""

    STARTING = "starting"
    RUNNING = "running"
    EXITING = "exiting"
    EXITED = "exited"


class RunInput(enum.Enum):
    """What the shell tells the machine happened."""

    SPAWNED = "spawned"
    SPAWN_FAILED = "spawn-failed"
    STOP_REQUESTED = "stop-requested"
    PROCESS_EXITED = "process-exited"
    EXTINCTION_PROVEN = "extinction-proven"


_S = RunState
_I = RunInput

_TRANSITIONS: Final[Mapping[tuple[RunState, RunInput], RunState]] = {
    (_S.STARTING, _I.SPAWNED): _S.RUNNING,
    # Nothing was started, so there is nothing to reap: extinction is trivial.
    (_S.STARTING, _I.SPAWN_FAILED): _S.EXITED,
    # A stop can arrive while the spawn is in flight; the spawn's outcome still has
    # to be fed in (SPAWNED -> tear the tree down; SPAWN_FAILED -> done).
    (_S.STARTING, _I.STOP_REQUESTED): _S.EXITING,
    (_S.RUNNING, _I.STOP_REQUESTED): _S.EXITING,
    # The root exiting is not the end: descendants may outlive it.
    (_S.RUNNING, _I.PROCESS_EXITED): _S.EXITING,
    (_S.EXITING, _I.SPAWNED): _S.EXITING,
    (_S.EXITING, _I.SPAWN_FAILED): _S.EXITED,
    # Stop and exit race freely during teardown; both are absorbed.
    (_S.EXITING, _I.STOP_REQUESTED): _S.EXITING,
    (_S.EXITING, _I.PROCESS_EXITED): _S.EXITING,
    (_S.EXITING, _I.EXTINCTION_PROVEN): _S.EXITED,
}

#: Every (state, input) pair the table accepts; exported for tests and docs.
LEGAL: Final = frozenset(_TRANSITIONS)

_TABLE: Final = Table("run", _TRANSITIONS, fail=_S.EXITED)


class RunLifecycle:
    """The sans-IO lifecycle of one run.

    Args:
        started_at: monotonic time deadlines count from. If ``None`` (the default),
            the clock starts at :meth:`transition_spawned` ``(now)``: a slow spawn is
            bounded by the spawner's own deadline, not by the run's timeouts.
        overall_timeout: seconds the whole run may take, or ``None`` for no limit.
        no_output_timeout: seconds without output before the run is stopped, or
            ``None`` for no watchdog.
    """

    def __init__(
        self,
        *,
        started_at: float | None = None,
        overall_timeout: float | None = None,
        no_output_timeout: float | None = None,
    ) -> None:
        self._state = RunState.STARTING
        self.started_at = started_at
        self.overall_timeout = overall_timeout
        self.no_output_timeout = no_output_timeout
        self.last_output_at: float | None = None
        self.stop_reason: TerminationReason | None = None
        self._spawn_failed = False
        self._settled = False
        self.reason: TerminationReason | None = None
        self.exit_code: int | None = None
        self.exit_signal: int | None = None

    @property
    def state(self) -> RunState:
        """The current state."""
        return self._state

    @property
    def settled(self) -> bool:
        """Whether :meth:`finalize` has run (the outcome is final and reported)."""
        return self._settled

    @property
    def terminated_by(self) -> str | None:
        """``"daemon"`` if we stopped the run, ``"agent"`` if it ended by itself.

        ``None`` until settled.
        """
        if not self._settled:
            return None
        return "daemon" if self.stop_reason is not None else "agent"

    def transition(self, event: RunInput) -> RunState:
        """Apply ``event``; returns the new state.

        Raises:
            InvalidTransition: the table has no entry for (state, event); the machine
                is left in ``EXITED``.
        """
        try:
            new = _TABLE.next(self._state, event)
        except InvalidTransition:
            self._state = _TABLE.after_miss(self._state)
            raise
        if event is RunInput.SPAWN_FAILED:
            self._spawn_failed = True
        self._state = new
        return new

    # Named shorthands for the shell, one per input; each is ``transition(...)``.

    def transition_spawned(self, now: float | None = None) -> RunState:
        """Feed ``SPAWNED``; ``now`` starts the deadline clock if it has not started."""
        state = self.transition(RunInput.SPAWNED)
        if self.started_at is None and now is not None:
            self.started_at = now
        return state

    def transition_spawn_failed(self) -> RunState:
        """Feed ``SPAWN_FAILED``."""
        return self.transition(RunInput.SPAWN_FAILED)

    def transition_stop(self) -> RunState:
        """Feed ``STOP_REQUESTED`` without recording a reason (prefer :meth:`request_stop`)."""
        return self.transition(RunInput.STOP_REQUESTED)

    def transition_exited(self) -> RunState:
        """Feed ``PROCESS_EXITED`` (the root exited; descendants may remain)."""
        return self.transition(RunInput.PROCESS_EXITED)

    def transition_extinct(self) -> RunState:
        """Feed ``EXTINCTION_PROVEN`` (nothing of the tree is left)."""
        return self.transition(RunInput.EXTINCTION_PROVEN)

    def request_stop(self, reason: TerminationReason) -> bool:
        """Ask the run to stop for ``reason``. Idempotent: the first reason wins.

        Returns:
            ``True`` if this call started the stop; ``False`` if a stop was already
            requested, the run is already exiting on its own, or it has ended.
        """
        # First reason wins: a cancel racing a timeout must be reported as whichever
        # reached us first, and a second request must not re-run teardown.
        if self.stop_reason is not None or self._state in (RunState.EXITING, RunState.EXITED):
            return False
        self.stop_reason = reason
        self.transition(RunInput.STOP_REQUESTED)
        return True

    def finalize(
        self,
        *,
        exit_code: int | None = None,
        signal: int | None = None,
        reason: TerminationReason | None = None,
        exit_signal: int | None = None,
    ) -> bool:
        """Settle the run's outcome; ``True`` exactly once, ``False`` ever after.

        The reason recorded is, in order: the stop reason (if we asked it to stop,
        the exit was our doing), else ``reason`` (e.g. ``OWNER_LOST``), else
        ``SPAWN_ERROR`` if the spawn failed, else ``SIGNAL`` if ``signal`` is set,
        else ``EXIT``. ``exit_signal`` is an alias of ``signal``.

        Raises:
            InvalidTransition: called while ``STARTING`` or ``RUNNING`` (report only
                after the run has ended: reap before you report); the machine is left
                in ``EXITED`` and the call still settles nothing.
        """
        if signal is None:
            signal = exit_signal
        if self._settled:
            return False
        # Reporting before the run ended would emit session-ended for a live tree
        # ("reap before you report"); treat it as the bug it is.
        if self._state in (RunState.STARTING, RunState.RUNNING):
            old = self._state
            self._state = RunState.EXITED
            raise InvalidTransition(
                f"run: cannot finalize while {old.name}",
                machine="run",
                state=old.name,
                input="finalize",
            )
        # Settle first: everything below is bookkeeping, and a re-entrant call (say
        # from a done-callback) must already see the run as settled.
        self._settled = True
        self.exit_code = exit_code
        self.exit_signal = signal
        # A requested stop explains the exit better than the exit itself: a SIGTERM
        # death after a cancel is a cancel, not a crash (sandbox-agent #116).
        if self.stop_reason is not None:
            self.reason = self.stop_reason
        elif reason is not None:
            self.reason = reason
        elif self._spawn_failed:
            self.reason = TerminationReason.SPAWN_ERROR
        elif signal is not None:
            self.reason = TerminationReason.SIGNAL
        else:
            self.reason = TerminationReason.EXIT
        return True

    def deliver_output(self, now: float) -> bool:
        """Note output at ``now``; ``False`` (drop it) once the run has settled.

        Output re-arms the no-output watchdog. Output during ``EXITING`` is still
        delivered (the agent's last words before our SIGTERM are worth keeping).
        """
        # After settlement the report is written; a late chunk would contradict it
        # (OpenClaw's "no output after settlement").
        if self._settled or self._state is RunState.EXITED:
            return False
        self.last_output_at = now
        return True

    @property
    def overall_deadline(self) -> float | None:
        """When the overall timeout fires, or ``None`` without one."""
        if self.overall_timeout is None or self.started_at is None:
            return None
        return self.started_at + self.overall_timeout

    @property
    def no_output_deadline(self) -> float | None:
        """When the no-output watchdog fires (re-armed by output), or ``None``."""
        if self.no_output_timeout is None:
            return None
        last = self.started_at if self.last_output_at is None else self.last_output_at
        if last is None:
            return None  # the clock has not started: nothing spawned, no output yet
        return last + self.no_output_timeout

    def next_deadline(self) -> float | None:
        """The earliest armed deadline, while one can still fire; the shell sleeps until it."""
        if self._state not in (RunState.STARTING, RunState.RUNNING):
            return None
        armed = [d for d in (self.overall_deadline, self.no_output_deadline) if d is not None]
        return min(armed) if armed else None

    def due(self, now: float) -> TerminationReason | None:
        """The timeout that has fired by ``now``, if any (only before stopping).

        When both have fired the earlier deadline is reported; on a tie, the overall
        timeout (it is the user's explicit ceiling).
        """
        # Once stopping, a timeout firing would only rewrite the reason of a stop
        # already under way; the first reason has won.
        if self._state not in (RunState.STARTING, RunState.RUNNING):
            return None
        fired: list[tuple[float, int, TerminationReason]] = []
        overall, quiet = self.overall_deadline, self.no_output_deadline
        if overall is not None and now >= overall:
            fired.append((overall, 0, TerminationReason.OVERALL_TIMEOUT))
        if quiet is not None and now >= quiet:
            fired.append((quiet, 1, TerminationReason.NO_OUTPUT_TIMEOUT))
        return min(fired)[2] if fired else None
