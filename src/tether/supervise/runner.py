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

The class is built in layers, one job per module, each calling only itself and the
layers below: :mod:`.run_core` (the run's state, lease writes, stdio and keeper
channel), :mod:`.reaper` (the watchdog and the single finalizer), :mod:`.spawning`
(starting under a keeper, its events), and here the public lifecycle. The pieces they
use: :mod:`.run_types` (``SpawnSpec``, ``ExtinctionReport``), :mod:`.keeper_launch`,
:mod:`.keeper_channel`, :mod:`.pipes`, :mod:`.cgroups`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from tether import _aio, metrics
from tether.errors import SpawnError
from tether.supervise.run_state import RunState, TerminationReason
from tether.supervise.run_types import DEFAULT_GRACE_S, ExtinctionReport, SpawnSpec
from tether.supervise.spawning import RunSpawner


class AgentProcess(RunSpawner):
    """A running agent under its keeper. Obtain one from :func:`spawn_agent`."""

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
            self._closing = _aio.spawn(self._teardown())
        try:
            return await asyncio.shield(self._closing)
        except asyncio.CancelledError:
            await asyncio.shield(self._closing)
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
