"""The owner: a thin composition of its rooms. See :mod:`tether.owner` for the story.

:class:`Owner` wires the session lock and socket (:mod:`.lock`), the IPC server
(:mod:`.server`), the admission queue (:mod:`.queue`), the lifecycle and retirement
policy (:mod:`.lifecycle`), the agent slot (:mod:`.agent_slot`) and the request runner
(:mod:`.requests`), and runs the FIFO loop. It decides; the rooms do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from typing import Any

from tether import _log, _os
from tether.errors import (
    GenerationMismatch,
    OwnerShuttingDown,
    SessionClosed,
    TetherError,
    UsageError,
)
from tether.ipc import protocol
from tether.owner.admission import Admission, rearm
from tether.owner.agent_slot import AgentSlot, RunEnd
from tether.owner.ending import end_session
from tether.owner.heartbeat import Heartbeat
from tether.owner.job import Job, Outbox
from tether.owner.lifecycle import OwnerInput, OwnerLifecycle, OwnerState
from tether.owner.lock import SessionLock
from tether.owner.requests import RequestRunner
from tether.owner.server import IpcServer
from tether.owner.settings import OwnerSettings
from tether.owner.status import end_event, status_snapshot
from tether.registry import Registry
from tether.supervise.reconcile import reconcile
from tether.supervise.run_state import TerminationReason

__all__ = ["Owner"]

LAST_FRAMES_S = 5.0  # on shutdown, how long callers get to take their last frames
CANCEL_SETTLE_S = 1.0  # on shutdown, how long the active turn may take to end `cancelled`
logger = logging.getLogger("tether.owner")


class Owner:
    """The owner of one session. See the package docstring."""

    def __init__(self, key: str, registry: Registry) -> None:
        self.key = key
        self.registry = registry
        session = registry.session(key)
        if session is None or session.state == "closed":
            raise UsageError("no open session for this key", session_key=key)
        self.session = session
        self.settings = OwnerSettings.from_options(session.options)
        self.settings.load_config(session.cwd, session.options)
        self.generation = 0
        self.started_at = time.time()
        self.lock = SessionLock(key)
        self.lifecycle = OwnerLifecycle(
            now=time.monotonic(),
            idle_ttl=self.settings.idle_ttl,
            max_lifetime=self.settings.max_lifetime,
        )
        self.server = IpcServer(
            max_frame_bytes=self.settings.max_frame_bytes,
            hello=self._hello,
            admit=self.admit,
            on_disconnect=self._on_disconnect,
            waiting=lambda outbox: self.admission.waits(outbox),
            idle_timeout=self.settings.connection_idle_timeout,
        )
        self.slot = AgentSlot(
            key,
            registry,
            self.settings,
            current_prompt=self._current_prompt,
            on_run_end=self._on_run_end,
            spawn=self._spawn,
        )
        self.runner = RequestRunner(key, registry, self.settings, self.slot)
        self.admission = Admission(key, self.settings.queue_max_depth, self.slot)
        self.admission.on_change = lambda: self._set_status(
            "running" if self.active is not None else "idle"
        )
        self._stop_event = asyncio.Event()  # set once, by request_shutdown
        self._closer: Job | None = None
        self._close_session = False
        self._retire_timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._shut_down = False
        self.heartbeat = Heartbeat(
            key, unresponsive_after=self.settings.unresponsive_after, depth=lambda: len(self.queue)
        )
        self._held: list[Job] = []  # requests superseded by a close, answered at the end

    @property
    def stopping(self) -> bool:
        return self.lifecycle.is_stopping

    @property
    def active(self) -> Job | None:
        return self.admission.active

    @property
    def queue(self) -> Admission:
        return self.admission

    @property
    def stop_reason(self) -> str:
        return self.lifecycle.stop_reason or ""

    # --- start-up -------------------------------------------------------------------

    async def start(self) -> None:
        """Record this generation, bind the socket, sweep leftovers, start serving."""
        table = _os.current()
        st = table.stat(os.getpid())
        self.generation = self.registry.begin_owner(
            self.key,
            pid=os.getpid(),
            starttime=st.starttime if st else None,
            socket=self.lock.socket_path,
            boot_id=table.boot_id(),  # so a caller can verify us before fencing us
        )
        await self.lock.listen(self.server.serve, limit=256 * 1024)
        # Leftovers of a previous owner of this session (SIGKILL, OOM): verify and reap.
        try:
            reconcile(self.registry, session_key=self.key)
        except Exception:
            logger.exception("reconcile at owner start failed")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(
                sig, self.request_shutdown, f"signal-{signal.Signals(sig).name}"
            )
        self.heartbeat.start()
        self.lifecycle.feed(OwnerInput.STARTED, time.monotonic())
        self._set_status("idle")
        self._schedule_retirement()
        _log.event(
            "owner_started", session_key=self.key, generation=self.generation, pid=os.getpid()
        )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _set_status(self, status: str) -> None:
        with contextlib.suppress(Exception):
            self.registry.update_session(
                self.key,
                owner_status=status,
                queue_depth=len(self.queue),
                owner_heartbeat_at=time.time(),
                current_request=self.active.request_id if self.active else None,
            )

    # --- retirement (idle TTL, max lifetime) ----------------------------------------

    def _schedule_retirement(self) -> None:
        self._retire_timer = rearm(
            self._retire_timer, self.lifecycle.next_check(), self._check_retire
        )

    def _check_retire(self) -> None:
        # A connected caller may be about to send its request: expiring between our hello
        # and its request would reject work we just greeted. A status poll does not reset
        # the TTL; we ask again when the last connection closes.
        reason = self.lifecycle.retirement(
            time.monotonic(), busy=len(self.queue) > 0, held=bool(self.server.connections)
        )
        if reason is not None:
            self.request_shutdown(reason)
        elif self.lifecycle.state is OwnerState.IDLE and not self.server.connections:
            self._schedule_retirement()

    # --- IPC --------------------------------------------------------------------------

    def _hello(self) -> dict[str, Any]:
        return {
            "type": "hello",
            "v": protocol.VERSION,
            "generation": self.generation,
            "ownerPid": os.getpid(),
            "sessionKey": self.key,
            # A stopping owner (idle TTL, close, signal) rejects new work: a caller that
            # sees this waits for it to go and starts a new one.
            "stopping": self.stopping,
        }

    def _on_disconnect(self, outbox: Outbox) -> None:
        # One rule for a caller that goes away before its answer: its turn is cancelled.
        self.admission.detach(outbox)
        if not self.server.connections and self.lifecycle.state is OwnerState.IDLE:
            self._check_retire()

    def _current_prompt(self) -> Job | None:
        job = self.active
        return job if job is not None and job.kind == "prompt" else None

    def admit(self, env: protocol.Envelope, outbox: Outbox) -> None:
        """Decide what to do with one valid request: answer at once, queue, or refuse."""
        job = Job(env, outbox, time.monotonic())
        if env.owner_generation is not None and env.owner_generation != self.generation:
            job.finish(
                error=GenerationMismatch(
                    f"request for owner generation {env.owner_generation},"
                    f" this is {self.generation}"
                )
            )
            return
        if env.kind == "status":
            job.ack()
            job.finish(self.status_snapshot())
            return
        if env.kind == "cancel":
            job.ack()
            job.finish(self.admission.cancel(env.payload.get("targetRequestId")))
            return
        if self.stopping:
            job.finish(error=OwnerShuttingDown(f"the owner is shutting down ({self.stop_reason})"))
            return
        if env.kind == "close":
            job.ack()
            self._closer = job
            self._close_session = True
            self.request_shutdown("close")
            return
        self.admission.enqueue(job)

    def status_snapshot(self) -> dict[str, Any]:
        return status_snapshot(self)

    # --- the FIFO ---------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the queue until shutdown is requested, then shut down."""
        while True:
            self._set_status("running" if self.active is not None else "idle")
            job = await self.admission.next_job(lambda: self.stopping)
            if job is None:
                break
            self.admission.active = job
            self.lifecycle.feed(OwnerInput.JOB_STARTED, time.monotonic())
            self._set_status("running")
            task = asyncio.get_running_loop().create_task(self.runner.run(job))
            try:
                await self._await_job(task)
            except TetherError as exc:
                job.finish(error=exc)
            except Exception as exc:
                logger.exception("request %s failed", job.request_id)
                job.finish(error=TetherError(f"internal error: {exc}"))
            finally:
                self.admission.active = None
                self.lifecycle.feed(OwnerInput.JOB_ENDED, time.monotonic())
            await self.slot.end_if_dead()
            if not self.admission:
                self._schedule_retirement()  # a no-op once stopping (not idle)
        await self.shutdown()

    async def _await_job(self, task: asyncio.Task[None]) -> None:
        """Wait for the active job; once shutdown is requested, for CANCEL_SETTLE_S more.

        The shutdown already sent ``session/cancel``; an agent that ignores it (a hung or
        late turn) must not hold `sessions close`, a signal or the idle TTL hostage until
        the turn ceiling. The job is then abandoned (its task cancelled, which abandons
        the ACP request) and its caller gets ``QUEUE_OWNER_SHUTTING_DOWN``.
        """
        while not task.done() and not self.stopping:
            stop = asyncio.ensure_future(self._stop_event.wait())
            try:
                await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
        if not task.done():
            await asyncio.wait({task}, timeout=CANCEL_SETTLE_S)
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
            if not task.cancelled():
                task.result()  # it finished (or failed) while being cancelled
            raise OwnerShuttingDown(f"the owner is shutting down ({self.stop_reason})")
        task.result()

    def _on_run_end(self, end: RunEnd) -> None:
        """An agent run ended: record it, tell every connected caller."""
        event = end_event(end, stop_reason=self.stop_reason)
        self.registry.add_event(self.key, "agent_run_ended", event)
        self.registry.update_session(self.key, last_end=event)
        if not self.stopping:  # while stopping, callers hear how the owner or session ended
            self.server.broadcast({"type": "agent_run_ended", "requestId": None, "event": event})

    # --- shutdown ---------------------------------------------------------------------

    def request_shutdown(self, reason: str) -> None:
        if not self.lifecycle.request_stop(reason, time.monotonic()):
            return
        self.slot.stopping = True
        self._retire_timer = rearm(self._retire_timer, None, self._check_retire)
        _log.event("owner_stopping", session_key=self.key, reason=reason)
        self._stop_event.set()
        # Stop the active turn (the session stays resumable unless closing); a turn that
        # has not reached the agent yet is not sent at all.
        held = self.admission.stop(closing=reason == "close")
        if held is not None:
            self._held.append(held)

    async def shutdown(self) -> None:
        """Tear everything down; runs once, after the FIFO loop has stopped."""
        if self._shut_down:
            return
        self._shut_down = True
        self._set_status("stopping")
        self.lock.stop_listening()
        closing = self._close_session
        waiting = self.admission.drain(
            SessionClosed("the session was closed before this request ran")
            if closing
            else OwnerShuttingDown(f"the owner is shutting down ({self.stop_reason})")
        )
        reason = TerminationReason.CLOSE if closing else TerminationReason.SIGNAL
        if self.stop_reason in ("idle-ttl", "max-lifetime"):
            reason = TerminationReason.CLOSE
        end = await self.slot.end_current(reason=reason, close_session=closing)
        fields: dict[str, Any] = {
            "owner_status": "stopped",
            "owner_pid": None,
            "owner_socket": None,
            "queue_depth": 0,
            "current_request": None,
        }
        if closing:
            fields.update(state="closed", closed_at=time.time())
        self.registry.update_session(self.key, **fields)
        if closing:
            end_session(
                self.registry,
                self.server,
                self.key,
                generation=self.generation,
                end=end,
                superseded=[j for j in self._held if not j.done],
                closer=self._closer,
            )
        # Last frames (a terminal, session_ended) must reach callers that read slowly
        # behind a stream; bounded, so a caller that never reads cannot hold us.
        await self.server.close_all(LAST_FRAMES_S)
        self.heartbeat.stop()
        self.lock.release()
        self.lifecycle.feed(OwnerInput.STOPPED, time.monotonic())
        _log.event(
            "owner_stopped", session_key=self.key, reason=self.stop_reason, answered=len(waiting)
        )
