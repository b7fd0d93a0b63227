"""A run's lease and its log lines: the one writer of the run's lease row.

A collaborator of :class:`tether.supervise.runner.AgentProcess`. It owns the lease id,
the registry it is written to, the heartbeat that renews it, and whether the lease is
still ours. Every write of the run's lease goes through here: the creation (``open``,
naming the keeper), plain field updates, and the state moves -- a compare-and-set
through the lease table (:mod:`.lease_state`) on us as the holder. Members observed
inside the run are recorded here too (best effort: a registry that cannot be written
loses the record, never the run).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from tether import _log
from tether.supervise.lease_renewal import SUPERVISOR_ID, heartbeat_for
from tether.supervise.lease_state import LeaseInput, LeaseState

__all__ = ["RunLease"]


class RunLease:
    """The run's lease row, its heartbeat and its log lines (see the module docstring)."""

    def __init__(self, registry: Any, lease_id: str, session_key: str | None) -> None:
        self.registry = registry
        self.lease_id = lease_id
        self.session_key = session_key
        self.instance_id: str = registry.instance_id
        self._heartbeat = heartbeat_for(str(registry.path), registry.reopener())
        # False once a write found the lease no longer ours (another supervisor stole
        # it while we were stopped): we stop writing it, the thief reports the end.
        self.held = True

    def log(self, name: str, level: int = logging.INFO, *, reason: str, **fields: Any) -> None:
        """One supervision log line: always the run (lease) id, the session and the reason."""
        _log.event(
            name,
            level,
            runId=self.lease_id,
            sessionKey=self.session_key,
            reason=reason,
            **fields,
        )

    def create(self, now: float, **fields: Any) -> None:
        """Write the lease (``open``) and start renewing it; ``now`` is the wall clock."""
        self.registry.create_lease(
            lease_id=self.lease_id,
            lease_expires_at=now + self._heartbeat.ttl,
            heartbeat_at=now,
            **fields,
        )
        self._heartbeat.add(self.lease_id)

    def update(self, **fields: Any) -> None:
        """Write plain fields of the lease (no state move). Raises what the registry raises."""
        self.registry.update_lease(self.lease_id, **fields)

    def stamp_output(self, wall: float) -> None:
        """Stamp the last output time (best effort: the output heartbeat)."""
        with contextlib.suppress(Exception):
            self.registry.update_lease(self.lease_id, last_output_at=wall)

    def advance(self, event: LeaseInput, expect: LeaseState, **fields: Any) -> None:
        """Advance our lease through its table, as a compare-and-set on us as its holder.

        If the write finds the lease no longer ours (another supervisor stole it while
        we were stopped), we stop writing it: the thief ends it and reports its end.
        """
        if not self.held:
            return
        try:
            moved = self.registry.advance_lease(
                self.lease_id, event, expect=expect, owner=SUPERVISOR_ID, **fields
            )
        except Exception as exc:
            self.log("lease_write_failed", logging.WARNING, reason=str(exc), input=event.name)
            return
        if moved is None:
            self.held = False
            self.log(
                "lease_stolen", logging.WARNING, reason="lease-no-longer-ours", input=event.name
            )

    def stop_renewing(self) -> None:
        """The run is over: the heartbeat no longer renews this lease."""
        self._heartbeat.remove(self.lease_id)

    def record_members(
        self, idents: list[tuple[int | None, int | None]], how: str, boot_id: Callable[[], str]
    ) -> None:
        """Record members of this run, observed while provably inside it (best effort:
        a registry that cannot be written, or a boot id that cannot be read, loses the
        record, never the run)."""
        pairs = [(p, s) for p, s in idents if p is not None and s is not None]
        if not pairs:
            return
        try:
            self.registry.record_members(self.lease_id, self.session_key, boot_id(), pairs, how)
        except Exception as exc:
            self.log("member_record_failed", logging.WARNING, reason=str(exc), how=how)
