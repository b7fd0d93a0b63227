"""Reconcile's decisions: the actions :mod:`tether.supervise.reconcile_plan` returns.

Frozen values, each with a human-readable ``why``, carried out by the executor
(:mod:`tether.supervise.reconcile`); the contract between the two is in the planner's
docstring. Split out of the planner by concept; re-exported from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether._os import ProcessIdentity
from tether.supervise.lease_state import LeaseState

__all__ = ["Action", "Expire", "MarkClosed", "MarkLost", "Reap", "Skip", "Steal", "Unproven"]


@dataclass(frozen=True)
class Steal:
    """Take the stale lease over from ``holder`` before anything else is done to it.

    ``holder_dead``: the holder was proven gone, so the steal need not wait for the
    lease's expiry. ``expect`` is the lease state the plan saw.
    """

    lease_id: str
    expect: LeaseState
    holder: str | None
    holder_dead: bool
    why: str


@dataclass(frozen=True)
class Reap:
    """Signal these verified identities (children first) and/or kill this cgroup.

    ``keeper``: the run's keeper, verified alive (its supervisor is only stopped or
    silent). It is asked to end its own tree -- one SIGTERM to it, and it gives every
    member TERM -> grace -> KILL once -- rather than every member getting a TERM from
    us and another from it (issue 20, item 6).
    """

    lease_id: str
    pids_children_first: list[ProcessIdentity]
    cgroup_path: str | None
    why: str
    keeper: ProcessIdentity | None = None


@dataclass(frozen=True)
class Unproven:
    """Processes that carry the lease's marker but are not proven members of its run
    (:mod:`~tether.supervise.proof`): reported, never signalled."""

    lease_id: str
    pids: list[int]
    why: str


@dataclass(frozen=True)
class MarkClosed:
    """Mark the lease ``closed`` (after a preceding ``Reap`` proved extinction)."""

    lease_id: str
    why: str


@dataclass(frozen=True)
class MarkLost:
    """Mark the lease ``lost``: ownership unverifiable (nothing signalled), or -- with
    ``gone`` -- its tree was already gone before cleanup reached it."""

    lease_id: str
    why: str
    gone: bool = False


@dataclass(frozen=True)
class Expire:
    """Delete the finished lease's record: it is older than the retention period."""

    lease_id: str
    why: str


@dataclass(frozen=True)
class Skip:
    """Leave the lease alone (shown by ``tether reap`` so nothing is silent)."""

    lease_id: str
    why: str


Action = Steal | Reap | MarkClosed | MarkLost | Expire | Skip | Unproven
