"""Escapes, between the run's plumbing and its finalizer (issue 20, item 1).

A layer of :class:`tether.supervise.runner.AgentProcess` (above :mod:`.run_core`, below
:mod:`.reaper`): recording the run's members as they are observed
(:mod:`tether.state._registry_members`), and the two checks the finalizer makes after the
keeper has done -- or failed to do -- its job:

* **a keeper that died before the run ended** is an escape attempt. Its tree was
  re-parented to us, the subreaper of last resort (:mod:`.adoption`): each adopted
  process is recorded as a member, ended (TERM, grace, KILL) and reaped, and the run
  ends ``ownership-escape`` even if nothing was left to end;
* **a recorded member still alive** after the keeper's proof (it moved out of the
  keeper's reach while the keeper lived: impossible by the kernel's rules for a
  subreaper, but a record is cheap to check) is reported, ended by its identity
  (:mod:`.members`) and counted; one that cannot be ended is a survivor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from tether.supervise import adoption, members
from tether.supervise.run_core import RunCore

__all__ = ["RunEscapes"]


class RunEscapes(RunCore):
    """Recording members and ending escapes (see the module docstring)."""

    def _record_members(
        self, idents: list[tuple[int | None, int | None]], how: str, boot_id: str | None = None
    ) -> None:
        """Record members of this run, observed while provably inside it (best effort:
        a registry that cannot be written loses the record, never the run)."""
        pairs = [(p, s) for p, s in idents if p is not None and s is not None]
        if not pairs:
            return
        try:
            boot = boot_id or self.table.boot_id()
            self.registry.record_members(self.lease_id, self.spec.session_key, boot, pairs, how)
        except Exception as exc:
            self._log("member_record_failed", logging.WARNING, reason=str(exc), how=how)

    async def _end_after_keeper_loss(
        self, keeper_report: dict[str, Any] | None, keeper_gone_first: bool
    ) -> tuple[list[int], bool]:
        """``(adopted pids ended, whether the keeper died before the run ended)``."""
        if keeper_report is not None:
            return [], False
        keeper_lost = keeper_gone_first and self.pid is not None
        if keeper_lost:
            self._log(
                "keeper_lost",
                logging.WARNING,
                reason="ownership-escape",
                why="the keeper died before its run ended",
                keeper_pid=self.keeper.pid if self.keeper is not None else None,
            )
        found = await adoption.end_adopted(
            self.table, lambda new: self._record_members(list(new), "adopted"), self.spec.grace
        )
        return found, keeper_lost

    async def _end_recorded_members(self) -> tuple[list[int], list[int]]:
        """``(members found alive and ended, members still alive)`` of this run."""
        try:
            recorded = self.registry.members(lease_id=self.lease_id)
        except Exception:
            return [], []
        live, gone = members.split_alive(self.table, recorded)
        with contextlib.suppress(Exception):
            self.registry.forget_members(gone)
        if not live:
            return [], []
        left = await asyncio.to_thread(members.end_blocking, self.table, live, self.spec.grace)
        with contextlib.suppress(Exception):
            self.registry.forget_members([m for m in live if m not in left])
        return [m.pid for m in live if m not in left], [m.pid for m in left]
