"""The lease state machine: ``open | closing | closed | lost``.

Theory of operation
-------------------
A lease is the durable record that a session owner runs a process tree (its
identity, pgid, cgroup and marker). Its state says what we know about that tree::

    open --CLOSE_STARTED | STOLEN--> closing --EXTINCTION_PROVEN--> closed
      |                              |  ^   (STOLEN: closing -> closing)  ^
      |     UNVERIFIABLE |           |  |                                 |
      |     GONE_BEFORE_CLEANUP      v  | STOLEN                          |
      +--UNVERIFIABLE | GONE_BEFORE_CLEANUP--> lost --EXTINCTION_PROVEN---+

* ``open``: the owner (the supervisor named by ``owner_instance_id``) runs the tree.
* ``closing``: teardown (ours, or a reconcile's) has begun.
* ``closed``: extinction was proven by our own cleanup. Terminal.
* ``lost``: either ownership could not be verified, so nothing was signalled (fail
  closed), or the tree was already gone before any cleanup reached it (seed 000:
  "mark leases lost when the process is gone before cleanup" -- we cannot account
  for how it ended). Not terminal: a later sweep that finds marked survivors steals
  the lease again, reaps them, and closes it.

``STOLEN`` is the steal of seed 003 ("Lease and Ownership Rules"): another
supervisor takes over a lease whose holder let it expire (or died), *before* it
signals anything. The registry applies it as one compare-and-set on the lease's
state and owner, so of two supervisors racing for one expired lease exactly one
wins and only the winner kills. It lands in ``closing`` -- the steal is always the
first step of a teardown -- and ``closing --STOLEN--> closing`` covers a holder
that died mid-teardown.

There is no ``open -> closed`` edge: closing always passes through ``closing`` so a
crash mid-teardown leaves a lease that says so. :func:`path_to` gives the steps
between two states for executors that only know the target.

Values are the lowercase strings so the registry can store ``state.value``.
A table miss raises :class:`~tether.errors.InvalidTransition` and leaves a
:class:`LeaseMachine` in ``lost`` -- the fail-closed state, which is never
signalled and which sweeps re-examine -- except that ``closed`` stays ``closed``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from tether.errors import InvalidTransition

__all__ = ["LeaseInput", "LeaseMachine", "LeaseState", "check_edge", "next_state", "path_to"]


class LeaseState(enum.StrEnum):
    """What we know about a lease's process tree."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    LOST = "lost"


class LeaseInput(enum.Enum):
    """What happened to a lease's tree."""

    CLOSE_STARTED = "close-started"
    EXTINCTION_PROVEN = "extinction-proven"
    UNVERIFIABLE = "unverifiable"
    GONE_BEFORE_CLEANUP = "gone-before-cleanup"
    STOLEN = "stolen"


_S = LeaseState
_I = LeaseInput

_TRANSITIONS: Final[Mapping[tuple[LeaseState, LeaseInput], LeaseState]] = {
    (_S.OPEN, _I.CLOSE_STARTED): _S.CLOSING,
    (_S.OPEN, _I.UNVERIFIABLE): _S.LOST,
    (_S.CLOSING, _I.EXTINCTION_PROVEN): _S.CLOSED,
    (_S.CLOSING, _I.UNVERIFIABLE): _S.LOST,
    # Seed 000: the process was gone before cleanup reached it -> lost, not closed.
    (_S.OPEN, _I.GONE_BEFORE_CLEANUP): _S.LOST,
    (_S.CLOSING, _I.GONE_BEFORE_CLEANUP): _S.LOST,
    # Seed 003: an expired lease taken over by another supervisor, before any signal.
    (_S.OPEN, _I.STOLEN): _S.CLOSING,
    (_S.CLOSING, _I.STOLEN): _S.CLOSING,
    (_S.LOST, _I.STOLEN): _S.CLOSING,
    # A later sweep proved the lost tree gone (or reaped it after verifying it).
    (_S.LOST, _I.EXTINCTION_PROVEN): _S.CLOSED,
}

#: The legal (from, to) edges, derived from the table.
EDGES: Final = frozenset((src, dst) for (src, _), dst in _TRANSITIONS.items())

TERMINAL: Final = frozenset({LeaseState.CLOSED})


def next_state(state: LeaseState, event: LeaseInput) -> LeaseState:
    """The state after ``event``.

    Raises:
        InvalidTransition: the table has no such transition.
    """
    try:
        return _TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition(
            f"lease: no transition from {state.value} on {event.name}",
            machine="lease",
            state=state.value,
            input=event.name,
        ) from None


def check_edge(src: LeaseState, dst: LeaseState) -> None:
    """Raise :class:`~tether.errors.InvalidTransition` unless ``src -> dst`` is one legal step."""
    if (src, dst) not in EDGES:
        raise InvalidTransition(
            f"lease: {src.value} -> {dst.value} is not a legal step",
            machine="lease",
            state=src.value,
            input=dst.value,
        )


def path_to(src: LeaseState, dst: LeaseState) -> list[LeaseState]:
    """The states to step through from ``src`` to reach ``dst`` (excluding ``src``).

    ``path_to(OPEN, CLOSED) == [CLOSING, CLOSED]``; ``[]`` when ``src == dst``.

    Raises:
        InvalidTransition: ``dst`` cannot be reached from ``src``.
    """
    # Breadth-first over four states: the shortest path is the intended one.
    frontier: list[list[LeaseState]] = [[src]]
    seen = {src}
    while frontier:
        path = frontier.pop(0)
        if path[-1] is dst:
            return path[1:]
        for a, b in sorted(EDGES, key=lambda e: (e[0].value, e[1].value)):
            if a is path[-1] and b not in seen:
                seen.add(b)
                frontier.append([*path, b])
    raise InvalidTransition(
        f"lease: {dst.value} is unreachable from {src.value}",
        machine="lease",
        state=src.value,
        input=dst.value,
    )


class LeaseMachine:
    """One lease's state, advanced through the table."""

    def __init__(self, state: LeaseState = LeaseState.OPEN) -> None:
        self.state = state

    def transition(self, event: LeaseInput) -> LeaseState:
        """Apply ``event``; on a table miss raise and fail closed (``lost``; ``closed`` stays)."""
        try:
            self.state = next_state(self.state, event)
        except InvalidTransition:
            if self.state is not LeaseState.CLOSED:
                self.state = LeaseState.LOST
            raise
        return self.state
