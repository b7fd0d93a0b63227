"""The state of one agent run and its plumbing: the first layer of
:class:`tether.supervise.runner.AgentProcess`.

Here: the run's fields, its lease writes (a compare-and-set through the lease table),
its log lines, the agent's stdio (output straight to the caller's callback, an 8 KiB
stderr tail, an output heartbeat), and the keeper's control channel. Spawning
(:mod:`.spawning`) and ending with proof (:mod:`.reaper`) build on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import time
from collections.abc import Callable
from typing import Any

from tether import _log, _os
from tether.supervise.keeper_channel import KeeperChannel
from tether.supervise.lease_renewal import SUPERVISOR_ID, heartbeat_for
from tether.supervise.lease_state import LeaseInput, LeaseState
from tether.supervise.pipes import PipeWriter
from tether.supervise.run_state import RunLifecycle
from tether.supervise.run_types import ExtinctionReport, SpawnSpec

__all__ = ["RunCore"]

STDERR_TAIL_BYTES = 8 * 1024
OUTPUT_HEARTBEAT_S = 30.0  # how often flowing output is logged and stamped on the lease


class RunCore:
    """A run's state, lease writes, logs, stdio and keeper channel (no spawning, no end)."""

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
        self._stdin_proto: PipeWriter | None = None
        self._control: KeeperChannel | None = None
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
        self._heartbeat = heartbeat_for(str(registry.path), registry.reopener())
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

    # --- the agent's stdio --------------------------------------------------------

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
        if self._control is not None:
            self._control.send(obj)

    def _drain_control(self) -> None:
        """Read whatever the keeper wrote and has not been parsed yet (never blocks)."""
        if self._control is not None:
            self._control.drain()
