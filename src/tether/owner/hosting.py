"""What a session host's owners share (:mod:`tether.sessionhost`): one memory trim, one
state-database watch and one journal commit lock for all of them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tether.owner.memory import HostTrim
from tether.owner.state_watch import StateWatch

__all__ = ["Shared"]


@dataclass
class Shared:
    """Given to each owner a host starts (``Owner(..., host=shared)``)."""

    trim: HostTrim = field(default_factory=HostTrim)
    state_watch: StateWatch = field(default_factory=StateWatch)
    # Held around each journal commit of any of the host's owners. Fifty writer threads
    # of one process fought for SQLite's write lock through its busy handler, which
    # sleeps 1, 2, 5, 10... ms between tries; with a turn's answer waiting for its commit,
    # a burst's p99 went from 66 to 329 ms. A lock of our own hands it over at once.
    commit_lock: threading.Lock = field(default_factory=threading.Lock)
