"""A run's stdio: the one owner of the agent's pipes (or PTY) on our side.

A collaborator of :class:`tether.supervise.runner.AgentProcess`. The agent's stdout goes
straight to the caller's callback from ``data_received`` (no intermediate queue: the
ACP layer's sans-IO decoder eats it synchronously, which is what keeps 50,000 updates/s
cheap); output that arrives before the caller installed its handler is held and handed
over once. stderr is always drained into an 8 KiB tail. Flowing output is logged and
stamped on the lease at most every ``OUTPUT_HEARTBEAT_S``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Callable

from tether.supervise.pipes import PipeReader, PipeWriter
from tether.supervise.run_lease import RunLease
from tether.supervise.run_state import RunLifecycle

__all__ = ["OUTPUT_HEARTBEAT_S", "STDERR_TAIL_BYTES", "RunIO"]

STDERR_TAIL_BYTES = 8 * 1024
OUTPUT_HEARTBEAT_S = 30.0  # how often flowing output is logged and stamped on the lease


class RunIO:
    """The agent's stdin, stdout and stderr tail (see the module docstring)."""

    def __init__(self, lifecycle: RunLifecycle, lease: RunLease) -> None:
        self._lifecycle = lifecycle
        self._lease = lease
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
        self._pty_master: int | None = None
        self._transports: list[asyncio.BaseTransport] = []
        self._next_heartbeat = 0.0
        self.last_output_at: float | None = None

    # --- the caller's side ----------------------------------------------------------

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

    # --- attaching and closing ------------------------------------------------------

    async def attach(
        self,
        loop: asyncio.AbstractEventLoop,
        keeper: subprocess.Popen[bytes],
        master_fd: int | None,
        *,
        pty: bool,
    ) -> None:
        """The agent's stdio (the keeper's pipes, or the PTY master) as asyncio transports."""
        if pty:
            assert master_fd is not None
            await self._attach_pty(loop, master_fd)
            return
        assert keeper.stdout
        assert keeper.stdin
        t1, _ = await loop.connect_read_pipe(
            lambda: PipeReader(self._stdout_data, self._stdout_eof), keeper.stdout
        )
        self._transports.append(t1)
        if keeper.stderr is not None:  # None: merged into stdout
            t2, _ = await loop.connect_read_pipe(
                lambda: PipeReader(self._stderr_data, lambda: None), keeper.stderr
            )
            self._transports.append(t2)
        writer_proto = PipeWriter()
        self._stdin_proto = writer_proto
        t3, _ = await loop.connect_write_pipe(lambda: writer_proto, keeper.stdin)
        # A write transport, whatever its class: uvloop's are not asyncio's subclasses.
        self._stdin = t3
        self._transports.append(t3)

    async def _attach_pty(self, loop: asyncio.AbstractEventLoop, master_fd: int) -> None:
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
        self._stdin = tw
        self._transports += [t, tw]
        self._pty_master = master_fd

    def close(self) -> None:
        """Close every transport (the finalizer's step; the pipes' fds go with them)."""
        for t in self._transports:
            t.close()

    def wall_last_output(self) -> float | None:
        """The last output's wall-clock time, or None if there was none."""
        if self.last_output_at is None:
            return None
        return time.time() - (time.monotonic() - self.last_output_at)

    # --- I/O callbacks (event loop thread) ------------------------------------------

    def _output_heartbeat(self, now: float) -> None:
        """At most every OUTPUT_HEARTBEAT_S: log that output flows and stamp the lease.

        Per-chunk bookkeeping would cost the hot path; one line and one row update per
        interval is what an operator (and a stale-run investigation) needs.
        """
        self._next_heartbeat = now + OUTPUT_HEARTBEAT_S
        wall = time.time()
        self._lease.log("output_heartbeat", reason="output", stderr_bytes=self.stderr_bytes)
        self._lease.stamp_output(wall)

    def _stdout_data(self, data: bytes) -> None:
        now = time.monotonic()
        if not self._lifecycle.deliver_output(now):
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
