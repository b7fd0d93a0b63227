"""Watching a run end: the one owner of its exit futures and its timeout timer.

A collaborator of :class:`tether.supervise.runner.AgentProcess`. It hears what says a
run is ending and decides that the finalizer (:mod:`.finalizer`) must run:

* the keeper's events -- the agent root ``exited`` (with its code and signal), and the
  keeper's ``extinct`` proof;
* the keeper's own exit, seen through its pidfd (``add_reader``; the spawner reaps it);
  the keeper never leaves on its own while the run is live, so a keeper that did was
  killed, and the run must still be ended and swept;
* the run's timeouts (overall, no output), from :class:`.run_state.RunLifecycle`'s
  deadlines, on one ``call_later`` timer.

It never ends anything itself: it records why (the lifecycle's first reason wins) and
asks for the end through ``end``, once (``ending`` says whether it was asked already).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from tether import metrics
from tether.supervise.run_lease import RunLease
from tether.supervise.run_state import RunLifecycle, RunState, TerminationReason
from tether.supervise.spawning import Spawner

__all__ = ["Watchdog"]


class Watchdog:
    """The run's exit futures, the keeper's pidfd callback and the timeout timer."""

    def __init__(
        self,
        lifecycle: RunLifecycle,
        lease: RunLease,
        spawner: Spawner,
        *,
        ending: Callable[[], bool],
        end: Callable[[], None],
    ) -> None:
        self._lifecycle = lifecycle
        self._lease = lease
        self._spawner = spawner
        self._ending = ending
        self._end = end
        # The root's (exit code, signal); (None, None) if the keeper left without saying.
        self.exited: asyncio.Future[tuple[int | None, int | None]] | None = None
        self.extinct: asyncio.Future[dict[str, Any]] | None = None  # the keeper's proof
        self.keeper_exited: asyncio.Future[int] | None = None  # its wait status
        self.root_reported_exit = False
        self._timer: asyncio.TimerHandle | None = None

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        """Create the futures (before the keeper is started)."""
        self.extinct = loop.create_future()
        self.exited = loop.create_future()
        self.keeper_exited = loop.create_future()

    # --- the keeper's events ----------------------------------------------------------

    def on_keeper_event(self, msg: dict[str, Any]) -> None:
        """The keeper's events after ``spawned``: ``exited``, ``extinct``."""
        kind = msg.get("event")
        assert self.extinct
        assert self.exited
        if kind == "exited" and not self.exited.done():
            self.root_reported_exit = True
            self.exited.set_result((msg.get("code"), msg.get("signal")))
            self._lease.log(
                "exit",
                reason="root-exited",
                code=msg.get("code"),
                signal=msg.get("signal"),
            )
            if self._lifecycle.state is RunState.RUNNING:
                self.root_exited_by_itself()
            # Still STARTING (a fast agent: spawned, exited and extinct can arrive in
            # one read, before the start resumes): after_spawn() applies it.
        elif kind == "extinct" and not self.extinct.done():
            self.extinct.set_result(msg)

    def root_exited_by_itself(self) -> None:
        """The agent ended by itself while RUNNING. Record that *now*, and end the run.

        Recording it at once matters: a caller that awaits wait_exited() and then calls
        aclose() must not turn an exit into a "close" requested by us (terminated_by
        would say "daemon"). Ending the run at once matters too: descendants the root
        left behind (a setsid daemon, a backgrounded sleep) must not outlive it until
        someone happens to call aclose().
        """
        self._lifecycle.transition_exited()
        self.disarm()
        if not self._ending():
            self._end()

    def on_keeper_exit(self) -> None:
        """The keeper's pidfd is readable: it exited. Reap it; end the run if live."""
        status = self._spawner.reap_keeper(asyncio.get_running_loop())
        assert self.keeper_exited
        assert self.exited
        if not self.keeper_exited.done():
            self.keeper_exited.set_result(status)
        self._spawner.fail_pending_spawn()
        if not self.exited.done():
            self.exited.set_result((None, None))
        # The keeper never leaves on its own while the run is live; if it did (it was
        # killed), the run must still be ended and swept: the finalizer does that.
        state = self._lifecycle.state
        if not self._ending() and state is RunState.RUNNING:
            if self.root_reported_exit:
                self._lifecycle.transition_exited()  # it ended by itself: terminated by the agent
            else:
                self._lifecycle.request_stop(TerminationReason.SIGNAL)  # the keeper was killed
            self._end()
        elif not self._ending() and state is RunState.EXITING:
            # The root's exit started EXITING but nothing has run the finalizer yet.
            self._end()

    def after_spawn(self) -> None:
        """The run just became RUNNING: apply what happened while it was starting."""
        assert self.keeper_exited is not None
        if self.root_reported_exit:
            self.root_exited_by_itself()  # it exited before we got here
        elif self.keeper_exited.done() and not self._ending():
            # The keeper died (killed) while we were starting: on_keeper_exit saw
            # STARTING and left it to us. End and sweep the run, as it would have.
            self._lifecycle.request_stop(TerminationReason.SIGNAL)
            self._end()
        else:
            self.arm()

    # --- the timeouts -----------------------------------------------------------------

    def arm(self) -> None:
        """(Re)arm the timer for the lifecycle's next deadline, while RUNNING."""
        self.disarm()
        deadline = self._lifecycle.next_deadline()
        if deadline is None or self._lifecycle.state is not RunState.RUNNING:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, deadline - time.monotonic())
        self._timer = loop.call_later(delay, self._on_timer)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        reason = self._lifecycle.due(time.monotonic())
        if reason is None:
            self.arm()  # output re-armed the no-output deadline meanwhile
            return
        # Seed 003's label values: type=no_output|overall.
        kind = "overall" if reason is TerminationReason.OVERALL_TIMEOUT else "no_output"
        metrics.incr("run_timeout_total", type=kind)
        self._lease.log("timeout", reason=reason.value, type=kind)
        if not self._ending():
            self._lifecycle.request_stop(reason)
            self._end()
