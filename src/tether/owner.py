"""The session owner: one detached process per active session that keeps the agent warm.

Theory of operation
-------------------
A caller that finds no live owner starts one as a fresh interpreter
(``python -m tether.owner KEY``; never ``fork()`` of a process running a loop) and waits
for its readiness line under a deadline. The owner:

1. takes an exclusive ``flock`` on the session's lock file and holds it for its whole
   life -- the kernel releases it on any death, so "lock free" means "no owner", and two
   racing starters produce exactly one owner (the loser reports ``busy`` and exits);
2. increments the owner generation in the registry, binds the session's Unix socket
   (0600, in a 0700 directory), reconciles its session's leftover leases (a previous
   owner may have been SIGKILLed), and only then reports ready;
3. serves IPC v2 (see :mod:`tether.ipc.protocol`): ``status`` and ``cancel`` at once,
   ``prompt`` / ``set_mode`` / ``set_config_option`` in strict FIFO order (depth
   bounded; beyond it a retryable ``QUEUE_OVERLOADED``), ``close`` by shutting down;
4. starts the agent lazily on the first request that needs it, through the supervisor
   (keeper + lease), and keeps it warm across turns;
5. shuts down on close, idle TTL, max lifetime, a fatal error, SIGTERM, SIGINT or
   SIGHUP: stop admitting, cancel the active turn, give every waiting caller a terminal
   error, tear the agent tree down and prove it gone, record exactly one
   session-ended event, release socket and lock, record the final status. The signal
   handlers stay installed until that cleanup has finished (acpx's §8.1 defect was
   removing them first).

Every request gets exactly one terminal frame (``Job.finish``), whatever happens.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from tether import _log, _os, config, metrics, sessions
from tether.acp.connection import ClientOptions
from tether.acp.policy import PermissionMode
from tether.errors import (
    GenerationMismatch,
    OwnerShuttingDown,
    PromptTimeout,
    QueueOverloaded,
    RequestCancelled,
    TetherError,
    UsageError,
)
from tether.ipc import protocol
from tether.live_agent import AgentConfig, LiveAgent
from tether.registry import Registry
from tether.supervise.reconcile import reconcile
from tether.supervise.run_state import TerminationReason
from tether.supervise.runner import ExtinctionReport

HEARTBEAT_S = 5.0  # as acpx; `status` calls an owner stale after 3 missed beats
CANCEL_SETTLE_S = 1.0  # on shutdown, how long the active turn may take to end `cancelled`
logger = logging.getLogger("tether.owner")


@dataclass
class Job:
    """One admitted request and the connection its frames go to."""

    env: protocol.Envelope
    writer: asyncio.StreamWriter | None
    admitted_at: float
    done: bool = False
    detached: bool = False
    # A cancel that arrived before the turn reached the agent (it was still starting):
    # the turn is then never sent, rather than the cancel being lost.
    cancel_requested: bool = False

    @property
    def request_id(self) -> str:
        return self.env.request_id

    @property
    def deadline(self) -> float | None:
        if self.env.deadline_ms is None:
            return None
        return self.admitted_at + self.env.deadline_ms / 1000

    # Frames for the caller are buffered and written once per event-loop pass: an
    # agent's stdout chunk often holds hundreds of updates, and one write per update
    # (one syscall each) was the owner's largest cost when streaming.
    _out: list[bytes] = field(default_factory=list)
    _flush_scheduled: bool = False
    _prefix: bytes = b""

    def send(self, frame: dict[str, Any]) -> None:
        self._queue(protocol.encode(frame))

    def update_line(self, direction: str, line: bytes) -> None:
        """Relay one ACP frame unchanged: its bytes are embedded, never re-encoded.

        The line is a JSON object the core has already decoded, so embedding it as the
        ``frame`` value keeps the IPC frame valid JSON.
        """
        if not self._prefix:
            rid = protocol.encode({"r": self.request_id})[5:-2]  # the id, JSON-escaped
            self._prefix = b'{"type":"update","requestId":' + rid + b',"direction":"'
        self._queue(b'%s%s","frame":%s}\n' % (self._prefix, direction.encode(), line))

    def _queue(self, data: bytes) -> None:
        if self.writer is None or self.detached:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write what is buffered (in order); a caller that left is detached, not an error."""
        self._flush_scheduled = False
        if not self._out or self.writer is None:
            return
        data, self._out = b"".join(self._out), []
        if self.detached:
            return
        try:
            self.writer.write(data)
        except (ConnectionError, RuntimeError):
            self.detached = True  # the caller left (--no-wait, or it died): run on

    def finish(
        self, result: dict[str, Any] | None = None, error: TetherError | None = None
    ) -> None:
        """Send the one terminal frame; later calls are ignored."""
        if self.done:
            return
        self.done = True
        if error is not None:
            self.send({"type": "error", "requestId": self.request_id, "error": error.to_wire()})
        else:
            self.send({"type": "result", "requestId": self.request_id, "result": result or {}})
        self.flush()


