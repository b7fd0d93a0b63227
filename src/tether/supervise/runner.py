"""The supervisor's shell: start an agent under a keeper, watch it, end it with proof.

Theory of operation
-------------------
``spawn_agent()`` is the only way Tether starts an agent. It

1. writes a lease (``open``) naming the keeper *before* the run is announced running;
2. starts the keeper (:mod:`tether.supervise.keeper`) from the event-loop
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

The class is a thin composition of collaborators, each the one owner of its fields and
the one writer of what it stands for: :class:`.run_lease.RunLease` (the lease row, its
heartbeat, the log lines), :class:`.run_io.RunIO` (the agent's stdio),
:class:`.spawning.Spawner` (the keeper, its pidfd and channel, the cgroup, the agent's
identity), :class:`.watchdog.Watchdog` (the exit futures, the keeper's exit, the
timeouts) and :class:`.finalizer.Finalizer` (the single teardown, with
:mod:`.witnesses`). They share one :class:`.run_state.RunLifecycle`, the run's
transition table. The pieces they use: :mod:`.run_types` (``SpawnSpec``,
``ExtinctionReport``), :mod:`.keeper_launch`, :mod:`.keeper_channel`, :mod:`.pipes`,
:mod:`.cgroups`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from tether import _os, metrics
from tether.errors import SpawnError
from tether.supervise.finalizer import Finalizer
from tether.supervise.run_io import RunIO
from tether.supervise.run_lease import RunLease
from tether.supervise.run_state import RunLifecycle, RunState, TerminationReason
from tether.supervise.run_types import DEFAULT_GRACE_S, ExtinctionReport, SpawnSpec
from tether.supervise.spawning import Spawner
from tether.supervise.watchdog import Watchdog


class AgentProcess:
    """A running agent under its keeper. Obtain one from :func:`spawn_agent`."""

    def __init__(self, spec: SpawnSpec, registry: Any, lease_id: str) -> None:
        self.spec = spec
        self.registry = registry
        self.table = _os.current()
        self.lifecycle = RunLifecycle(
            overall_timeout=spec.overall_timeout, no_output_timeout=spec.no_output_timeout
        )
        self._lease = RunLease(registry, lease_id, spec.session_key)
        self._io = RunIO(self.lifecycle, self._lease)
        self._spawner = Spawner(spec, self.table, self._lease)
        self._watch = Watchdog(
            self.lifecycle, self._lease, self._spawner, ending=self._ending, end=self._end_run
        )
        parts = (self._lease, self._io, self._spawner, self._watch)
        self._final = Finalizer(spec, self.table, self.lifecycle, parts)

    def _ending(self) -> bool:
        return self._final.started

    def _end_run(self) -> None:
        self._final.begin()

    # --- what the run is (read-only views on its collaborators) -----------------------

    @property
    def lease_id(self) -> str:
        return self._lease.lease_id

    @property
    def instance_id(self) -> str:
        return self._lease.instance_id

    @property
    def keeper(self) -> subprocess.Popen[bytes] | None:
        return self._spawner.keeper

    @property
    def keeper_pid(self) -> int | None:
        keeper = self._spawner.keeper
        return keeper.pid if keeper else None

    @property
    def pid(self) -> int | None:
        return self._spawner.pid

    @property
    def pgid(self) -> int | None:
        return self._spawner.pgid

    @property
    def starttime(self) -> int | None:
        return self._spawner.starttime

    @property
    def cgroup(self) -> str | None:
        return self._spawner.cgroup

    @property
    def exited(self) -> asyncio.Future[tuple[int | None, int | None]] | None:
        return self._watch.exited

    @property
    def stderr_bytes(self) -> int:
        return self._io.stderr_bytes

    @property
    def last_output_at(self) -> float | None:
        return self._io.last_output_at

    @property
    def is_running(self) -> bool:
        return self.lifecycle.state is RunState.RUNNING

    # --- the agent's stdio --------------------------------------------------------------

    def set_stdout_handler(
        self, on_data: Callable[[bytes], None], on_eof: Callable[[], None]
    ) -> None:
        """Route the agent's stdout bytes (and its EOF) to the caller, synchronously.

        Anything the agent wrote before this call is delivered now, in order.
        """
        self._io.set_stdout_handler(on_data, on_eof)

    def write(self, data: bytes) -> None:
        self._io.write(data)

    async def drain(self) -> None:
        await self._io.drain()

    def close_stdin(self) -> None:
        self._io.close_stdin()

    def stderr_tail(self) -> str:
        return self._io.stderr_tail()

    # --- the lifecycle ----------------------------------------------------------------

    async def _start(self) -> None:
        """Start the keeper and the agent; return once the run is RUNNING (see module)."""
        loop = asyncio.get_running_loop()
        self._spawner.open(loop)
        self._watch.open(loop)
        self._final.open(loop)
        master_fd, boot_id = self._spawner.launch(
            loop, self._watch.on_keeper_event, self._watch.on_keeper_exit
        )
        keeper = self._spawner.keeper
        assert keeper is not None
        await self._io.attach(loop, keeper, master_fd, pty=self.spec.pty)
        try:
            spawned = await self._spawner.wait_spawned()
        except (TimeoutError, SpawnError) as exc:
            self.lifecycle.transition_spawn_failed()
            await self._final.teardown()
            if isinstance(exc, SpawnError):
                raise
            argv = self._spawner.argv
            raise SpawnError("the keeper did not start the agent in time", argv=argv) from exc
        self._spawner.record_identity(spawned, boot_id)
        self.lifecycle.transition_spawned(time.monotonic())
        self._watch.after_spawn()
        self._lease.log(
            "spawn",
            reason="spawned",
            pid=self.pid,
            keeper_pid=keeper.pid,
            cgroup=self.cgroup,
            argv0=self._spawner.argv[0],
        )

    async def wait_exited(self) -> tuple[int | None, int | None]:
        """Wait for the agent root to exit: (exit code, signal)."""
        assert self._watch.exited is not None
        return await asyncio.shield(self._watch.exited)

    async def wait_ended(self) -> ExtinctionReport:
        """Wait for the run's end, whatever ends it (exit, timeout, aclose, keeper death).

        Returns the finalizer's report; it never starts a teardown itself, so the reason
        is the one the run really ended with.
        """
        return await self._final.wait_ended()

    def abandon(self) -> None:
        """The supervisor lets go of the run without ending it (a session host's owner
        whose teardown failed): the keeper's channel closes, and the keeper ends the
        tree as on its supervisor's death."""
        self._spawner.close_control()

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
        closing = self._final.begin()
        try:
            return await asyncio.shield(closing)
        except asyncio.CancelledError:
            await asyncio.shield(closing)
            raise


async def spawn_agent(spec: SpawnSpec, registry: Any) -> AgentProcess:
    """Start ``spec.argv`` under a keeper and a fresh lease; return the running handle.

    Args:
        spec: the command, cwd, environment and stop policy.
        registry: the open :class:`tether.state.registry.Registry` the lease is written to.

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


__all__ = ["DEFAULT_GRACE_S", "AgentProcess", "ExtinctionReport", "SpawnSpec", "spawn_agent"]
