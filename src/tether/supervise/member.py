"""A member of a run: a process observed while provably inside the run, by identity.

The record supervision judges (:mod:`tether.supervise.members`) and the state layer keeps
(:mod:`tether.state._registry_members`, table ``run_members``). It lives here, below
both, so that supervision is handed members and never imports the state layer.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Member"]


@dataclass(frozen=True)
class Member:
    """One recorded member of a run."""

    boot_id: str
    pid: int
    starttime: int
    lease_id: str
    session_key: str | None
    how: str
    seen_at: float