@dataclass
class OwnerSettings:
    idle_ttl: float = 3600.0
    turn_timeout: float | None = 1800.0
    max_lifetime: float = 0.0
    queue_max_depth: int = protocol.MAX_QUEUE_DEPTH
    max_frame_bytes: int = protocol.DEFAULT_MAX_FRAME_BYTES
    liveness_interval: float = 30.0
    handshake_timeout: float = 30.0
    permission_mode: str = "approve-reads"
    fs: bool = True
    auth: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> OwnerSettings:
        s = cls()
        for name in (
            "idle_ttl",
            "turn_timeout",
            "max_lifetime",
            "liveness_interval",
            "handshake_timeout",
        ):
            if options.get(name) is not None:
                setattr(s, name, float(options[name]))
        for name in ("queue_max_depth", "max_frame_bytes"):
            if options.get(name) is not None:
                setattr(s, name, int(options[name]))
        if options.get("permission_mode"):
            s.permission_mode = str(options["permission_mode"])
        if "fs" in options:
            s.fs = bool(options["fs"])
        if isinstance(options.get("auth"), dict):
            s.auth = {str(k): str(v) for k, v in options["auth"].items()}
        if s.turn_timeout is not None and s.turn_timeout <= 0:
            s.turn_timeout = None
        return s


