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

from tether import _log, _os, metrics
from tether.errors import (
    GenerationMismatch,
    OwnerShuttingDown,
    SessionClosed,
    StateError,
    TetherError,
    UsageError,
)
from tether.ipc import protocol
from tether.journal.writer import JournalWriter
from tether.owner.admission import Admission, rearm
from tether.owner.agent_slot import AgentSlot, RunEnd
from tether.owner.ending import end_session
from tether.owner.gate import PeerGate
from tether.owner.heartbeat import Heartbeat
from tether.owner.interactions import Interactions
from tether.owner.job import Job, Outbox
from tether.owner.lifecycle import OwnerInput, OwnerLifecycle, OwnerState
from tether.owner.lock import SessionLock
from tether.owner.memory import MemoryTrim
from tether.owner.requests import RequestRunner
from tether.owner.server import IpcServer
from tether.owner.settings import OwnerSettings
from tether.owner.status import end_event, status_snapshot
from tether.owner.watchers import Fanout, Watch
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
        self.interactions = self.slot.questions = Interactions(
            timeout=self.settings.permission_timeout,
            current_request=lambda: self.active.request_id if self.active else None,
            agent_tree=self._agent_roots,
        )
        self.admission = Admission(key, self.settings.queue_max_depth, self.slot)
        self.memory = MemoryTrim(
            lambda: self.active is None and not self.admission, shrink=self._shrink_journal
        )
        self.gate = PeerGate(key, registry, session.cwd)  # who the IPC peer is, and may it
        self.admission.on_change = lambda: self._set_status(
            "running" if self.active is not None else "idle"
        )
        self._stop_event = asyncio.Event()  # set once, by request_shutdown
        self._closer: Job | None = None
        self._close_session = False
        # terminate (seed 004): who asked, and the immediate teardown under way
        self._terminate_by: dict[str, Any] | None = None
        self._terminating: asyncio.Task[RunEnd | None] | None = None
        self._discard = False  # close --discard: session/delete the agent's session too
        self._retire_timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._shut_down = False
        self.heartbeat = Heartbeat(
            key, unresponsive_after=self.settings.unresponsive_after, depth=lambda: len(self.queue)
        )
        self._held: list[Job] = []  # requests superseded by a close, answered at the end
        self.journal: JournalWriter | None = None
        self.fanout: Fanout | None = None

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
        # Seed 001: every owner line carries sessionId, ownerPid and ownerGeneration.
        _log.bind_process(sessionId=self.key, ownerPid=os.getpid(), ownerGeneration=self.generation)
        metrics.incr("owner_spawn_total")
        self._open_journal()
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

    def _open_journal(self) -> None:
        """Become the journal's writer (we hold the session lock) and wire the rooms in."""
        journal = JournalWriter(self.registry.path, self.key, retention=self.settings.retention)
        self.journal = journal
        self.fanout = Fanout(journal)
        self.admission.record = self.runner.record = self.interactions.record = self.record
        self.slot.record = self.record
        if self.settings.journal_frames:
            self.slot.journal_frame = journal.append_acp
        self.record("owner_started", {"generation": self.generation, "pid": os.getpid()})

    def _shrink_journal(self) -> None:
        if self.journal is not None:
            self.journal.shrink()

    def record(self, kind: str, payload: dict[str, Any], request_id: str | None = None) -> int:
        """Journal one control record; returns its seq (0 before the journal is open)."""
        if self.journal is None:
            return 0
        return self.journal.append(kind, payload, request_id)

    async def _watch(self, job: Job) -> None:
        if self.fanout is None or self.journal is None:  # closed meanwhile
            job.finish(error=OwnerShuttingDown("the owner is shutting down"))
            return
        start = job.env.payload.get("fromSeq")
        cursor = start if isinstance(start, int) and start > 0 else self.journal.next_seq
        follow = job.env.payload.get("follow", True) is not False
        if job.env.payload.get("control") is True and follow:
            self.interactions.attach(job)  # offered every open question, then new ones
        await self.fanout.attach(Watch(job), cursor, follow=follow)

    def _agent_roots(self) -> tuple[int, ...]:
        """The live agent run's keeper and agent pids (none when no agent runs)."""
        live = self.slot.live
        if live is None:
            return ()
        return tuple(p for p in (live.proc.keeper_pid, live.proc.pid) if p)

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
        held = self._held_open()
        reason = self.lifecycle.retirement(time.monotonic(), busy=len(self.queue) > 0, held=held)
        if reason is not None:
            self.request_shutdown(reason)
        elif self.lifecycle.state is OwnerState.IDLE and not held:
            self._schedule_retirement()

    def _held_open(self) -> bool:
        """Whether a connection may be about to send work. Watchers never hold the owner:
        they follow the journal across owners, so retiring costs them nothing."""
        watching = {w.job.outbox for w in self.fanout.watches} if self.fanout else set()
        return any(outbox not in watching for outbox in self.server.connections)

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
        if not self._held_open() and self.lifecycle.state is OwnerState.IDLE:
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
        try:
            self.gate.check(env, outbox.peer)
        except TetherError as exc:
            job.finish(error=exc)  # VisibilityDenied naming the rule: the request never runs
            return
        if env.kind == "status":
            job.ack()
            job.finish(self.status_snapshot())
            return
        if env.kind == "cancel":
            job.ack()
            job.finish(self.admission.cancel(env.payload.get("targetRequestId")))
            return
        if env.kind == "answer":
            self.interactions.admit_answer(job)
            return
        if self.stopping:
            job.finish(error=OwnerShuttingDown(f"the owner is shutting down ({self.stop_reason})"))
            return
        if env.kind == "watch":
            job.ack()
            self._spawn(self._watch(job))
            return
        if env.kind == "close":
            job.ack()
            self._closer = job
            self._close_session = True
            self._discard = env.payload.get("discard") is True
            self.request_shutdown("close")
            return
        if env.kind == "terminate":
            job.ack()
            self._terminate(job)
            return
        self.admission.enqueue(job)

    def _terminate(self, job: Job) -> None:
        """The operator's immediate end: no new turn, no waiting on the agent.

        Like ``close`` the session ends (recorded once, every caller told), but the tree
        is ended at once -- the keeper's TERM -> grace -> KILL, not ``session/close`` and
        a cancel grace -- while the queue is drained and the running turn superseded.
        """
        by: dict[str, Any] = dict(job.outbox.peer)
        asked = job.env.payload.get("by")
        if isinstance(asked, dict):
            by.update({str(k): v for k, v in list(asked.items())[:8]})
        self._closer = job
        self._close_session = True
        self._terminate_by = by
        self.request_shutdown("terminate")
        self._terminating = asyncio.get_running_loop().create_task(self.slot.terminate())

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
            if job.kind == "prompt" and job.env.payload.get("control") is True:
                self.interactions.attach(job)  # the prompter answers its own questions
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
                self.memory.soon()
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
        self.record("agent_run_ended", event)
        try:
            self.registry.update_session(self.key, last_end=event)
        except StateError as exc:  # a full disk: the run still ended; say so, go on
            logger.error("could not record the agent run's end: %s", exc)
        if not self.stopping:  # while stopping, callers hear how the owner or session ended
            self.server.broadcast({"type": "agent_run_ended", "requestId": None, "event": event})

    # --- shutdown ---------------------------------------------------------------------

    async def _close_journal(self) -> None:
        """The session's end or the owner's retirement: tell every watcher, store it all.

        The journal is stored before the lock is released, so the next owner continues
        the sequence from the right place.
        """
        if self.journal is None or self.fanout is None:
            return
        if self._close_session:
            self.fanout.end_all("session-ended")  # its session_ended is journaled already
        else:
            self.record("owner_stopped", {"reason": self.stop_reason})
            self.fanout.end_all("owner-stopped")
        journal, self.journal = self.journal, None
        if not await asyncio.to_thread(journal.close):
            logger.warning("journal: the last batch could not be stored before exit")

    def request_shutdown(self, reason: str) -> None:
        if not self.lifecycle.request_stop(reason, time.monotonic()):
            return
        self.slot.stopping = True
        self._retire_timer = rearm(self._retire_timer, None, self._check_retire)
        _log.event("owner_stopping", session_key=self.key, reason=reason)
        self._stop_event.set()
        # Stop the active turn (the session stays resumable unless closing); a turn that
        # has not reached the agent yet is not sent at all.
        held = self.admission.stop(
            closing=reason in ("close", "terminate"), ask_agent=reason != "terminate"
        )
        if held is not None:
            self._held.append(held)
        self.interactions.cancel_all()  # questions still open are answered `cancelled`

    async def shutdown(self) -> None:
        """Tear everything down; runs once, after the FIFO loop has stopped."""
        if self._shut_down:
            return
        self._shut_down = True
        self.memory.cancel()
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
        discard = closing and self._discard
        if self._terminating is not None:
            end = await self._terminating  # started at once by the terminate request
        else:
            end = await self.slot.end_current(reason=reason, close_session=closing, discard=discard)
        if discard and end is None:
            await self.slot.discard_offline()
        fields: dict[str, Any] = {
            "owner_status": "stopped",
            "owner_pid": None,
            "owner_socket": None,
            "queue_depth": 0,
            "current_request": None,
        }
        if closing:
            fields.update(state="closed", closed_at=time.time())
        try:
            self.registry.update_session(self.key, **fields)
        except StateError as exc:
            # A full or failing disk must not cost the callers their answers or leave
            # this process behind: the tree is already proven gone; say what was lost.
            logger.error("could not record the session's end: %s", exc)
            if self._closer is not None:
                self._closer.state_error = str(exc)
        if closing:
            end_session(
                self.record,
                self.server,
                self.key,
                generation=self.generation,
                end=end,
                superseded=[j for j in self._held if not j.done],
                closer=self._closer,
                terminated_by=self._terminate_by,
                discarded=self.slot.discarded if discard else None,
            )
        await self._close_journal()
        # Last frames (a terminal, session_ended) must reach callers that read slowly
        # behind a stream; bounded, so a caller that never reads cannot hold us.
        await self.server.close_all(LAST_FRAMES_S)
        self.heartbeat.stop()
        self.lock.release()
        self.lifecycle.feed(OwnerInput.STOPPED, time.monotonic())
        _log.event(
            "owner_stopped", session_key=self.key, reason=self.stop_reason, answered=len(waiting)
        )
