"""The supervisor's shell: start an agent under a keeper, watch it, end it with proof.

Theory of operation
-------------------
``spawn_agent()`` is the only way Tether starts an agent. It

1. writes a lease (``open``) naming the keeper *before* the run is announced running;
2. starts the keeper (``python -m tether.supervise.keeper``) from the event-loop
   thread -- ``PR_SET_PDEATHSIG`` follows the forking thread, so a worker thread
   would kill the keeper when it ended -- with the agent's pipes as the keeper's stdio
   (or a PTY), the lease marker in the environment, and a socketpair as the control
   channel;
3. opens a pidfd on the keeper at once (it is our unreaped child, so the pid cannot
   have been recycled) and watches it with ``add_reader``: asyncio's child watcher is
   never involved, so no watcher thread reaps behind our back and no ``Process.wait``
   waits for a grandchild to close a pipe;
4. waits for the keeper's ``spawned`` event, records the agent's identity (boot id,
   pid, starttime, pgid, cgroup) in the lease, and only then reports the run running.

The agent's stdout is delivered through a callback straight from ``data_received``
(no intermediate queue: the ACP layer's sans-IO decoder eats it synchronously, which
is what keeps 50,000 updates/s cheap). stderr is always drained into an 8 KiB tail.

``AgentProcess.aclose(reason)`` is the single finalizer: whatever ends the run -- a
close, a cancel, a timeout, the agent exiting, the keeper dying -- converges there, it
runs once, and duplicates wait for the first. It asks the keeper to terminate
(SIGTERM -> grace -> SIGKILL -> ECHILD), waits for the ``extinct`` proof, and then
checks the third witness itself: no live process carries the lease marker. If the
keeper cannot do its job (it was SIGKILLed), the supervisor sweeps the lease's
verified processes itself, through pidfds, and never signals anything it cannot prove
it owns. The lease ends ``closed`` with the termination reason, exit code and the
kill mode, or ``lost`` when extinction could not be proven.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether import _log, _os, metrics
from tether.errors import SpawnError
from tether.supervise.heartbeat import SUPERVISOR_ID, heartbeat_for
from tether.supervise.lease_state import LeaseInput, LeaseState
from tether.supervise.run_state import RunLifecycle, RunState, TerminationReason
from tether.supervise.verify import command_hash, marked_survivors, marker_for, signal_verified

STDERR_TAIL_BYTES = 8 * 1024
DEFAULT_GRACE_S = 1.5  # SIGTERM -> SIGKILL grace; openab uses 1.5 s as well
SPAWN_DEADLINE_S = 10.0  # keeper start + fork/exec of the agent; generous for loaded CI
EXTINCTION_SLACK_S = 5.0  # beyond the grace, how long we wait for the keeper's proof
OUTPUT_HEARTBEAT_S = 30.0  # how often flowing output is logged and stamped on the lease


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


class _Cgroups:
    """cgroup v2 support, probed once per process and recorded in each lease."""

    _probed = False
    mount: str | None = None
    reason = "not probed"

    @classmethod
    def base(cls) -> str | None:
        if not cls._probed:
            cls._probed = True
            if os.environ.get("TETHER_NO_CGROUP"):
                cls.reason = "disabled by TETHER_NO_CGROUP"
                return None
            mount = _os.find_cgroup2_mount()
            if mount is None:
                cls.reason = "no cgroup2 mount"
            else:
                ok, why = _os.cgroup_writable(mount)
                cls.reason = why
                if ok:
                    cls.mount = mount
            if cls.mount is None:
                _log.event("cgroup_unavailable", reason=cls.reason)
        return cls.mount

    @classmethod
    def reset(cls) -> None:
        """Forget the probe, so the next spawn probes again (tests toggle TETHER_NO_CGROUP)."""
        cls._probed = False
        cls.mount = None
        cls.reason = "not probed"


def _new_cgroup(table: _os.ProcessTable, lease_id: str) -> str | None:
    base = _Cgroups.base()
    if base is None:
        return None
    try:
        return table.cgroup_create(os.path.join(base, "tether"), lease_id)
    except OSError as exc:
        _log.event("cgroup_unavailable", reason=str(exc), runId=lease_id)
        return None


class _PipeReader(asyncio.Protocol):
    def __init__(self, on_data: Callable[[bytes], None], on_eof: Callable[[], None]) -> None:
        self._on_data = on_data
        self._on_eof = on_eof

    def data_received(self, data: bytes) -> None:
        self._on_data(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_eof()


class _PipeWriter(asyncio.Protocol):
    """Write side with flow control: ``drain`` waits while the pipe is full."""

    def __init__(self) -> None:
        self._paused = False
        self._resume: asyncio.Future[None] | None = None
        self.closed = False

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._resume is not None and not self._resume.done():
            self._resume.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.resume_writing()

    async def drain(self) -> None:
        while self._paused and not self.closed:
            self._resume = asyncio.get_running_loop().create_future()
            await self._resume


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


class AgentProcess:
    """A running agent under its keeper. Obtain one from :func:`spawn_agent`."""

    def __init__(self, spec: SpawnSpec, registry: Any, lease_id: str) -> None:
        self.spec = spec
        self.registry = registry
        self.lease_id = lease_id
        self.instance_id: str = registry.instance_id
        self.table = _os.current()
        self.lifecycle = RunLifecycle(
            overall_timeout=spec.overall_timeout, no_output_timeout=spec.no_output_timeout
        )
        self.keeper: subprocess.Popen[bytes] | None = None
        self.keeper_pidfd: int | None = None
        self.pid: int | None = None
        self.pgid: int | None = None
        self.starttime: int | None = None
        self.cgroup: str | None = None
        self._stderr = bytearray()
        self.stderr_bytes = 0
        self._on_stdout: Callable[[bytes], None] | None = None
        self._on_stdout_eof: Callable[[], None] | None = None
        # Output (and EOF) that arrived before set_stdout_handler(): a fast agent can
        # write while spawn_agent() is still awaiting the keeper's "spawned" event, and
        # those bytes used to go to a no-op handler -- lost. Held here, handed over once.
        self._stdout_early = bytearray()
        self._stdout_early_eof = False
        self._stdin: asyncio.WriteTransport | None = None
        self._stdin_proto: _PipeWriter | None = None
        self._control: socket.socket | None = None
        self._control_buf = b""
        self._spawned: asyncio.Future[dict[str, Any]] | None = None
        self._extinct: asyncio.Future[dict[str, Any]] | None = None
        self.exited: asyncio.Future[tuple[int | None, int | None]] | None = None
        self._keeper_exited: asyncio.Future[int] | None = None
        self._closing: asyncio.Task[ExtinctionReport] | None = None
        self._ended: asyncio.Future[ExtinctionReport] | None = None
        self._pty_master: int | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._transports: list[asyncio.BaseTransport] = []
        self._next_heartbeat = 0.0
        self.last_output_at: float | None = None
        self._root_reported_exit = False
        self._heartbeat = heartbeat_for(str(registry.path))
        self._lease_held = True

    def _log(self, name: str, level: int = logging.INFO, *, reason: str, **fields: Any) -> None:
        """One supervision log line: always the run (lease) id, the session and the reason."""
        _log.event(
            name,
            level,
            runId=self.lease_id,
            sessionKey=self.spec.session_key,
            reason=reason,
            **fields,
        )

    def _lease_write(self, event: LeaseInput, expect: LeaseState, **fields: Any) -> None:
        """Advance our lease through its table, as a compare-and-set on us as its holder.

        If the write finds the lease no longer ours (another supervisor stole it while
        we were stopped), we stop writing it: the thief ends it and reports its end.
        """
        if not self._lease_held:
            return
        try:
            moved = self.registry.advance_lease(
                self.lease_id, event, expect=expect, owner=SUPERVISOR_ID, **fields
            )
        except Exception as exc:
            self._log("lease_write_failed", logging.WARNING, reason=str(exc), input=event.name)
            return
        if moved is None:
            self._lease_held = False
            self._log(
                "lease_stolen", logging.WARNING, reason="lease-no-longer-ours", input=event.name
            )

    # --- public surface -----------------------------------------------------------

    def set_stdout_handler(
        self, on_data: Callable[[bytes], None], on_eof: Callable[[], None]
    ) -> None:
        """Route the agent's stdout bytes (and its EOF) to the caller, synchronously.

        Anything the agent wrote before this call is delivered now, in order.
        """
        self._on_stdout = on_data
        self._on_stdout_eof = on_eof
        if self._stdout_early:
            early = bytes(self._stdout_early)
            self._stdout_early.clear()
            on_data(early)
        if self._stdout_early_eof:
            self._stdout_early_eof = False
            on_eof()

    def write(self, data: bytes) -> None:
        if self._stdin is not None and not self._stdin.is_closing() and data:
            self._stdin.write(data)

    async def drain(self) -> None:
        if self._stdin_proto is not None:
            await self._stdin_proto.drain()

    def close_stdin(self) -> None:
        if self._stdin is not None and not self._stdin.is_closing():
            if self._pty_master is not None:
                # A terminal has no EOF of its own: the master stays open for reading,
                # so send the line discipline's EOF character (^D) as a terminal would.
                self._stdin.write(b"\x04")
            self._stdin.close()

    def stderr_tail(self) -> str:
        return bytes(self._stderr).decode("utf-8", errors="replace")

    @property
    def is_running(self) -> bool:
        return self.lifecycle.state is RunState.RUNNING

    @property
    def keeper_pid(self) -> int | None:
        return self.keeper.pid if self.keeper else None

    async def wait_exited(self) -> tuple[int | None, int | None]:
        """Wait for the agent root to exit: (exit code, signal)."""
        assert self.exited is not None
        return await asyncio.shield(self.exited)

    async def wait_ended(self) -> ExtinctionReport:
        """Wait for the run's end, whatever ends it (exit, timeout, aclose, keeper death).

        Returns the finalizer's report; it never starts a teardown itself, so the reason
        is the one the run really ended with.
        """
        assert self._ended is not None
        return await asyncio.shield(self._ended)

    def note_stop(self, reason: TerminationReason) -> None:
        """Record why the run is about to end (first reason wins) before ending it."""
        self.lifecycle.request_stop(reason)

    async def aclose(self, reason: TerminationReason = TerminationReason.CLOSE) -> ExtinctionReport:
        """End the run: TERM -> grace -> KILL through the keeper, then prove extinction.

        Idempotent: the first call's reason wins; later calls wait for the same report.

        Cancellation: the teardown runs in its own task and is awaited through a shield,
        so cancelling the caller never leaves a half-ended tree; a second cancellation
        still waits for it.
        """
        self.lifecycle.request_stop(reason)
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(self._teardown())
        try:
            return await asyncio.shield(self._closing)
        except asyncio.CancelledError:
            await asyncio.shield(self._closing)
            raise

    # --- spawning -----------------------------------------------------------------

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        spec = self.spec
        self._spawned = loop.create_future()
        self._extinct = loop.create_future()
        self.exited = loop.create_future()
        self._keeper_exited = loop.create_future()
        self._ended = loop.create_future()
        argv = [str(a) for a in spec.argv]
        self.cgroup = _new_cgroup(self.table, self.lease_id)
        env = dict(os.environ if spec.env is None else spec.env)
        env["TETHER_LEASE_ID"] = self.lease_id
        env["TETHER_INSTANCE_ID"] = self.instance_id
        # Who is asking, when this agent runs `tether ...` (tether.requester checks it).
        if spec.session_key:
            env["TETHER_SESSION_KEY"] = spec.session_key
        else:
            env.pop("TETHER_SESSION_KEY", None)
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        keeper_argv = [
            sys.executable,
            "-m",
            "tether.supervise.keeper",
            "--supervisor-pid",
            str(os.getpid()),
            "--control-fd",
            str(child_sock.fileno()),
            "--grace-ms",
            str(int(spec.grace * 1000)),
            "--cgroup",
            self.cgroup or "",
        ]
        if spec.pty:
            keeper_argv += ["--pty", "1"]
        keeper_argv += ["--", *argv]
        master_fd: int | None = None
        stdio: dict[str, Any] = {}
        try:
            if spec.pty:
                import pty
                import termios

                master_fd, slave_fd = pty.openpty()
                # We are a program, not a person at a keyboard: without this the line
                # discipline would echo everything we write back into the agent's stdout.
                attrs = termios.tcgetattr(slave_fd)
                attrs[3] &= ~termios.ECHO
                termios.tcsetattr(slave_fd, termios.TCSANOW, attrs)
                stdio = {"stdin": slave_fd, "stdout": slave_fd, "stderr": slave_fd}
            else:
                stdio = {
                    "stdin": subprocess.PIPE,
                    "stdout": subprocess.PIPE,
                    "stderr": subprocess.STDOUT if spec.merge_stderr else subprocess.PIPE,
                }
            # Deliberately blocking Popen on the loop thread: pdeathsig follows the forking
            # thread, and asyncio's child watcher must not reap the keeper behind our back.
            self.keeper = subprocess.Popen(  # noqa: ASYNC220
                keeper_argv,
                cwd=spec.cwd,
                env=env,
                pass_fds=(child_sock.fileno(),),
                start_new_session=True,
                close_fds=True,
                **stdio,
            )
        except OSError as exc:
            child_sock.close()
            parent_sock.close()
            if master_fd is not None:
                os.close(master_fd)
            raise SpawnError(f"cannot start the keeper: {exc}", argv=argv) from exc
        finally:
            child_sock.close()
            if spec.pty:
                os.close(stdio["stdin"])
        # Our unreaped child: the pid cannot have been recycled, so this handle is exact.
        self.keeper_pidfd = self.table.child_handle(self.keeper.pid)
        keeper_st = self.table.stat(self.keeper.pid)
        boot_id = self.table.boot_id()
        now = time.time()
        self.registry.create_lease(
            lease_id=self.lease_id,
            run_state=RunState.STARTING.value,
            backend_id=spec.backend_id or os.path.basename(argv[0]),
            owner_instance_id=SUPERVISOR_ID,
            lease_expires_at=now + self._heartbeat.ttl,
            heartbeat_at=now,
            session_key=spec.session_key,
            owner_pid=os.getpid(),
            owner_starttime=_own_starttime(self.table),
            keeper_pid=self.keeper.pid,
            keeper_starttime=keeper_st.starttime if keeper_st else None,
            boot_id=boot_id,
            pid_namespace=self.table.pid_namespace(),
            cgroup_path=self.cgroup,
            command_hash=command_hash(argv),
            cwd=spec.cwd,
        )
        self._heartbeat.add(self.lease_id)
        metrics.incr("run_spawn_total")
        loop.add_reader(self.keeper_pidfd, self._on_keeper_exit)
        self._control = parent_sock
        parent_sock.setblocking(False)
        loop.add_reader(parent_sock.fileno(), self._on_control_readable)
        if spec.pty:
            assert master_fd is not None
            master = os.fdopen(master_fd, "rb", buffering=0)
            t, _ = await loop.connect_read_pipe(
                lambda: _PipeReader(self._stdout_data, self._stdout_eof), master
            )
            # The agent's stdin is the same terminal: write through a second fd on the
            # master (a transport owns and closes its fd). Without this, write() on a
            # PTY run was silently dropped (self._stdin stayed None).
            writer = os.fdopen(os.dup(master_fd), "wb", buffering=0)
            pty_writer = _PipeWriter()
            self._stdin_proto = pty_writer
            tw, _ = await loop.connect_write_pipe(lambda: pty_writer, writer)
            assert isinstance(tw, asyncio.WriteTransport)
            self._stdin = tw
            self._transports += [t, tw]
            self._pty_master = master_fd
        else:
            assert self.keeper.stdout
            assert self.keeper.stdin
            t1, _ = await loop.connect_read_pipe(
                lambda: _PipeReader(self._stdout_data, self._stdout_eof), self.keeper.stdout
            )
            self._transports.append(t1)
            if self.keeper.stderr is not None:  # None: merged into stdout
                t2, _ = await loop.connect_read_pipe(
                    lambda: _PipeReader(self._stderr_data, lambda: None), self.keeper.stderr
                )
                self._transports.append(t2)
            writer_proto = _PipeWriter()
            self._stdin_proto = writer_proto
            t3, _ = await loop.connect_write_pipe(lambda: writer_proto, self.keeper.stdin)
            assert isinstance(t3, asyncio.WriteTransport)
            self._stdin = t3
            self._transports.append(t3)
        try:
            async with asyncio.timeout(SPAWN_DEADLINE_S):
                spawned = await asyncio.shield(self._spawned)
        except (TimeoutError, SpawnError) as exc:
            self.lifecycle.transition_spawn_failed()
            await self._teardown()
            if isinstance(exc, SpawnError):
                raise
            raise SpawnError("the keeper did not start the agent in time", argv=argv) from exc
        self.pid = int(spawned["pid"])
        self.pgid = int(spawned["pgid"])
        self.starttime = spawned.get("starttime")
        # Seed 003: "starting becomes running only after successful spawn and registry
        # commit" -- the identity and the run state are committed in one write, and only
        # then does the machine (and anyone asking is_running) see RUNNING.
        self.registry.update_lease(
            self.lease_id,
            root_pid=self.pid,
            pgid=self.pgid,
            starttime=self.starttime,
            run_state=RunState.RUNNING.value,
        )
        self.lifecycle.transition_spawned(time.monotonic())
        if self._root_reported_exit:
            self._root_exited_by_itself()  # it exited before we got here
        elif self._keeper_exited.done() and self._closing is None:
            # The keeper died (killed) while we were starting: _on_keeper_exit saw
            # STARTING and left it to us. End and sweep the run, as it would have.
            self.lifecycle.request_stop(TerminationReason.SIGNAL)
            self._closing = loop.create_task(self._teardown())
        else:
            self._arm_watchdog()
        self._log(
            "spawn",
            reason="spawned",
            pid=self.pid,
            keeper_pid=self.keeper.pid,
            cgroup=self.cgroup,
            argv0=argv[0],
        )

    # --- I/O callbacks (event loop thread) ------------------------------------------

    def _output_heartbeat(self, now: float) -> None:
        """At most every OUTPUT_HEARTBEAT_S: log that output flows and stamp the lease.

        Per-chunk bookkeeping would cost the hot path; one line and one row update per
        interval is what an operator (and a stale-run investigation) needs.
        """
        self._next_heartbeat = now + OUTPUT_HEARTBEAT_S
        wall = time.time()
        self._log("output_heartbeat", reason="output", stderr_bytes=self.stderr_bytes)
        with contextlib.suppress(Exception):
            self.registry.update_lease(self.lease_id, last_output_at=wall)

    def _stdout_data(self, data: bytes) -> None:
        now = time.monotonic()
        if not self.lifecycle.deliver_output(now):
            return  # the run has settled: no output after settlement
        self.last_output_at = now
        if now >= self._next_heartbeat:
            self._output_heartbeat(now)
        if self._on_stdout is None:
            self._stdout_early += data
        else:
            self._on_stdout(data)

    def _stdout_eof(self) -> None:
        if self._on_stdout_eof is None:
            self._stdout_early_eof = True
        else:
            self._on_stdout_eof()

    def _stderr_data(self, data: bytes) -> None:
        self.stderr_bytes += len(data)
        self._stderr += data
        if len(self._stderr) > STDERR_TAIL_BYTES:
            del self._stderr[: len(self._stderr) - STDERR_TAIL_BYTES]

    def _control_send(self, obj: dict[str, Any]) -> None:
        if self._control is None:
            return
        try:
            self._control.send((json.dumps(obj) + "\n").encode())
        except OSError:
            pass  # keeper gone; its exit is handled by the pidfd watch

    def _drain_control(self) -> None:
        """Read whatever the keeper wrote and has not been parsed yet (never blocks)."""
        while self._control is not None and self._read_control():
            pass

    def _on_control_readable(self) -> None:
        self._read_control()

    def _read_control(self) -> bool:
        """One non-blocking read of the control socket; ``False`` on EAGAIN or EOF."""
        assert self._control is not None
        try:
            data = self._control.recv(65536)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self._control.fileno())
            return False
        self._control_buf += data
        while b"\n" in self._control_buf:
            line, self._control_buf = self._control_buf.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            self._on_keeper_event(msg)
        return True

    def _on_keeper_event(self, msg: dict[str, Any]) -> None:
        kind = msg.get("event")
        assert self._spawned
        assert self._extinct
        assert self.exited
        if kind == "spawned" and not self._spawned.done():
            self._spawned.set_result(msg)
        elif kind == "spawn-failed" and not self._spawned.done():
            err = msg.get("errno") or 0
            text = os.strerror(err) if err else str(msg.get("message"))
            self._spawned.set_exception(
                SpawnError(
                    f"cannot run {self.spec.argv[0]!r}: {text}",
                    argv=list(self.spec.argv),
                    errno=err,
                )
            )
            self._spawned.exception()  # mark retrieved; _start re-raises it
        elif kind == "exited" and not self.exited.done():
            self._root_reported_exit = True
            self.exited.set_result((msg.get("code"), msg.get("signal")))
            self._log(
                "exit",
                reason="root-exited",
                code=msg.get("code"),
                signal=msg.get("signal"),
            )
            if self.lifecycle.state is RunState.RUNNING:
                self._root_exited_by_itself()
            # Still STARTING (a fast agent: spawned, exited and extinct can arrive in
            # one read, before _start resumes): _start applies it after SPAWNED.
        elif kind == "extinct" and not self._extinct.done():
            self._extinct.set_result(msg)

    def _root_exited_by_itself(self) -> None:
        """The agent ended by itself while RUNNING. Record that *now*, and end the run.

        Recording it at once matters: a caller that awaits wait_exited() and then calls
        aclose() must not turn an exit into a "close" requested by us (terminated_by
        would say "daemon"). Ending the run at once matters too: descendants the root
        left behind (a setsid daemon, a backgrounded sleep) must not outlive it until
        someone happens to call aclose().
        """
        self.lifecycle.transition_exited()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(self._teardown())

    def _on_keeper_exit(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.keeper_pidfd is not None
        assert self.keeper is not None
        loop.remove_reader(self.keeper_pidfd)
        # A fast agent: the keeper may have said spawned, exited and extinct and left
        # before we read a byte, making its handle and the control socket readable in
        # one loop pass. Read its last words first, or a clean run would look like a
        # keeper that died before starting the agent.
        self._drain_control()
        reaped = self.table.reap_child(self.keeper_pidfd)  # also closes the handle
        status = reaped if reaped is not None else -1
        # Tell Popen, so its finalizer neither warns nor waits on a reaped pid.
        self.keeper.returncode = status
        self.keeper_pidfd = None
        assert self._keeper_exited
        assert self._spawned
        assert self.exited
        if not self._keeper_exited.done():
            self._keeper_exited.set_result(status)
        if not self._spawned.done():
            self._spawned.set_exception(SpawnError("the keeper exited before starting the agent"))
            self._spawned.exception()
        if not self.exited.done():
            self.exited.set_result((None, None))
        # The keeper never leaves on its own while the run is live; if it did (it was
        # killed), the run must still be ended and swept: the finalizer does that.
        if self._closing is None and self.lifecycle.state is RunState.RUNNING:
            if self._root_reported_exit:
                self.lifecycle.transition_exited()  # it ended by itself: terminated by the agent
            else:
                self.lifecycle.request_stop(TerminationReason.SIGNAL)  # the keeper was killed
            self._closing = loop.create_task(self._teardown())
        elif self._closing is None and self.lifecycle.state is RunState.EXITING:
            # The root's exit started EXITING but nothing has run the finalizer yet.
            self._closing = loop.create_task(self._teardown())

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
            self._closing = asyncio.get_running_loop().create_task(self._teardown())

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
        mode = str(keeper_report.get("mode")) if keeper_report else "supervisor-sweep"
        escalated = bool(keeper_report.get("escalated")) if keeper_report else True
        raw_escaped = keeper_report.get("escaped") if keeper_report else None
        escaped = [int(p) for p in raw_escaped] if isinstance(raw_escaped, list) else []
        # The third witness: a /proc scan for the lease marker. One scan when the keeper
        # proved extinction and the scan agrees (the common case: a full scan reads
        # every process's environ, which is most of the teardown's cost after the
        # grace); a sweep and a second scan only when they disagree.
        found = self._marker_survivors()
        if keeper_report is None or found:
            await self._sweep_marker()
            found = self._marker_survivors()
        survivors = tuple(found)
        if keeper_report is not None and found:
            # The keeper proved ECHILD, yet marked processes live: they left its subtree
            # as well as the group (only an escape can do that). Reaped by the sweep.
            escaped += [p for p in found if p not in escaped]
        for t in self._transports:
            t.close()
        if self._control is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._control.fileno())
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
        if escaped:
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
        )
        self._lease_write(
            LeaseInput.UNVERIFIABLE if survivors else LeaseInput.EXTINCTION_PROVEN,
            LeaseState.CLOSING,
            reason=reason.value,
            failure=reason.value if escaped else None,
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
            note=f"survivors={list(survivors)}" if survivors else None,
        )
        self._heartbeat.remove(self.lease_id)
        self._log(
            "extinct",
            reason=reason.value,
            mode=mode,
            escalated=escalated,
            survivors=list(survivors),
            elapsed_ms=report.elapsed_ms,
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

    def _marker_survivors(self) -> list[int]:
        """Live processes that carry this run's lease marker (the third witness)."""
        try:
            return marked_survivors(self.table, marker_for(self.lease_id), exclude=[os.getpid()])
        except _os.ProcUnreadable:
            return []  # /proc unreadable: the keeper's ECHILD and the cgroup still stand

    async def _sweep_marker(self) -> None:
        """Supervisor-side sweep: the keeper is gone, so kill verified marker carriers."""
        if self.cgroup:
            with contextlib.suppress(OSError):
                self.table.cgroup_kill(self.cgroup)
        boot_id = self.table.boot_id()
        for _ in range(50):
            pids = self._marker_survivors()
            if not pids:
                return
            for pid in pids:
                st = self.table.stat(pid)
                if st is None:
                    continue
                signal_verified(
                    self.table, _os.ProcessIdentity(boot_id, pid, st.starttime), signal.SIGKILL
                )
            await asyncio.sleep(0.01)