class Owner:
    """The owner of one session. See the module docstring."""

    def __init__(self, key: str, registry: Registry) -> None:
        self.key = key
        self.registry = registry
        session = registry.session(key)
        if session is None or session.state == "closed":
            raise UsageError("no open session for this key", session_key=key)
        self.session = session
        self.settings = OwnerSettings.from_options(session.options)
        if not self.settings.auth:
            # Credentials are read from config by the owner itself, never stored in the DB.
            with contextlib.suppress(TetherError):
                auth = config.load(session.cwd).get("auth") or {}
                self.settings.auth = {str(k): str(v) for k, v in auth.items()}
        self.generation = 0
        self.queue: collections.deque[Job] = collections.deque()
        self.active: Job | None = None
        self.live: LiveAgent | None = None
        self.stopping = False
        self.stop_reason = ""
        self._wakeup = asyncio.Event()
        self._stop_event = asyncio.Event()  # set once, by request_shutdown
        self._closer: Job | None = None
        self._close_session = False
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_due = False  # the TTL passed while a caller was connected
        self._lock_fd = -1
        self._server: asyncio.AbstractServer | None = None
        self._socket_path = str(sessions.socket_path(key))
        self.started_at = time.time()
        self.last_prompt_at: float | None = session.last_prompt_at
        self._ended_runs: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._connections: set[asyncio.StreamWriter] = set()

    # --- start-up -------------------------------------------------------------------

    def acquire_lock(self) -> bool:
        path = sessions.lock_path(self.key)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    async def start(self) -> None:
        table = _os.current()
        st = table.stat(os.getpid())
        self.generation = self.registry.begin_owner(
            self.key,
            pid=os.getpid(),
            starttime=st.starttime if st else None,
            socket=self._socket_path,
        )
        # We hold the lock, so a socket file here is a dead owner's: safe to replace.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._socket_path)
        self._server = await asyncio.start_unix_server(
            self._serve_connection, path=self._socket_path, limit=self.settings.max_frame_bytes + 2
        )
        os.chmod(self._socket_path, 0o600)
        # Leftovers of a previous owner of this session (SIGKILL, OOM): verify and reap.
        try:
            for decision in reconcile(self.registry, session_key=self.key):
                if decision.get("kind") == "session_ended":
                    self._ended_runs.add(str(decision.get("lease_id")))
        except Exception:
            logger.exception("reconcile at owner start failed")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(
                sig, self.request_shutdown, f"signal-{signal.Signals(sig).name}"
            )
        self._spawn(self._heartbeat())
        if self.settings.max_lifetime > 0:
            loop.call_later(self.settings.max_lifetime, self._on_max_lifetime)
        self._set_status("idle")
        self._arm_idle()
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

    async def _heartbeat(self) -> None:
        while not self.stopping:
            await asyncio.sleep(HEARTBEAT_S)
            with contextlib.suppress(Exception):
                self.registry.update_session(
                    self.key, owner_heartbeat_at=time.time(), queue_depth=len(self.queue)
                )

    # --- idle policy ------------------------------------------------------------------

    def _arm_idle(self) -> None:
        self._disarm_idle()
        if self.settings.idle_ttl > 0 and not self.stopping:
            loop = asyncio.get_running_loop()
            self._idle_timer = loop.call_later(self.settings.idle_ttl, self._on_idle)

    def _disarm_idle(self) -> None:
        self._idle_due = False
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _on_idle(self) -> None:
        if self.active is not None or self.queue:
            return  # busy: the FIFO re-arms the timer when it empties
        if self._connections:
            # A connected caller may be about to send its request: expiring between our
            # hello and its request would reject work we just greeted. Expire when the
            # last connection closes instead (a status poll does not reset the TTL).
            self._idle_due = True
            return
        self.request_shutdown("idle-ttl")

    def _on_max_lifetime(self) -> None:
        # Never cut a turn: retire at the next idle moment.
        if self.active is None and not self.queue:
            self.request_shutdown("max-lifetime")
        else:
            asyncio.get_running_loop().call_later(1.0, self._on_max_lifetime)

    # --- IPC ----------------------------------------------------------------------------

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self._connections.add(writer)
        try:
            writer.write(
                protocol.encode(
                    {
                        "type": "hello",
                        "v": protocol.VERSION,
                        "generation": self.generation,
                        "ownerPid": os.getpid(),
                        "sessionKey": self.key,
                        # A stopping owner (idle TTL, close, signal) rejects new work: a
                        # caller that sees this waits for it to go and starts a new one.
                        "stopping": self.stopping,
                    }
                )
            )
            while True:
                try:
                    line = await reader.readline()
                except ValueError:
                    # Longer than the frame limit: answer, then drop the connection, since
                    # the rest of the oversized line cannot be told from the next frame.
                    err = protocol.IpcRejected(
                        "QUEUE_REQUEST_TOO_LARGE",
                        f"request frame exceeds the limit of {self.settings.max_frame_bytes} bytes",
                    )
                    writer.write(
                        protocol.encode(
                            {"type": "error", "requestId": None, "error": err.to_wire()}
                        )
                    )
                    _log.event("ipc_rejected", logging.WARNING, detail=err.detail_code)
                    break
                except ConnectionError:
                    break
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    env = protocol.parse_request(
                        line, max_frame_bytes=self.settings.max_frame_bytes
                    )
                except protocol.IpcRejected as exc:
                    writer.write(
                        protocol.encode(
                            {"type": "error", "requestId": exc.request_id, "error": exc.to_wire()}
                        )
                    )
                    _log.event(
                        "ipc_rejected", logging.WARNING, detail=exc.detail_code, message=exc.message
                    )
                    continue
                self._admit(env, writer)
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
        finally:
            self._connections.discard(writer)
            for job in [self.active, *self.queue]:
                if job is not None and job.writer is writer:
                    job.detached = True
            with contextlib.suppress(Exception):
                writer.close()
            if self._idle_due and not self._connections and self.active is None and not self.queue:
                self.request_shutdown("idle-ttl")

    def _admit(self, env: protocol.Envelope, writer: asyncio.StreamWriter) -> None:
        job = Job(env, writer, time.monotonic())
        if env.owner_generation is not None and env.owner_generation != self.generation:
            job.finish(
                error=GenerationMismatch(
                    f"request for owner generation {env.owner_generation},"
                    f" this is {self.generation}"
                )
            )
            return
        kind = env.kind
        if kind == "status":
            job.send({"type": "ack", "requestId": job.request_id, "queuePosition": 0})
            job.finish(self.status_snapshot())
            return
        if kind == "cancel":
            job.send({"type": "ack", "requestId": job.request_id, "queuePosition": 0})
            job.finish(self._cancel(env.payload.get("targetRequestId")))
            return
        if self.stopping:
            job.finish(error=OwnerShuttingDown(f"the owner is shutting down ({self.stop_reason})"))
            return
        if kind == "close":
            job.send({"type": "ack", "requestId": job.request_id, "queuePosition": 0})
            self._closer = job
            self._close_session = True
            self.request_shutdown("close")
            return
        if len(self.queue) >= self.settings.queue_max_depth:
            job.finish(
                error=QueueOverloaded(
                    f"the session queue is full ({self.settings.queue_max_depth} waiting);"
                    " retry later"
                )
            )
            return
        self.queue.append(job)
        job.send({"type": "ack", "requestId": job.request_id, "queuePosition": len(self.queue)})
        if env.deadline_ms is not None:
            # Answer TIMEOUT when the deadline passes while still queued behind a long
            # turn: otherwise the caller's socket backstop fires first and reports an
            # unknown outcome (exit 1) for a request that provably never ran.
            asyncio.get_running_loop().call_later(env.deadline_ms / 1000, self._expire_queued, job)
        self._disarm_idle()
        self._wakeup.set()

    def _expire_queued(self, job: Job) -> None:
        if job in self.queue:
            self.queue.remove(job)
            job.finish(error=PromptTimeout("the request's deadline passed while it was queued"))
            self._set_status("running" if self.active is not None else "idle")

    def _cancel(self, target: str | None) -> dict[str, Any]:
        if target is not None and (self.active is None or self.active.request_id != target):
            for job in list(self.queue):
                if job.request_id == target:
                    self.queue.remove(job)
                    job.finish(error=RequestCancelled("the request was cancelled before it ran"))
                    return {
                        "action": "cancel_result",
                        "cancelled": True,
                        "requestId": target,
                        "queued": True,
                    }
            return {
                "action": "cancel_result",
                "cancelled": False,
                "reason": "no such request",
                "requestId": target,
            }
        active = self.active
        if active is None or active.env.kind != "prompt":
            return {"action": "cancel_result", "cancelled": False, "reason": "nothing to cancel"}
        sent = self.live.cancel() if self.live is not None else False
        if not sent:
            # The turn has not reached the agent yet (it is still starting): defer.
            active.cancel_requested = True
        _log.event("cancel", session_key=self.key, request_id=active.request_id, sent=sent)
        return {
            "action": "cancel_result",
            "cancelled": True,
            "requestId": active.request_id,
            **({} if sent else {"deferred": True}),
        }

    def status_snapshot(self) -> dict[str, Any]:
        live = self.live
        lease_state = None
        if live is not None:
            lease = self.registry.lease(live.proc.lease_id)
            lease_state = lease.state if lease else None
        return {
            "action": "status_snapshot",
            "status": "running" if self.active is not None else "idle",
            "ownerPid": os.getpid(),
            "ownerGeneration": self.generation,
            "uptimeS": round(time.time() - self.started_at, 3),
            "queueDepth": len(self.queue),
            "currentRequest": self.active.request_id if self.active else None,
            "currentKind": self.active.env.kind if self.active else None,
            "lastPromptTime": self.last_prompt_at,
            "agentPid": live.proc.pid if live is not None and live.alive else None,
            "keeperPid": live.proc.keeper_pid if live is not None and live.alive else None,
            "leaseId": live.proc.lease_id if live is not None else None,
            "leaseState": lease_state,
            "acpSessionId": live.session_id if live is not None else self.session.acp_session_id,
            "agentConnected": bool(live is not None and live.alive),
            "sessionKey": self.key,
            "stopping": self.stopping,
            "counters": self._counters(),
        }

    def _counters(self) -> dict[str, int]:
        with contextlib.suppress(Exception):
            counters: dict[str, int] = self.registry.counters()
            return counters
        return {}

    # --- the FIFO ----------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the queue until shutdown is requested, then shut down."""
        while not self.stopping:
            if not self.queue:
                self._set_status("idle")
                self._arm_idle()
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            job = self.queue.popleft()
            if job.deadline is not None and time.monotonic() >= job.deadline:
                job.finish(error=PromptTimeout("the request's deadline passed while it was queued"))
                continue
            self.active = job
            self._set_status("running")
            task = asyncio.get_running_loop().create_task(self._run_job(job))
            try:
                await self._await_job(task)
            except TetherError as exc:
                job.finish(error=exc)
            except Exception as exc:
                logger.exception("request %s failed", job.request_id)
                job.finish(error=TetherError(f"internal error: {exc}"))
            finally:
                self.active = None
            if self.live is not None and not self.live.alive:
                await self._end_run(self.live, reason=TerminationReason.EXIT)
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

    async def _ensure_agent(self) -> LiveAgent:
        if self.live is not None and self.live.alive:
            return self.live
        if self.live is not None:
            await self._end_run(self.live, reason=TerminationReason.EXIT)
        s = self.settings
        session = self.registry.session(self.key) or self.session
        cfg = AgentConfig(
            argv=session.agent_command,
            cwd=session.cwd,
            client=ClientOptions(
                permission_mode=PermissionMode(s.permission_mode),
                fs=s.fs,
                liveness_interval=s.liveness_interval,
                handshake_timeout=s.handshake_timeout,
                prompt_ceiling=None,
                auth=s.auth,
                on_line=self._on_line,
                on_permission=self._on_permission,
            ),
            session_key=self.key,
        )
        live = await LiveAgent.start(cfg, self.registry, resume_session_id=session.acp_session_id)
        self.live = live
        self.registry.update_session(self.key, acp_session_id=live.session_id)
        if not live.resumed:
            await self._replay_desired(live, session.desired_mode, session.desired_config)
        self._spawn(self._watch_run(live))
        return live

    async def _replay_desired(
        self, live: LiveAgent, mode: str | None, config: dict[str, Any]
    ) -> None:
        """A fresh ACP session forgets the mode and options set earlier (acpx#45): replay."""
        with contextlib.suppress(TetherError):
            if mode:
                await live.conn.set_mode(live.session_id, mode)
            for key, value in config.items():
                await live.conn.set_config_option(live.session_id, key, value)

    def _on_line(self, direction: str, line: bytes) -> None:
        job = self.active
        live = self.live
        # Relay only frames of the running turn: trailing updates of an abandoned turn
        # (which arrive while the connection quiesces) must not reach the next caller.
        if (
            job is not None
            and job.env.kind == "prompt"
            and live is not None
            and live.conn.active_turn(live.session_id)
        ):
            job.update_line(direction, line)

    def _on_permission(self, request: dict[str, Any], outcome: dict[str, Any]) -> None:
        """Tell the waiting caller what was decided for the agent (a permission frame)."""
        job = self.active
        if job is not None and job.env.kind == "prompt":
            job.send(
                {
                    "type": "permission",
                    "requestId": job.request_id,
                    "request": request,
                    "outcome": outcome,
                }
            )

    async def _watch_run(self, live: LiveAgent) -> None:
        """Notice the agent ending by itself (crash, exit) between or during turns."""
        await live.proc.wait_exited()
        if not self.stopping and self.live is live:
            await self._end_run(live, reason=TerminationReason.EXIT)

    async def _end_run(
        self, live: LiveAgent, *, reason: TerminationReason, close_session: bool = False
    ) -> ExtinctionReport | None:
        """Tear one agent run down and record its session-ended event exactly once.

        Returns the run's extinction report, or None if its end was already recorded.
        """
        lease_id = live.proc.lease_id
        if lease_id in self._ended_runs:
            return None
        self._ended_runs.add(lease_id)
        report = await live.aclose(reason, close_session=close_session)
        if self.live is live:
            self.live = None
        by_agent = live.proc.lifecycle.terminated_by == "agent"
        code = report.exit_code
        outcome = ("completed" if code == 0 else "error") if by_agent else "terminated"
        event = {
            "reason": outcome,
            "terminatedBy": "agent" if by_agent else "daemon",
            "message": f"agent run ended: {report.reason}"
            + (f" ({self.stop_reason})" if not by_agent and self.stop_reason else ""),
            "exitCode": code,
            "signal": report.exit_signal,
            "stderrTail": report.stderr_tail[-2000:],
            "leaseId": lease_id,
            "survivors": list(report.survivors),
            "killMode": report.mode,
        }
        self.registry.add_event(self.key, "session_ended", event)
        self.registry.update_session(self.key, last_end=event)
        for writer in list(self._connections):
            with contextlib.suppress(Exception):
                writer.write(
                    protocol.encode({"type": "session_ended", "requestId": None, "event": event})
                )
        return report

    def _record_turn(self, job: Job, stop_reason: str) -> None:
        with contextlib.suppress(Exception):
            if self.last_prompt_at is not None:
                self.registry.update_session(self.key, last_prompt_at=self.last_prompt_at)
            self.registry.add_event(
                self.key,
                "turn",
                {"requestId": job.request_id, "stopReason": stop_reason, "prompt": _preview(job)},
            )

    async def _run_job(self, job: Job) -> None:
        kind = job.env.kind
        live = await self._ensure_agent()
        if kind == "prompt" and job.cancel_requested:
            # Cancelled while the agent was starting: never send it (see _cancel).
            self._record_turn(job, "cancelled")
            job.finish(
                {
                    "stopReason": "cancelled",
                    "sessionId": live.session_id,
                    "permissionDenied": 0,
                    "result": {"stopReason": "cancelled"},
                }
            )
        elif kind == "prompt":
            # A flag on this prompt applies to this turn only; otherwise the session's mode.
            mode = job.env.payload.get("permissionMode")
            if not (isinstance(mode, str) and mode in {m.value for m in PermissionMode}):
                mode = self.settings.permission_mode
            live.conn.options.permission_mode = PermissionMode(mode)
            self.last_prompt_at = time.time()
            ceiling = self.settings.turn_timeout
            if job.deadline is not None:
                remaining = max(0.001, job.deadline - time.monotonic())
                ceiling = remaining if ceiling is None else min(ceiling, remaining)
            result = await live.prompt(job.env.payload["prompt"], _ignore, ceiling=ceiling)
            # Answer first, write the registry after: the caller's result never waits
            # on a SQLite commit (or on another owner holding the write lock).
            job.finish(
                {
                    "stopReason": result.stop_reason,
                    "sessionId": live.session_id,
                    "permissionDenied": result.permission_denied,
                    "result": result.result,
                }
            )
            self._record_turn(job, result.stop_reason)
        elif kind == "set_mode":
            mode = str(job.env.payload["modeId"])
            await live.conn.set_mode(live.session_id, mode)
            self.registry.update_session(self.key, desired_mode=mode)
            job.finish({"action": "mode_set", "modeId": mode})
        elif kind == "set_config_option":
            config_id = str(job.env.payload["configId"])
            value = job.env.payload["value"]
            answer = await live.conn.set_config_option(live.session_id, config_id, value)
            session = self.registry.session(self.key)
            desired = dict(session.desired_config if session else {})
            desired[config_id] = value
            self.registry.update_session(self.key, desired_config=desired)
            job.finish(
                {
                    "action": "config_set",
                    "configId": config_id,
                    "value": value,
                    "configOptions": (answer or {}).get("configOptions")
                    if isinstance(answer, dict)
                    else None,
                }
            )

    # --- shutdown ---------------------------------------------------------------------

    def request_shutdown(self, reason: str) -> None:
        if self.stopping:
            return
        self.stopping = True
        self.stop_reason = reason
        self._disarm_idle()
        _log.event("owner_stopping", session_key=self.key, reason=reason)
        self._wakeup.set()
        self._stop_event.set()
        if self.active is not None:
            # Stop the active turn (the session stays resumable unless closing); a turn
            # that has not reached the agent yet is not sent at all.
            self.active.cancel_requested = True
            if self.live is not None:
                self.live.cancel()

    async def shutdown(self) -> None:
        """Tear everything down; runs once, after the FIFO loop has stopped."""
        self._set_status("stopping")
        if self._server is not None:
            self._server.close()
        for job in list(self.queue):
            job.finish(error=OwnerShuttingDown(f"the owner is shutting down ({self.stop_reason})"))
        self.queue.clear()
        report = None
        if self.live is not None:
            reason = TerminationReason.CLOSE if self._close_session else TerminationReason.SIGNAL
            if self.stop_reason in ("idle-ttl", "max-lifetime"):
                reason = TerminationReason.CLOSE
            report = await self._end_run(
                self.live, reason=reason, close_session=self._close_session
            )
        now = time.time()
        fields: dict[str, Any] = {
            "owner_status": "stopped",
            "owner_pid": None,
            "owner_socket": None,
            "queue_depth": 0,
            "current_request": None,
        }
        if self._close_session:
            fields.update(state="closed", closed_at=now)
        self.registry.update_session(self.key, **fields)
        if self._closer is not None:
            self._closer.finish(
                {
                    "action": "session_closed",
                    "sessionKey": self.key,
                    "survivors": list(report.survivors) if report else [],
                    "killMode": report.mode if report else None,
                    "teardownMs": report.elapsed_ms if report else 0.0,
                    "agentWasRunning": report is not None,
                }
            )
        for writer in list(self._connections):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.drain(), 1.0)
        # The socket is ours while we hold the lock: remove it, then release the lock.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._socket_path)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1
        _log.event("owner_stopped", session_key=self.key, reason=self.stop_reason)


