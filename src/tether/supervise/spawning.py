"""Starting a run under its keeper: the one owner of the keeper and the agent's identity.

A collaborator of :class:`tether.supervise.runner.AgentProcess`. :meth:`Spawner.launch`
writes the lease (``open``) naming the keeper before the run is announced running;
starts the keeper (:func:`tether.supervise.keeper_launch.launch_keeper`) from the
event-loop thread; opens a pidfd on it at once (our unreaped child: the pid cannot have
been recycled) and hands it to the watchdog (:mod:`.watchdog`) to watch with
``add_reader`` -- asyncio's child watcher is never involved. :meth:`Spawner.wait_spawned`
waits for the keeper's ``spawned`` event and :meth:`Spawner.record_identity` records the
agent's identity in the lease; only then is the run reported running.

It also owns the keeper's control channel (the ``terminate`` request, its last words),
the pidfd until the keeper is reaped, and the run's cgroup.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from tether import _os, metrics
from tether.errors import SpawnError
from tether.supervise import adoption
from tether.supervise.cgroups import new_cgroup
from tether.supervise.keeper_channel import KeeperChannel
from tether.supervise.keeper_launch import launch_keeper
from tether.supervise.lease_renewal import SUPERVISOR_ID
from tether.supervise.run_lease import RunLease
from tether.supervise.run_state import RunState
from tether.supervise.run_types import SpawnSpec
from tether.supervise.verify import command_hash

__all__ = ["SPAWN_DEADLINE_S", "Spawner"]

SPAWN_DEADLINE_S = 10.0  # keeper start + fork/exec of the agent; generous for loaded CI

EventHandler = Callable[[dict[str, Any]], None]


class Spawner:
    """The keeper, its pidfd and channel, the cgroup, and the agent's identity."""

    def __init__(self, spec: SpawnSpec, table: _os.ProcessTable, lease: RunLease) -> None:
        self._spec = spec
        self._table = table
        self._lease = lease
        self.argv = [str(a) for a in spec.argv]
        self.keeper: subprocess.Popen[bytes] | None = None
        self.keeper_pidfd: int | None = None
        self.cgroup: str | None = None
        self.pid: int | None = None
        self.pgid: int | None = None
        self.starttime: int | None = None
        self._control: KeeperChannel | None = None
        self._spawned: asyncio.Future[dict[str, Any]] | None = None

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        """Create the ``spawned`` future (before anything can answer it)."""
        self._spawned = loop.create_future()

    def launch(
        self, loop: asyncio.AbstractEventLoop, on_event: EventHandler, on_exit: Callable[[], None]
    ) -> tuple[int | None, str]:
        """Start the keeper and write the lease naming it: ``(PTY master fd, boot id)``.

        The keeper's events other than ``spawned``/``spawn-failed`` go to ``on_event``;
        its exit (the pidfd readable) calls ``on_exit``.
        """
        spec, argv = self._spec, self.argv
        self.cgroup = new_cgroup(self._table, self._lease.lease_id)
        # Blocking, on the loop's thread, on purpose: see launch_keeper.
        self.keeper, control_sock, master_fd = launch_keeper(
            spec,
            argv,
            lease_id=self._lease.lease_id,
            instance_id=self._lease.instance_id,
            cgroup=self.cgroup,
        )
        adoption.note_launched(self.keeper.pid)  # our own child, not an adopted orphan
        # Our unreaped child: the pid cannot have been recycled, so this handle is exact.
        self.keeper_pidfd = self._table.child_handle(self.keeper.pid)
        keeper_st = self._table.stat(self.keeper.pid)
        boot_id = self._table.boot_id()
        # The channel and the exit watch come before the lease's write: if that write
        # fails (a held or full database), the teardown that follows asks the keeper to
        # end the agent it already started and sees it exit, instead of waiting out
        # its timeouts on a channel nobody reads (it did: 8 s).
        loop.add_reader(self.keeper_pidfd, on_exit)
        self._control = KeeperChannel(control_sock, lambda msg: self._on_event(msg, on_event))
        self._lease.create(
            time.time(),
            run_state=RunState.STARTING.value,
            backend_id=spec.backend_id or os.path.basename(argv[0]),
            owner_instance_id=SUPERVISOR_ID,
            session_key=spec.session_key,
            owner_pid=os.getpid(),
            owner_starttime=_own_starttime(self._table),
            keeper_pid=self.keeper.pid,
            keeper_starttime=keeper_st.starttime if keeper_st else None,
            boot_id=boot_id,
            pid_namespace=self._table.pid_namespace(),
            cgroup_path=self.cgroup,
            command_hash=command_hash(argv),
            cwd=spec.cwd,
        )
        metrics.incr("run_spawn_total")
        return master_fd, boot_id

    async def wait_spawned(self) -> dict[str, Any]:
        """The keeper's ``spawned`` event. Raises SpawnError or TimeoutError."""
        assert self._spawned is not None
        async with asyncio.timeout(SPAWN_DEADLINE_S):
            return await asyncio.shield(self._spawned)

    def record_identity(self, spawned: dict[str, Any], boot_id: str) -> None:
        """Commit the agent's identity and RUNNING in one lease write; record the root.

        Seed 003: "starting becomes running only after successful spawn and registry
        commit" -- the identity and the run state are committed in one write, and only
        then does the machine (and anyone asking is_running) see RUNNING.
        """
        self.pid = int(spawned["pid"])
        self.pgid = int(spawned["pgid"])
        self.starttime = spawned.get("starttime")
        self._lease.update(
            root_pid=self.pid,
            pgid=self.pgid,
            starttime=self.starttime,
            run_state=RunState.RUNNING.value,
        )
        self._lease.record_members([(self.pid, self.starttime)], "root", lambda: boot_id)

    def _on_event(self, msg: dict[str, Any], forward: EventHandler) -> None:
        kind = msg.get("event")
        assert self._spawned
        if kind == "spawned" and not self._spawned.done():
            self._spawned.set_result(msg)
        elif kind == "spawn-failed" and not self._spawned.done():
            err = msg.get("errno") or 0
            text = os.strerror(err) if err else str(msg.get("message"))
            self._spawned.set_exception(
                SpawnError(
                    f"cannot run {self._spec.argv[0]!r}: {text}",
                    argv=list(self._spec.argv),
                    errno=err,
                )
            )
            self._spawned.exception()  # mark retrieved; wait_spawned's caller re-raises it
        elif kind not in ("spawned", "spawn-failed"):
            forward(msg)

    # --- the keeper's end -----------------------------------------------------------

    def reap_keeper(self, loop: asyncio.AbstractEventLoop) -> int:
        """The keeper exited (its pidfd is readable): read its last words, reap it.

        Returns its wait status (-1 if it could not be reaped). The spawn, if still
        pending, fails: the keeper left before starting the agent.
        """
        assert self.keeper_pidfd is not None
        assert self.keeper is not None
        loop.remove_reader(self.keeper_pidfd)
        # A fast agent: the keeper may have said spawned, exited and extinct and left
        # before we read a byte, making its handle and the control socket readable in
        # one loop pass. Read its last words first, or a clean run would look like a
        # keeper that died before starting the agent.
        self.drain_control()
        reaped = self._table.reap_child(self.keeper_pidfd)  # also closes the handle
        adoption.forget_launched(self.keeper.pid)
        status = reaped if reaped is not None else -1
        # Tell Popen, so its finalizer neither warns nor waits on a reaped pid.
        self.keeper.returncode = status
        self.keeper_pidfd = None
        return status

    def fail_pending_spawn(self) -> None:
        """The keeper is gone: a spawn still waiting for it fails."""
        assert self._spawned
        if not self._spawned.done():
            self._spawned.set_exception(SpawnError("the keeper exited before starting the agent"))
            self._spawned.exception()

    @property
    def keeper_unreaped(self) -> bool:
        """Whether the keeper was started and has not been reaped yet."""
        return self.keeper is not None and self.keeper.returncode is None

    def ask_terminate(self) -> None:
        """Ask the keeper to end the run: SIGTERM -> grace -> SIGKILL -> ECHILD."""
        self._control_send({"cmd": "terminate", "grace_ms": int(self._spec.grace * 1000)})

    def kill_keeper(self) -> None:
        """SIGKILL the keeper through its pidfd (our unreaped child: exact)."""
        if self.keeper_pidfd is not None:
            with contextlib.suppress(OSError):
                self._table.signal_child(self.keeper_pidfd, signal.SIGKILL)

    def drain_control(self) -> None:
        """Read whatever the keeper wrote and has not been parsed yet (never blocks)."""
        if self._control is not None:
            self._control.drain()

    def close_control(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None

    def remove_cgroup(self) -> None:
        if self.cgroup:
            with contextlib.suppress(OSError):
                self._table.cgroup_remove(self.cgroup)

    def _control_send(self, obj: dict[str, Any]) -> None:
        if self._control is not None:
            self._control.send(obj)


def _own_starttime(table: _os.ProcessTable) -> int | None:
    st = table.stat(os.getpid())
    return st.starttime if st else None
