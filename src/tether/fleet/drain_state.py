"""A fleet host's drain, and its readiness, as a transition table with no I/O.

Theory of operation
-------------------
A host drains on SIGTERM (Kubernetes ending its pod, a rolling restart) or on
``tether serve --drain``. It moves through five states::

    SERVING --DRAIN--> DRAINING --TURNS_ENDED--> RETIRING --OWNERS_ENDED--> LEAVING
                          |                         ^                               |
                          +-------GRACE_OVER--------+ (running turns are cut)      LEFT
                                                                                    v
                                                                                 DRAINED

``SERVING`` admits everything. From ``DRAINING`` on the host admits nothing new: the
index says it drains (routers place new sessions elsewhere at once) and its gateway
answers new sessions and new prompts ``503 HOST_DRAINING`` (retryable). The turns
already admitted run on; once none is running or queued (``TURNS_ENDED``), or once the
grace has passed (``GRACE_OVER``: what still runs is cut), the host ``RETIRES`` its
owners: each ends its agent's tree by its own proof and leaves its session open, so the
next prompt after the host comes back resumes it. ``LEAVING``: the last journal entries
are shipped and the host deregisters; ``DRAINED``: the process exits 0.

A second drain request (a second SIGTERM, ``--drain`` while draining) changes nothing:
``DRAIN`` is accepted, and ignored, in every state after ``SERVING``.

The transitions live in one table (:class:`tether._table.Table`): a key that is not in
it is the error, and a miss leaves the machine ``DRAINED`` -- a host that lost track of
its drain must not look as if it served.

:func:`readiness` is the probe's answer (``/readyz``): ready only while registered,
after the index was reached once, and while not draining.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tether._table import Table
from tether.errors import InvalidTransition

__all__ = [
    "DEFAULT_GRACE_S",
    "LEGAL",
    "DrainInput",
    "DrainMachine",
    "DrainState",
    "Readiness",
    "readiness",
]

# Kubernetes' own default terminationGracePeriodSeconds is 30 s: a drain that fits in it
# by default (the manifests give the pod the grace plus time to retire and ship).
DEFAULT_GRACE_S: Final = 30.0


class DrainState(enum.Enum):
    SERVING = "serving"
    DRAINING = "draining"  # admitting nothing new; admitted turns run on
    RETIRING = "retiring"  # owners end their trees by their own proof
    LEAVING = "leaving"  # last ship, deregistration
    DRAINED = "drained"


class DrainInput(enum.Enum):
    DRAIN = "drain"  # SIGTERM, or `tether serve --drain`
    TURNS_ENDED = "turns-ended"  # no turn runs or waits on any owner
    GRACE_OVER = "grace-over"  # turns still run: they are cut
    OWNERS_ENDED = "owners-ended"  # every owner retired (or was left, unproven)
    LEFT = "left"  # shipped and deregistered (or the index could not be told)


_S = DrainState
_I = DrainInput

_TRANSITIONS: Final[Mapping[tuple[DrainState, DrainInput], DrainState]] = {
    (_S.SERVING, _I.DRAIN): _S.DRAINING,
    (_S.DRAINING, _I.TURNS_ENDED): _S.RETIRING,
    (_S.DRAINING, _I.GRACE_OVER): _S.RETIRING,
    (_S.RETIRING, _I.OWNERS_ENDED): _S.LEAVING,
    (_S.LEAVING, _I.LEFT): _S.DRAINED,
    # A second request while draining changes nothing.
    (_S.DRAINING, _I.DRAIN): _S.DRAINING,
    (_S.RETIRING, _I.DRAIN): _S.RETIRING,
    (_S.LEAVING, _I.DRAIN): _S.LEAVING,
    (_S.DRAINED, _I.DRAIN): _S.DRAINED,
}

#: Every (state, input) pair the table accepts; exported for tests and docs.
LEGAL: Final = frozenset(_TRANSITIONS)

_TABLE: Final = Table("drain", _TRANSITIONS, fail=_S.DRAINED, terminal=frozenset({_S.DRAINED}))


class DrainMachine:
    """One host's drain, with the time passed in (monotonic seconds).

    Args:
        grace_s: how long admitted turns may run on once the drain began.
    """

    def __init__(self, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.grace_s = grace_s
        self.state = DrainState.SERVING
        self.started_at: float | None = None
        self.cut = False  # the grace passed with turns still running

    def __repr__(self) -> str:
        return f"DrainMachine(state={self.state.name}, started_at={self.started_at!r})"

    @property
    def admits(self) -> bool:
        """Whether new sessions and new prompts are admitted."""
        return self.state is DrainState.SERVING

    @property
    def deadline(self) -> float | None:
        """When the grace ends (None before the drain began)."""
        return None if self.started_at is None else self.started_at + self.grace_s

    def feed(self, event: DrainInput, now: float) -> DrainState:
        """Apply one input.

        Raises:
            InvalidTransition: the table has no such transition (the machine is left
                ``DRAINED``).
        """
        try:
            new = _TABLE.next(self.state, event)
        except InvalidTransition:
            self.state = _TABLE.after_miss(self.state)
            raise
        if self.state is DrainState.SERVING and new is DrainState.DRAINING:
            self.started_at = now
        if event is DrainInput.GRACE_OVER:
            self.cut = True
        self.state = new
        return new

    def request(self, now: float) -> bool:
        """Ask to drain; True if this was the first request (the drain begins now)."""
        first = self.state is DrainState.SERVING
        self.feed(DrainInput.DRAIN, now)
        return first

    def waiting(self, now: float, *, busy: int) -> DrainInput | None:
        """While ``DRAINING``: what ends the wait now, given how many turns run or wait
        (``busy``) -- ``TURNS_ENDED``, ``GRACE_OVER``, or None (wait on)."""
        if self.state is not DrainState.DRAINING:
            return None
        if busy == 0:
            return DrainInput.TURNS_ENDED
        deadline = self.deadline
        if deadline is not None and now >= deadline:
            return DrainInput.GRACE_OVER
        return None


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    why: str | None  # None when ready


def readiness(
    *, registered: bool, index_reached: bool, superseded: bool, draining: bool
) -> Readiness:
    """The readiness probe's verdict: ready only while registered (and not superseded),
    after the index was reached once, and while not draining. An index that is down
    *now* leaves a host ready: it serves what it owns without it."""
    if not index_reached:
        return Readiness(False, "the fleet index was never reached")
    if superseded:
        return Readiness(False, "superseded in the fleet index (fenced or registered elsewhere)")
    if draining:
        return Readiness(False, "draining")
    if not registered:
        return Readiness(False, "not registered in the fleet index")
    return Readiness(True, None)
