"""Why a run ended: the vocabulary of ``session-ended``, the metrics' labels and the
journal's records.

It lives below supervision (which decides a reason) and the metrics (which count each
one), so neither imports the other for it.
"""

from __future__ import annotations

import enum

__all__ = ["TerminationReason"]


class TerminationReason(enum.StrEnum):
    """Why a run ended, as reported in ``session-ended``."""

    MANUAL_CANCEL = "manual-cancel"
    OVERALL_TIMEOUT = "overall-timeout"
    # The agent never answered a turn we abandoned: its connection was retired (seed 002).
    UNRESPONSIVE = "unresponsive"
    NO_OUTPUT_TIMEOUT = "no-output-timeout"
    SPAWN_ERROR = "spawn-error"
    SIGNAL = "signal"
    EXIT = "exit"
    OWNER_LOST = "owner-lost"
    CLOSE = "close"
    TERMINATE = "terminate"  # the operator's immediate end (tether acp, sessions terminate)
    # Seed 003: a descendant left the run's boundary (the cgroup, or the group and
    # session where there is no cgroup). Set by the shell after extinction; it
    # overrides the ordinary reason because the run failed its ownership contract.
    OWNERSHIP_ESCAPE = "ownership-escape"
