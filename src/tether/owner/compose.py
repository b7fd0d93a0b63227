"""The owner: a thin composition of its rooms. See :mod:`tether.owner` for the story.

:class:`Owner` wires the session lock and socket (:mod:`.lock`), the IPC server
(:mod:`.server`) and what it does with each request (:mod:`.dispatch`), the admission
queue (:mod:`.admission`, :mod:`.queue`), the lifecycle (:mod:`.lifecycle`) and its
retirement timer (:mod:`.retirement`), the agent slot (:mod:`.agent_slot`), the request
runner (:mod:`.requests`), the journal and its watchers (:mod:`.journaling`), and runs
the FIFO loop (its wait for the running request: :mod:`.job_wait`). Each collaborator
is the one owner of its fields; start-up is here, the teardown in :mod:`.teardown`.
It decides; the rooms do.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any

from tether import _aio, _log, _os, metrics, owner_lost, sessions
from tether.errors import InternalError, StateError, TetherError, UsageError
from tether.ipc import protocol
from tether.owner.admission import Admission
from tether.owner.agent_jobs import RequestRunner
from tether.owner.agent_slot import AgentSlot, RunEnd
from tether.owner.dispatch import admit
from tether.owner.gate import PeerGate
from tether.owner.heartbeat import Heartbeat
from tether.owner.job import Job, Outbox
from tether.owner.job_wait import JobWait
from tether.owner.journaling import Journaling
from tether.owner.lifecycle import OwnerInput, OwnerLifecycle, StopReason
from tether.owner.lock import SessionLock
from tether.owner.memory import MemoryTrim
from tether.owner.questions import Questions
from tether.owner.relays import ClientRelays
from tether.owner.retirement import Retirement
from tether.owner.server import IpcServer
from tether.owner.settings import OwnerSettings
from tether.owner.state_watch import Watched, watch_state
from tether.owner.status import end_event, hello_frame, journal_condition, status_snapshot
from tether.owner.teardown import Ending, shut_down
from tether.state.registry import Registry
from tether.supervise.members import MemberScan

if TYPE_CHECKING:
    from tether.owner.hosting import Shared
    from tether.owner.watchers import Fanout
    from tether.state.journal.writer import JournalWriter

__all__ = ["Owner"]

logger = logging.getLogger("tether.owner")


class Owner:
    """The owner of one session. See the package docstring."""

    def __init__(self, key: str, registry: Registry, *, host: Shared | None = None) -> None:
        self.key = key
        self.registry = registry
        self.host = host  # in a session host (tether.sessionhost): its process is not ours
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
            hello=lambda: hello_frame(self),
            admit=self.admit,
            on_disconnect=self._on_disconnect,
            # A controller waits too: for questions (dropping it would hand them over).
            waiting=lambda outbox: self.admission.waits(outbox) or self.questions.controls(outbox),
            idle_timeout=self.settings.connection_idle_timeout,
        )
        self.slot = AgentSlot(
            key,
            registry,
            self.settings,
            current_prompt=self._current_prompt,
            on_run_end=self._on_run_end,
            spawn=self.spawn,
            stopping=lambda: self.stopping,
        )
        self.runner = RequestRunner(key, registry, self.settings, self.slot)
        self.questions = self.slot.questions = Questions(
            timeout=self.settings.permission_timeout,
            current_request=lambda: self.active.request_id if self.active else None,
            agent_tree=self.slot.roots,
        )
        self.relays = self.slot.relay = ClientRelays(
            self._current_prompt, timeout=self.settings.permission_timeout
        )
        self.admission = Admission(key, self.settings.queue_max_depth, self.slot)
        self.journaling = Journaling(registry.path, key)  # open once the lock is ours
        self.memory = MemoryTrim(
            lambda: self.active is None and not self.admission,
            shrink=self.journaling.shrink,
            freeze=host is None,  # only a process of our own (tether.owner.memory)
            host=host.trim if host is not None else None,  # a host's one for all
        )
        self.gate = PeerGate(key, registry, session.cwd)  # who the IPC peer is, and may it
        self.admission.on_change = lambda: self.set_status(
            "running" if self.active is not None else "idle"
        )
        self.job_wait = JobWait(self.lifecycle)  # the FIFO's wait, cut short by a shutdown
        self.ending = Ending()  # how it ends: set by close / terminate, read by the teardown
        self.retirement = Retirement(
            self.lifecycle,
            busy=lambda: len(self.queue) > 0,
            held=self._held_open,
            retire=self.request_shutdown,
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self._status = "starting"
        self.heartbeat = Heartbeat(
            key,
            unresponsive_after=self.settings.unresponsive_after,
            fields=self._status_fields,
            kept=metrics.kept(),
            scan=lambda reg: member_scan.scan_live(reg, self.slot.live),  # issue 20
        )
        member_scan = MemberScan(key)
        self.state_watch: Watched | None = None

    @property
    def journal(self) -> JournalWriter | None:
        """The session's journal while this owner writes it (None before and after)."""
        return self.journaling.writer

    @property
    def fanout(self) -> Fanout | None:
        return self.journaling.fanout

    @property
    def hosted(self) -> bool:
        """One of a session host's owners (its process, signals and log are the host's)."""
        return self.host is not None

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
        # Seed 001: every owner line carries sessionId, ownerPid and ownerGeneration (in
        # a host, the lines of this owner's tasks: the host routes them to its log).
        bind = _log.bind_task if self.hosted else _log.bind_process
        bind(sessionId=self.key, ownerPid=os.getpid(), ownerGeneration=self.generation)
        metrics.incr("owner_spawn_total")
        self._open_journal()
        await self.lock.listen(self.server.serve, limit=256 * 1024)
        # Leftovers of a previous owner of this session (SIGKILL, OOM): verify and reap;
        # if it was lost, its turn and run end owner-lost in the journal.
        owner_lost.at_owner_start(self.registry, self.key, self.journal, self.record)
        if not self.hosted:  # a host's signals stop each of its owners (tether.owner.host)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.add_signal_handler(
                    sig, self.request_shutdown, StopReason(f"signal-{signal.Signals(sig).name}")
                )
        self.heartbeat.start()
        shared = self.host.state_watch if self.host is not None else None
        self.state_watch = watch_state(self, shared)  # state.db removed under us: stop
        self.lifecycle.feed(OwnerInput.STARTED, time.monotonic())
        self.set_status("idle")
        self.retirement.schedule()
        _log.event(
            "owner_started", session_key=self.key, generation=self.generation, pid=os.getpid()
        )

    def _open_journal(self) -> None:
        """Become the journal's writer (we hold the session lock) and wire the rooms in."""
        journal = self.journaling.open(
            self.settings.retention, on_condition=lambda: journal_condition(self)
        )
        journal.carry = self.heartbeat.carry  # a commit carries the status that changed
        if self.host is not None:
            journal.commit = self.host.group_commit.write_batch
        self.runner.when_stored = journal.stored_waits.add  # a turn's answer after its end
        record = self.journaling.record
        self.admission.record = self.runner.record = self.questions.record = record
        self.slot.record = record
        if self.settings.journal_frames:
            self.slot.journal_frame = journal.append_acp
        self.record("owner_started", {"generation": self.generation, "pid": os.getpid()})
        restarted = self.session.options.get("restarted_from")
        if isinstance(restarted, dict) and self.generation == 1:
            # A session re-homed from a lost host of the fleet: its first owner says so
            # before anything else happens in it (never a silent restart).
            self.record("conversation_restarted", dict(restarted))

    def record(self, kind: str, payload: dict[str, Any], request_id: str | None = None) -> int:
        """Journal one control record; returns its seq (0 before the journal is open)."""
        return self.journaling.record(kind, payload, request_id)

    def spawn(self, coro: Any) -> None:
        """Run ``coro`` as one of the owner's tasks."""
        _aio.spawn(coro, keep=self._tasks)

    def set_status(self, status: str) -> None:
        """The owner's status changed: a thread records it (the loop never waits on the
        database for it) -- the journal writer's next commit when entries are waiting
        for one (a turn's are), else the heartbeat's."""
        self._status = status
        writer = self.journaling.writer
        self.heartbeat.changed(carried=writer is not None and writer.will_commit())

    def _status_fields(self) -> dict[str, Any]:
        """The status columns as they are now (called from the heartbeat's thread)."""
        active = self.active
        fields: dict[str, Any] = {
            "owner_status": self._status,
            "queue_depth": len(self.queue),
            "current_request": active.request_id if active else None,
        }
        if self.runner.last_prompt_at is not None:
            fields["last_prompt_at"] = self.runner.last_prompt_at
        return fields

    def _held_open(self) -> bool:
        """Whether a connection may be about to send work. Watchers never hold the owner:
        they follow the journal across owners, so retiring costs them nothing."""
        watching = self.journaling.watching()
        return any(outbox not in watching for outbox in self.server.connections)

    # --- IPC --------------------------------------------------------------------------

    def _on_disconnect(self, outbox: Outbox) -> None:
        # One rule for a caller that goes away before its answer: its turn is cancelled.
        cancelled = self.admission.detach(outbox)
        self.relays.detach(outbox)  # relayed agent requests it owed: errors, at once
        if not cancelled:  # (a cancelled turn's questions are answered `cancelled`)
            self.questions.controller_left()  # none left: open questions to the policy
        self.retirement.connection_closed()

    def _current_prompt(self) -> Job | None:
        job = self.active
        return job if job is not None and job.kind == "prompt" else None

    def admit(self, env: protocol.Envelope, outbox: Outbox) -> None:
        """Decide what to do with one valid request (:func:`.dispatch.admit`)."""
        admit(self, env, outbox)

    def status_snapshot(self) -> dict[str, Any]:
        return status_snapshot(self)

    # --- the FIFO ---------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the queue until shutdown is requested, then shut down."""
        while True:
            self.set_status("running" if self.active is not None else "idle")
            job = await self.admission.next_job(lambda: self.stopping)
            if job is None:
                break
            self.admission.active = job
            if job.kind == "prompt" and job.env.payload.get("control") is True:
                self.questions.attach_prompter(job)  # it answers its own questions
            if job.kind == "prompt":
                journal_condition(self, job)  # a turn on a full disk is told so at once
            self.lifecycle.feed(OwnerInput.JOB_STARTED, time.monotonic())
            self.set_status("running")
            task = _aio.spawn(self.runner.run(job))
            try:
                await self.job_wait.wait(task)
            except TetherError as exc:
                job.finish(error=exc)
            except Exception as exc:
                logger.exception("request %s failed", job.request_id)
                where = f"details in {sessions.log_path(self.key)}"
                job.finish(error=InternalError.of(exc, where))
            finally:
                self.admission.active = None
                self.admission.answer_cancels(job)  # a waiting `cancel`: honoured or not
                self.lifecycle.feed(OwnerInput.JOB_ENDED, time.monotonic())
            await self.slot.end_if_dead()
            if not self.admission:
                self.retirement.schedule()  # a no-op once stopping (not idle)
                self.memory.soon()
        await self.shutdown()

    def _on_run_end(self, end: RunEnd) -> None:
        """An agent run ended: record it, tell every connected caller."""
        event = end_event(end, stop_reason=self.stop_reason)
        if end.report.lease_stolen:
            # Another supervisor stole the run's lease and reported its end (issue 20,
            # item 6: one end, reported once): callers hear of it, nothing is recorded.
            self.server.broadcast({"type": "agent_run_ended", "requestId": None, "event": event})
            return
        self.record("agent_run_ended", event)
        try:
            self.registry.update_session(self.key, last_end=event)
        except StateError as exc:  # a full disk: the run still ended; say so, go on
            logger.error("could not record the agent run's end: %s", exc)
        if not self.stopping:  # while stopping, callers hear how the owner or session ended
            self.server.broadcast({"type": "agent_run_ended", "requestId": None, "event": event})

    # --- shutdown ---------------------------------------------------------------------

    def request_shutdown(self, reason: StopReason) -> None:
        if not self.lifecycle.request_stop(reason, time.monotonic()):
            return
        self.retirement.cancel()
        _log.event("owner_stopping", session_key=self.key, reason=reason)
        self.job_wait.stop()
        # Stop the active turn (the session stays resumable unless closing); a turn that
        # has not reached the agent yet is not sent at all.
        held = self.admission.stop(
            closing=reason.ends_session, ask_agent=reason is not StopReason.TERMINATE
        )
        if held is not None:
            self.ending.held.append(held)
        self.questions.cancel_all()  # questions still open are answered `cancelled`

    async def shutdown(self) -> None:
        """Tear everything down; runs once, after the FIFO loop has stopped."""
        await shut_down(self)
