"""What a session host's owners share (:mod:`tether.sessionhost`): one memory trim and
one state-database watch for all of them, instead of one of each per owner."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.owner.memory import HostTrim
from tether.owner.state_watch import StateWatch

__all__ = ["Shared"]


@dataclass
class Shared:
    """Given to each owner a host starts (``Owner(..., host=shared)``)."""

    trim: HostTrim = field(default_factory=HostTrim)
    state_watch: StateWatch = field(default_factory=StateWatch)
