"""Ending a run with proof: the second layer of :class:`tether.supervise.runner.AgentProcess`.

``_teardown`` is the single finalizer: whatever ends the run -- a close, a cancel, a
timeout (the watchdog here), the agent exiting, the keeper dying -- converges there, and
it runs once. It asks the keeper to terminate (SIGTERM -> grace -> SIGKILL -> ECHILD),
waits for the ``extinct`` proof, and checks the third witness itself: no live process
carries the lease marker. If the keeper cannot do its job, the supervisor sweeps the
lease's verified processes itself, through pidfds. A marker carrier is only a
candidate: one that is not a proven member (:mod:`.proof`) is reported as
``unproven`` and never signalled (issue 20, item 2). The lease ends ``closed``, or ``lost``
when extinction could not be proven.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import time
from typing import Any

from tether import _aio, _os, metrics
from tether.supervise.escapes import RunEscapes
from tether.supervise.lease_state import LeaseInput, LeaseState
from tether.supervise.proof import split_claims
from tether.supervise.run_state import RunState, TerminationReason
from tether.supervise.run_types import ExtinctionReport
from tether.supervise.verify import marked_survivors, marker_for, signal_verified

__all__ = ["RunReaper"]

EXTINCTION_SLACK_S = 5.0  # beyond the grace, how long we wait for the keeper's proof
UNPROVEN_REASON = "carries the run's marker but is not a proven member: not signalled"


class RunReaper(RunEscapes):
    """The watchdog and the single finalizer of a run."""

    # --- watchdog -------------------------------------------------------------------

    def _arm_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        deadline = self.lifecycle.next_deadline()
        if deadline is None or self.lifecycle.state is not RunState.RUNNING:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, deadline - time.monotonic())
        self._watchdog = loop.call_later(delay, self._on_watchdog)

    def _on_watchdog(self) -> None:
        self._watchdog = None
        reason = self.lifecycle.due(time.monotonic())
        if reason is None:
            self._arm_watchdog()  # output re-armed the no-output deadline meanwhile
            return
        # Seed 003's label values: type=no_output|overall.
        kind = "overall" if reason is TerminationReason.OVERALL_TIMEOUT else "no_output"
        metrics.incr("run_timeout_total", type=kind)
        self._log("timeout", reason=reason.value, type=kind)
        if self._closing is None:
            self.lifecycle.request_stop(reason)
            self._closing = _aio.spawn(self._teardown())

    # --- teardown: the single finalizer ------------------------------------------------

    async def _teardown(self) -> ExtinctionReport:
        ended = self._ended
        try:
            report = await self._teardown_once()
        except BaseException as exc:
            if ended is not None and not ended.done():
                if isinstance(exc, asyncio.CancelledError):
                    ended.cancel()
                else:
                    ended.set_exception(exc)
                    ended.exception()  # retrieved here; wait_ended() still raises it
            raise
        if ended is not None and not ended.done():
            ended.set_result(report)
        return report

    async def _teardown_once(self) -> ExtinctionReport:
        started = time.monotonic()
        if self._watchdog is not None:
            self._watchdog.cancel()
        reason = self.lifecycle.stop_reason or TerminationReason.EXIT
        if self.lifecycle.state is RunState.RUNNING:
            self.lifecycle.transition_stop()
        self._lease_write(
            LeaseInput.CLOSE_STARTED,
            LeaseState.OPEN,
            reason=reason.value,
            run_state=RunState.EXITING.value,
        )
        self._log("cleanup", reason=reason.value)
        keeper_report: dict[str, Any] | None = None
        assert self._extinct is not None
        assert self._keeper_exited is not None
        keeper_gone_first = self._keeper_exited.done()  # it died before we asked (issue 20)
        if self.keeper is not None and not self._keeper_exited.done():
            self._control_send({"cmd": "terminate", "grace_ms": int(self.spec.grace * 1000)})
            try:
                async with asyncio.timeout(self.spec.grace + EXTINCTION_SLACK_S):
                    keeper_report = await asyncio.shield(self._extinct)
                    await asyncio.shield(self._keeper_exited)
            except TimeoutError:
                keeper_report = None
        else:
            # The keeper has exited. Its last words may still sit unread in the control
            # socket (the pidfd and the socket became readable in one loop pass, and the
            # pidfd callback ran first): read them before concluding it left no proof,
            # or a clean run is misreported as a supervisor sweep with escalation.
            self._drain_control()
            if self._extinct.done():
                keeper_report = self._extinct.result()
        if self.keeper is not None and self.keeper.returncode is None:
            # The keeper did not answer: end it ourselves (our unreaped child, via pidfd).
            await self._kill_keeper()
        # What a dead keeper left was re-parented to us: end it (.escapes, .adoption).
        adopted, keeper_lost = await self._end_after_keeper_loss(keeper_report, keeper_gone_first)
        mode = str(keeper_report.get("mode")) if keeper_report else "supervisor-sweep"
        escalated = bool(keeper_report.get("escalated")) if keeper_report else True
        raw_escaped = keeper_report.get("escaped") if keeper_report else None
        escaped = [int(p) for p in raw_escaped] if isinstance(raw_escaped, list) else []
        escaped += [p for p in adopted if p not in escaped]
        # The third witness: a /proc scan for the lease marker. One scan when the keeper
        # proved extinction and the scan agrees (the common case: a full scan reads
        # every process's environ, which is most of the teardown's cost after the
        # grace); a sweep and a second scan only when they disagree.
        # Each marker carrier must also be a proven member (supervise.proof): one that
        # only claims the run is reported as unproven and never signalled.
        found, unproven = self._marker_claims()
        if keeper_report is None or found:
            await self._sweep_marker()
            found, unproven = self._marker_claims()
        # The last witness: recorded members of this run still alive (.escapes). A
        # recorded member is proven by its record, so it is no longer a mere claimant.
        ended_members, left_members = await self._end_recorded_members()
        escaped += [p for p in ended_members if p not in escaped]
        survivors = tuple(found) + tuple(p for p in left_members if p not in found)
        unproven = [p for p in unproven if p not in ended_members and p not in left_members]
        if unproven:
            self._log("unproven_claim", logging.WARNING, reason=UNPROVEN_REASON, pids=unproven)
        if keeper_report is not None and found:
            # The keeper proved ECHILD, yet marked processes live: they left its subtree
            # as well as the group (only an escape can do that). Reaped by the sweep.
            escaped += [p for p in found if p not in escaped]
        for t in self._transports:
            t.close()
        if self._control is not None:
            self._control.close()
            self._control = None
        if self.cgroup:
            with contextlib.suppress(OSError):
                self.table.cgroup_remove(self.cgroup)
        assert self.exited is not None
        code, sig = self.exited.result() if self.exited.done() else (None, None)
        if reason is TerminationReason.EXIT and sig is not None:
            reason = TerminationReason.SIGNAL
        if self.lifecycle.state is RunState.EXITING:
            self.lifecycle.transition_extinct()
        self.lifecycle.finalize(reason=reason, exit_code=code, exit_signal=sig)
        reason = self.lifecycle.reason or reason
        if escaped or keeper_lost:
            # Seed 003: a descendant that left the run's boundary marks the run failed
            # with reason ownership-escape (it was still reaped under this lease).
            reason = TerminationReason.OWNERSHIP_ESCAPE
            metrics.incr("run_ownership_escape_total")
            self._log("ownership_escape", logging.WARNING, reason=reason.value, pids=escaped)
        if escalated:
            metrics.incr("run_cleanup_kill_total", mode="cgroup" if self.cgroup else "pgid")
        metrics.incr("run_exit_total", reason=reason.value)
        report = ExtinctionReport(
            reason=reason.value,
            exit_code=code,
            exit_signal=sig,
            mode=mode,
            escalated=escalated,
            survivors=survivors,
            elapsed_ms=round((time.monotonic() - started) * 1000, 3),
            stderr_tail=self.stderr_tail(),
            keeper_ms=float(keeper_report["elapsed_ms"])
            if keeper_report and isinstance(keeper_report.get("elapsed_ms"), int | float)
            else None,
            escaped=tuple(escaped),
            unproven=tuple(unproven),
        )
        # Without the keeper's ECHILD proof, claimants we cannot prove (nor disprove)
        # members leave the run's extinction unproven: the lease ends lost.
        unverified = bool(survivors) or (keeper_report is None and bool(unproven))
        self._lease_write(
            LeaseInput.UNVERIFIABLE if unverified else LeaseInput.EXTINCTION_PROVEN,
            LeaseState.CLOSING,
            reason=reason.value,
            failure=reason.value if escaped or keeper_lost else None,
            run_state=RunState.EXITED.value,
            exit_code=code,
            exit_signal=sig,
            kill_mode=mode,
            lease_expires_at=time.time(),  # released: the run is over
            last_output_at=(
                time.time() - (time.monotonic() - self.last_output_at)
                if self.last_output_at is not None
                else None
            ),
            note=_note(survivors, unproven),
        )
        self._heartbeat.remove(self.lease_id)
        if not self._lease_held:
            # The thief ended the lease and reported the run's end: say so, once.
            report = dataclasses.replace(report, lease_stolen=True)
        self._log(
            "extinct",
            reason=reason.value,
            mode=mode,
            escalated=escalated,
            survivors=list(survivors),
            elapsed_ms=report.elapsed_ms,
            lease_stolen=report.lease_stolen,
        )
        return report

    async def _kill_keeper(self) -> None:
        assert self.keeper is not None
        assert self._keeper_exited is not None
        if self.keeper_pidfd is not None:
            with contextlib.suppress(OSError):
                self.table.signal_child(self.keeper_pidfd, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await asyncio.shield(self._keeper_exited)

    def _marker_claims(self) -> tuple[list[int], list[int]]:
        """Live processes that carry this run's lease marker (the third witness), split
        into (proven members, unproven claimants) -- see :mod:`.proof`.

        The anchor is this supervisor: the keeper is its child, so every member lives
        below it while the keeper does (and after, when we are the subreaper that
        adopted the keeper's orphans); the run's cgroup proves the rest.
        """
        try:
            pids = marked_survivors(self.table, marker_for(self.lease_id), exclude=[os.getpid()])
            members: list[int] = []
            if self.cgroup:
                with contextlib.suppress(OSError):
                    members = self.table.cgroup_procs(self.cgroup)
            return split_claims(self.table, pids, anchors=[os.getpid()], cgroup_members=members)
        except _os.ProcUnreadable:
            return [], []  # /proc unreadable: the keeper's ECHILD and the cgroup still stand

    async def _sweep_marker(self) -> None:
        """Supervisor-side sweep: the keeper is gone, so kill verified marker carriers."""
        if self.cgroup:
            with contextlib.suppress(OSError):
                self.table.cgroup_kill(self.cgroup)
        boot_id = self.table.boot_id()
        marker = marker_for(self.lease_id)
        for _ in range(50):
            pids, _unproven = self._marker_claims()  # never the unproven ones
            if not pids:
                return
            for pid in pids:
                st = self.table.stat(pid)
                if st is None:
                    continue
                ident = _os.ProcessIdentity(boot_id, pid, st.starttime)
                signal_verified(self.table, ident, signal.SIGKILL, marker=marker)
            await asyncio.sleep(0.01)


def _note(survivors: tuple[int, ...], unproven: list[int]) -> str | None:
    """The lease's note about what outlived the run, or None."""
    parts = [f"survivors={list(survivors)}"] if survivors else []
    if unproven:
        parts.append(f"unproven={unproven} (carry the marker, not proven members: not signalled)")
    return "; ".join(parts) or None