def _own_starttime(table: _os.ProcessTable) -> int | None:
    st = table.stat(os.getpid())
    return st.starttime if st else None


async def spawn_agent(spec: SpawnSpec, registry: Any) -> AgentProcess:
    """Start ``spec.argv`` under a keeper and a fresh lease; return the running handle.

    Args:
        spec: the command, cwd, environment and stop policy.
        registry: the open :class:`tether.registry.Registry` the lease is written to.

    Returns:
        An :class:`AgentProcess` in state RUNNING. End it with ``aclose()``.

    Raises:
        SpawnError: the keeper or the agent could not be started (command not found,
            not executable, keeper start-up timed out). Nothing is left running.

    Cancellation: if cancelled while starting, whatever was started is torn down
    (bounded, shielded) before the cancellation propagates.
    """
    proc = AgentProcess(spec, registry, os.urandom(16).hex())  # lease id: 128 random bits
    try:
        await proc._start()
    except SpawnError as exc:
        metrics.incr("run_exit_total", reason=TerminationReason.SPAWN_ERROR.value)
        # The lease (if the keeper got far enough to have one) was already ended
        # through its state machine by the teardown; only say why.
        with contextlib.suppress(Exception):
            registry.update_lease(proc.lease_id, reason="spawn-error", note=str(exc))
        raise
    except BaseException:
        if proc.keeper is not None:
            await asyncio.shield(proc.aclose(TerminationReason.SPAWN_ERROR))
        raise
    return proc


__all__ = ["AgentProcess", "ExtinctionReport", "SpawnSpec", "spawn_agent"]
