"""Ending a run with proof: the single finalizer, the one owner of the run's end.

A collaborator of :class:`tether.supervise.runner.AgentProcess`. Whatever ends the run
-- a close, a cancel, a timeout or the agent exiting (:mod:`.watchdog`), the keeper
dying -- converges on :meth:`Finalizer.begin`, and the teardown runs once; duplicates
wait for the first. It asks the keeper to terminate (SIGTERM -> grace -> SIGKILL ->
ECHILD), waits for the ``extinct`` proof, and checks the witnesses itself
(:mod:`.witnesses`): what a dead keeper left behind, the processes that carry the lease
marker, the run's recorded members. If the keeper cannot do its job, the supervisor
sweeps the lease's verified processes itself, through pidfds; a marker carrier that is
not a proven member (:mod:`.proof`) is reported as ``unproven`` and never signalled
(issue 20, item 2). The lease ends ``closed``, or ``lost`` when extinction could not be
proven; the end is recorded once, in the report that every waiter receives.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Any

from tether import _aio, _os, metrics
from tether.supervise import witnesses
from tether.supervise.lease_state import LeaseInput, LeaseState
from tether.supervise.run_io import RunIO
from tether.supervise.run_lease import RunLease
from tether.supervise.run_state import RunLifecycle, RunState, TerminationReason
from tether.supervise.run_types import ExtinctionReport, SpawnSpec
from tether.supervise.spawning import Spawner
from tether.supervise.watchdog import Watchdog

__all__ = ["EXTINCTION_SLACK_S", "Finalizer"]

EXTINCTION_SLACK_S = 5.0  # beyond the grace, how long we wait for the keeper's proof
KEEPER_KILL_WAIT_S = 2.0  # after SIGKILLing a silent keeper, how long we wait for its exit
UNPROVEN_REASON = "carries the run's marker but is not a proven member: not signalled"


@dataclasses.dataclass
class _Findings:
    """What the keeper and the witnesses say about the run's tree after the stop."""

    mode: str  # cgroup | subreaper | supervisor-sweep
    escalated: bool
    escaped: list[int]
    survivors: tuple[int, ...]
    unproven: list[int]
    keeper_lost: bool
    keeper_ms: float | None


