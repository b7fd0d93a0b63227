"""A run's two records: what to start (:class:`SpawnSpec`) and how it ended, with the
proof that nothing of it is left (:class:`ExtinctionReport`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_GRACE_S", "ExtinctionReport", "SpawnSpec"]

DEFAULT_GRACE_S = 1.5  # SIGTERM -> SIGKILL grace; openab uses 1.5 s as well


@dataclass(frozen=True)
class ExtinctionReport:
    """How a run ended and the proof that nothing of it is left."""

    reason: str
    exit_code: int | None
    exit_signal: int | None
    mode: str  # cgroup | subreaper | supervisor-sweep
    escalated: bool
    survivors: tuple[int, ...]
    elapsed_ms: float
    stderr_tail: str = ""
    keeper_ms: float | None = None  # the keeper's own TERM -> proof time, if it reported
    escaped: tuple[int, ...] = ()  # descendants found outside the run's boundary
    # Processes that carry the run's marker but are not proven members: never signalled
    unproven: tuple[int, ...] = ()
    # Another supervisor stole the run's lease (we were stopped or hung past its expiry):
    # it ended the run and reported that end, so this supervisor must not report it again
    lease_stolen: bool = False


@dataclass
class SpawnSpec:
    """What to run and how. ``grace`` is the SIGTERM -> SIGKILL wait."""

    argv: Sequence[str]
    cwd: str
    env: Mapping[str, str] | None = None
    session_key: str | None = None
    grace: float = DEFAULT_GRACE_S
    overall_timeout: float | None = None
    no_output_timeout: float | None = None
    pty: bool = False
    backend_id: str | None = None  # the agent's registry name or command label
    # stderr into the stdout pipe, as on a terminal (agents' terminals); the stderr tail
    # then stays empty. A PTY run merges them anyway.
    merge_stderr: bool = False