def _preview(job: Job) -> str:
    blocks = job.env.payload.get("prompt") or []
    text = " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))
    return text[:200]


def _ignore(_frame: dict[str, Any]) -> None:
    """Turn updates reach callers through the frame observer, in arrival order."""


async def _amain(key: str, ready: Any) -> int:
    try:
        registry = Registry()
    except TetherError as exc:  # a damaged, full or foreign state directory: say which
        ready({"ready": False, "error": str(exc), "errorWire": exc.to_wire()})
        return 1
    metrics.attach(registry)
    try:
        owner = Owner(key, registry)
    except UsageError as exc:
        ready({"ready": False, "noSession": True, "error": str(exc)})
        return 4
    if not owner.acquire_lock():
        ready({"ready": False, "busy": True})
        return 0
    try:
        await owner.start()
    except BaseException as exc:
        wire = exc.to_wire() if isinstance(exc, TetherError) else None
        ready({"ready": False, "error": f"owner start failed: {exc}", "errorWire": wire})
        raise
    ready(
        {
            "ready": True,
            "generation": owner.generation,
            "socket": owner._socket_path,
            "pid": os.getpid(),
        }
    )
    try:
        await owner.run()
    except BaseException:
        logger.exception("owner loop failed")
        if not owner.stopping:
            owner.request_shutdown("fatal-error")
        await owner.shutdown()
        raise
    finally:
        registry.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m tether.owner KEY READY_FD``: run the owner of session KEY."""
    import json

    args = sys.argv[1:] if argv is None else argv
    key = args[0]
    ready_fd = int(args[1]) if len(args) > 1 else 1
    # Detach: a second fork makes us nobody's child but init's (or a subreaper's), so a
    # long-lived library process that started us never collects our zombie. Safe here:
    # no loop, no threads yet.
    if os.fork() != 0:
        os._exit(0)
    log_fd = os.open(
        sessions.log_path(key), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
    )
    _log.configure(os.fdopen(os.dup(log_fd), "w", buffering=1), level=logging.INFO)

    def ready(message: dict[str, Any]) -> None:
        # Say it once, then let go of the starter's pipes: stderr moves to our log.
        nonlocal ready_fd
        if ready_fd < 0:
            return
        with contextlib.suppress(OSError):
            os.write(ready_fd, (json.dumps(message) + "\n").encode())
        with contextlib.suppress(OSError):
            os.close(ready_fd)
        ready_fd = -1
        os.dup2(log_fd, 2)

    try:
        return asyncio.run(_amain(key, ready))
    finally:
        ready({"ready": False, "error": "owner exited"})


if __name__ == "__main__":
    raise SystemExit(main())
