"""What a session host's owners share (:mod:`tether.sessionhost`): one memory trim, one
state-database watch and one journal group commit for all of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.owner.memory import HostTrim
from tether.owner.state_watch import StateWatch
from tether.state.journal.group_commit import GroupCommit

__all__ = ["Shared"]


@dataclass
class Shared:
    """Given to each owner a host starts (``Owner(..., host=shared)``)."""

    trim: HostTrim = field(default_factory=HostTrim)
    state_watch: StateWatch = field(default_factory=StateWatch)
    # Its owners' journal batches, many in one transaction (.group_commit): a turn's
    # answer waits for its commit, and fifty writer threads committing one by one, or
    # fighting for SQLite's lock through its busy handler (it sleeps 1, 2, 5, 10 ms
    # between tries), took a burst's p99 from 66 to 329 ms.
    group_commit: GroupCommit = field(default_factory=GroupCommit)