class Finalizer:
    """The run's single teardown task and the report of its end."""

    def __init__(
        self,
        spec: SpawnSpec,
        table: _os.ProcessTable,
        lifecycle: RunLifecycle,
        parts: tuple[RunLease, RunIO, Spawner, Watchdog],
    ) -> None:
        self._spec = spec
        self._table = table
        self._lifecycle = lifecycle
        self._lease, self._io, self._spawner, self._watch = parts
        self._closing: asyncio.Task[ExtinctionReport] | None = None
        self._ended: asyncio.Future[ExtinctionReport] | None = None

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        """Create the end's future (before the keeper is started)."""
        self._ended = loop.create_future()

    @property
    def started(self) -> bool:
        """Whether the teardown task was started (by anyone)."""
        return self._closing is not None

    def begin(self) -> asyncio.Task[ExtinctionReport]:
        """Start the teardown task, once; later calls return the same task."""
        if self._closing is None:
            self._closing = _aio.spawn(self.teardown())
        return self._closing

    async def wait_ended(self) -> ExtinctionReport:
        """The report of the run's end, whatever ends it (never starts a teardown)."""
        assert self._ended is not None
        return await asyncio.shield(self._ended)

    async def teardown(self) -> ExtinctionReport:
        """End the run with proof; the result (or error) is also the end's future."""
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
        reason = self._begin_stop()
        keeper_report, keeper_gone_first = await self._stop_through_keeper()
        found = await self._witness(keeper_report, keeper_gone_first)
        self._release()
        reason, code, sig = self._settle(reason, found)
        report = ExtinctionReport(
            reason=reason.value,
            exit_code=code,
            exit_signal=sig,
            mode=found.mode,
            escalated=found.escalated,
            survivors=found.survivors,
            elapsed_ms=round((time.monotonic() - started) * 1000, 3),
            stderr_tail=self._io.stderr_tail(),
            keeper_ms=found.keeper_ms,
            escaped=tuple(found.escaped),
            unproven=tuple(found.unproven),
        )
        return self._record_end(report, reason, found, proven=keeper_report is not None)

    def _begin_stop(self) -> TerminationReason:
        """Stop the timer, move the run to EXITING and the lease to closing; the reason."""
        self._watch.disarm()
        reason = self._lifecycle.stop_reason or TerminationReason.EXIT
        if self._lifecycle.state is RunState.RUNNING:
            self._lifecycle.transition_stop()
        self._lease.advance(
            LeaseInput.CLOSE_STARTED,
            LeaseState.OPEN,
            reason=reason.value,
            run_state=RunState.EXITING.value,
        )
        self._lease.log("cleanup", reason=reason.value)
        return reason

    async def _stop_through_keeper(self) -> tuple[dict[str, Any] | None, bool]:
        """``(the keeper's extinction proof or None, whether it died before we asked)``."""
        extinct, keeper_exited = self._watch.extinct, self._watch.keeper_exited
        assert extinct is not None
        assert keeper_exited is not None
        keeper_report: dict[str, Any] | None = None
        keeper_gone_first = keeper_exited.done()  # it died before we asked (issue 20)
        if self._spawner.keeper is not None and not keeper_exited.done():
            self._spawner.ask_terminate()
            try:
                async with asyncio.timeout(self._spec.grace + EXTINCTION_SLACK_S):
                    keeper_report = await asyncio.shield(extinct)
                    await asyncio.shield(keeper_exited)
            except TimeoutError:
                keeper_report = None
        else:
            # The keeper has exited. Its last words may still sit unread in the control
            # socket (the pidfd and the socket became readable in one loop pass, and the
            # pidfd callback ran first): read them before concluding it left no proof,
            # or a clean run is misreported as a supervisor sweep with escalation.
            self._spawner.drain_control()
            if extinct.done():
                keeper_report = extinct.result()
        if self._spawner.keeper_unreaped:
            # The keeper did not answer: end it ourselves (our unreaped child, via pidfd).
            self._spawner.kill_keeper()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KEEPER_KILL_WAIT_S):
                    await asyncio.shield(keeper_exited)
        return keeper_report, keeper_gone_first

    async def _witness(
        self, keeper_report: dict[str, Any] | None, keeper_gone_first: bool
    ) -> _Findings:
        """Check every witness after the keeper's stop; end what is found (see module)."""
        spawner, lease_id, cgroup = self._spawner, self._lease.lease_id, self._spawner.cgroup
        # What a dead keeper left was re-parented to us: end it (.witnesses, .adoption).
        adopted, keeper_lost = await witnesses.end_after_keeper_loss(
            self._lease,
            self._table,
            self._spec.grace,
            keeper_report,
            keeper_gone_first=keeper_gone_first,
            root_pid=spawner.pid,
            keeper_pid=spawner.keeper.pid if spawner.keeper is not None else None,
        )
        raw_escaped = keeper_report.get("escaped") if keeper_report else None
        escaped = [int(p) for p in raw_escaped] if isinstance(raw_escaped, list) else []
        escaped += [p for p in adopted if p not in escaped]
        # The third witness: a /proc scan for the lease marker. One scan when the keeper
        # proved extinction and the scan agrees (the common case: a full scan reads
        # every process's environ, which is most of the teardown's cost after the
        # grace); a sweep and a second scan only when they disagree.
        # Each marker carrier must also be a proven member (supervise.proof): one that
        # only claims the run is reported as unproven and never signalled.
        found, unproven = witnesses.marker_claims(self._table, lease_id, cgroup)
        if keeper_report is None or found:
            await witnesses.sweep_marker(self._table, lease_id, cgroup)
            found, unproven = witnesses.marker_claims(self._table, lease_id, cgroup)
        # The last witness: recorded members of this run still alive. A recorded
        # member is proven by its record, so it is no longer a mere claimant.
        ended_members, left_members = await witnesses.end_recorded_members(
            self._lease, self._table, self._spec.grace
        )
        escaped += [p for p in ended_members if p not in escaped]
        survivors = tuple(found) + tuple(p for p in left_members if p not in found)
        unproven = [p for p in unproven if p not in ended_members and p not in left_members]
        if unproven:
            self._lease.log(
                "unproven_claim", logging.WARNING, reason=UNPROVEN_REASON, pids=unproven
            )
        if keeper_report is not None and found:
            # The keeper proved ECHILD, yet marked processes live: they left its subtree
            # as well as the group (only an escape can do that). Reaped by the sweep.
            escaped += [p for p in found if p not in escaped]
        return _Findings(
            mode=str(keeper_report.get("mode")) if keeper_report else "supervisor-sweep",
            escalated=bool(keeper_report.get("escalated")) if keeper_report else True,
            escaped=escaped,
            survivors=survivors,
            unproven=unproven,
            keeper_lost=keeper_lost,
            keeper_ms=_keeper_ms(keeper_report),
        )

    def _release(self) -> None:
        """Close the run's stdio and control channel; remove its cgroup."""
        self._io.close()
        self._spawner.close_control()
        self._spawner.remove_cgroup()

    def _settle(
        self, reason: TerminationReason, found: _Findings
    ) -> tuple[TerminationReason, int | None, int | None]:
        """Settle the lifecycle and count the end: ``(reason, exit code, exit signal)``."""
        exited = self._watch.exited
        assert exited is not None
        code, sig = exited.result() if exited.done() else (None, None)
        if reason is TerminationReason.EXIT and sig is not None:
            reason = TerminationReason.SIGNAL
        if self._lifecycle.state is RunState.EXITING:
            self._lifecycle.transition_extinct()
        self._lifecycle.finalize(reason=reason, exit_code=code, exit_signal=sig)
        reason = self._lifecycle.reason or reason
        if found.escaped or found.keeper_lost:
            # Seed 003: a descendant that left the run's boundary marks the run failed
            # with reason ownership-escape (it was still reaped under this lease).
            reason = TerminationReason.OWNERSHIP_ESCAPE
            metrics.incr("run_ownership_escape_total")
            self._lease.log(
                "ownership_escape", logging.WARNING, reason=reason.value, pids=found.escaped
            )
        if found.escalated:
            mode = "cgroup" if self._spawner.cgroup else "pgid"
            metrics.incr("run_cleanup_kill_total", mode=mode)
        metrics.incr("run_exit_total", reason=reason.value)
        return reason, code, sig

    def _record_end(
        self, report: ExtinctionReport, reason: TerminationReason, found: _Findings, *, proven: bool
    ) -> ExtinctionReport:
        """Write the lease's end (once) and log it; the report as every waiter gets it."""
        # Without the keeper's ECHILD proof, claimants we cannot prove (nor disprove)
        # members leave the run's extinction unproven: the lease ends lost.
        unverified = bool(found.survivors) or (not proven and bool(found.unproven))
        self._lease.advance(
            LeaseInput.UNVERIFIABLE if unverified else LeaseInput.EXTINCTION_PROVEN,
            LeaseState.CLOSING,
            reason=reason.value,
            failure=reason.value if found.escaped or found.keeper_lost else None,
            run_state=RunState.EXITED.value,
            exit_code=report.exit_code,
            exit_signal=report.exit_signal,
            kill_mode=found.mode,
            lease_expires_at=time.time(),  # released: the run is over
            last_output_at=self._io.wall_last_output(),
            note=_note(found.survivors, found.unproven),
        )
        self._lease.stop_renewing()
        if not self._lease.held:
            # The thief ended the lease and reported the run's end: say so, once.
            report = dataclasses.replace(report, lease_stolen=True)
        self._lease.log(
            "extinct",
            reason=reason.value,
            mode=found.mode,
            escalated=found.escalated,
            survivors=list(found.survivors),
            elapsed_ms=report.elapsed_ms,
            lease_stolen=report.lease_stolen,
        )
        return report


def _keeper_ms(keeper_report: dict[str, Any] | None) -> float | None:
    """The keeper's own TERM -> proof time, if it reported one."""
    if keeper_report and isinstance(keeper_report.get("elapsed_ms"), int | float):
        return float(keeper_report["elapsed_ms"])
    return None


def _note(survivors: tuple[int, ...], unproven: list[int]) -> str | None:
    """The lease's note about what outlived the run, or None."""
    parts = [f"survivors={list(survivors)}"] if survivors else []
    if unproven:
        parts.append(f"unproven={unproven} (carry the marker, not proven members: not signalled)")
    return "; ".join(parts) or None
