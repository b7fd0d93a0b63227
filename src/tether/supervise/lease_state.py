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
crash mid-teardown leaves a lease that says so.

Values are the lowercase strings so the registry can store ``state.value``.
A table miss raises :class:`~tether.errors.InvalidTransition` (through
:class:`tether._table.Table`, like every machine's) and writes nothing: the registry
moves a lease only through :func:`next_state`, as one compare-and-set. Where a miss
would leave a lease held in memory is ``lost`` -- the fail-closed state, which is
never signalled and which sweeps re-examine -- except that ``closed`` stays ``closed``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from tether._table import Table

__all__ = ["EDGES", "LeaseInput", "LeaseState", "next_state"]


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

#: Where a miss leaves a lease: ``lost`` -- the fail-closed state, never signalled and
#: re-examined by sweeps -- except that ``closed`` stays ``closed``.
_TABLE: Final = Table("lease", _TRANSITIONS, fail=_S.LOST, terminal=frozenset({_S.CLOSED}))

#: The legal (from, to) edges, derived from the table; exported for tests and docs.
EDGES: Final = _TABLE.edges


def next_state(state: LeaseState, event: LeaseInput) -> LeaseState:
    """The state after ``event``.

    Raises:
        InvalidTransition: the table has no such transition.
    """
    return _TABLE.next(state, event)
