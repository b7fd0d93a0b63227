"""Starting a run: the third layer of :class:`tether.supervise.runner.AgentProcess`.

``_start`` writes the lease (``open``) naming the keeper before the run is announced
running; starts the keeper (:func:`tether.supervise.keeper_launch.launch_keeper`) from the
event-loop thread; opens a pidfd on it at once (our unreaped child: the pid cannot have
been recycled) and watches it with ``add_reader`` -- asyncio's child watcher is never
involved; waits for the keeper's ``spawned`` event, records the agent's identity in the
lease, and only then reports the run running. The keeper's later events (the agent
exited, extinction proven) and the keeper's own exit are handled here too.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from tether import _aio, _os, metrics
from tether.errors import SpawnError
from tether.supervise import adoption
from tether.supervise.cgroups import new_cgroup
from tether.supervise.keeper_channel import KeeperChannel
from tether.supervise.keeper_launch import launch_keeper
from tether.supervise.lease_renewal import SUPERVISOR_ID
from tether.supervise.pipes import PipeReader, PipeWriter
from tether.supervise.reaper import RunReaper
from tether.supervise.run_state import RunState, TerminationReason
from tether.supervise.verify import command_hash

__all__ = ["RunSpawner"]

SPAWN_DEADLINE_S = 10.0  # keeper start + fork/exec of the agent; generous for loaded CI


class RunSpawner(RunReaper):
    """Start the run under its keeper; handle the keeper's events and its exit."""

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        spec = self.spec
        self._spawned = loop.create_future()
        self._extinct = loop.create_future()
        self.exited = loop.create_future()
        self._keeper_exited = loop.create_future()
        self._ended = loop.create_future()
        argv = [str(a) for a in spec.argv]
        self.cgroup = new_cgroup(self.table, self.lease_id)
        # Blocking, on the loop's thread, on purpose: see launch_keeper.
        self.keeper, control_sock, master_fd = launch_keeper(
            spec, argv, lease_id=self.lease_id, instance_id=self.instance_id, cgroup=self.cgroup
        )
        adoption.note_launched(self.keeper.pid)  # our own child, not an adopted orphan
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
        self._control = KeeperChannel(control_sock, self._on_keeper_event)
        await self._attach_stdio(loop, master_fd)
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
        self._record_members([(self.pid, self.starttime)], "root", boot_id)
        self.lifecycle.transition_spawned(time.monotonic())
        if self._root_reported_exit:
            self._root_exited_by_itself()  # it exited before we got here
        elif self._keeper_exited.done() and self._closing is None:
            # The keeper died (killed) while we were starting: _on_keeper_exit saw
            # STARTING and left it to us. End and sweep the run, as it would have.
            self.lifecycle.request_stop(TerminationReason.SIGNAL)
            self._closing = _aio.spawn(self._teardown())
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

    async def _attach_stdio(self, loop: asyncio.AbstractEventLoop, master_fd: int | None) -> None:
        """The agent's stdio (the keeper's pipes, or the PTY master) as asyncio transports."""
        assert self.keeper is not None
        if self.spec.pty:
            assert master_fd is not None
            master = os.fdopen(master_fd, "rb", buffering=0)
            t, _ = await loop.connect_read_pipe(
                lambda: PipeReader(self._stdout_data, self._stdout_eof), master
            )
            # The agent's stdin is the same terminal: write through a second fd on the
            # master (a transport owns and closes its fd). Without this, write() on a
            # PTY run was silently dropped (self._stdin stayed None).
            writer = os.fdopen(os.dup(master_fd), "wb", buffering=0)
            pty_writer = PipeWriter()
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
                lambda: PipeReader(self._stdout_data, self._stdout_eof), self.keeper.stdout
            )
            self._transports.append(t1)
            if self.keeper.stderr is not None:  # None: merged into stdout
                t2, _ = await loop.connect_read_pipe(
                    lambda: PipeReader(self._stderr_data, lambda: None), self.keeper.stderr
                )
                self._transports.append(t2)
            writer_proto = PipeWriter()
            self._stdin_proto = writer_proto
            t3, _ = await loop.connect_write_pipe(lambda: writer_proto, self.keeper.stdin)
            assert isinstance(t3, asyncio.WriteTransport)
            self._stdin = t3
            self._transports.append(t3)

    # --- the keeper's events ----------------------------------------------------------

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
            self._closing = _aio.spawn(self._teardown())

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
        adoption.forget_launched(self.keeper.pid)
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
            self._closing = _aio.spawn(self._teardown())
        elif self._closing is None and self.lifecycle.state is RunState.EXITING:
            # The root's exit started EXITING but nothing has run the finalizer yet.
            self._closing = _aio.spawn(self._teardown())


def _own_starttime(table: _os.ProcessTable) -> int | None:
    st = table.stat(os.getpid())
    return st.starttime if st else None
