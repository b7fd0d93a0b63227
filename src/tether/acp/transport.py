"""What the ACP driver needs from the agent's end of the wire: the transport interface.

The driver (:class:`tether.acp.connection.AgentConnection`) speaks JSON-RPC over a
byte stream each way; it does not care whether the bytes cross a pipe to a supervised
process or a queue to a scripted fake. This Protocol is the seam, as httpcore's
``NetworkBackend`` is: production wraps an :class:`~tether.supervise.runner.AgentProcess`
(``tether.live_agent.ProcessTransport``), tests use
:class:`tether.acp.in_memory.MemoryTransport`, and the driver imports neither.

The contract, in the order a connection uses it:

* ``set_receiver(on_data, on_eof)`` -- route the agent's stdout to the driver. Called
  once, right after the connection is built; bytes that arrived earlier are delivered
  at once, in order. Both callbacks are called synchronously on the event loop; they
  never raise (the driver isolates its own observers).
* ``write(data)`` -- bytes to the agent's stdin. Never blocks and never raises: a
  closed stdin swallows the bytes (the agent is going away; its EOF tells us so).
* ``close_write()`` -- EOF on the agent's stdin. Idempotent.
* ``exit_status()`` -- ``None`` while the agent runs, else ``(exit code, signal)``.
* ``wait_exited()`` -- wait for that status. Cancelling the wait cancels only the wait.
* ``is_alive()`` -- a liveness probe (the process exists and is no zombie), used
  between liveness intervals of a long turn.
* ``stderr_tail()`` -- the last bytes the agent wrote to stderr, for error messages.
* ``label`` -- what logs call this agent run (the lease id in production).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

ExitStatus = tuple[int | None, int | None]  # (exit code, signal); either may be None


class AgentTransport(Protocol):
    """The agent end of an ACP connection (see the module docstring for the contract)."""

    @property
    def label(self) -> str: ...

    def set_receiver(self, on_data: Callable[[bytes], None], on_eof: Callable[[], None]) -> None:
        """Route the agent's output (and its EOF) to the driver, synchronously."""

    def write(self, data: bytes) -> None:
        """Send bytes to the agent; a no-op once its input is closed."""

    def close_write(self) -> None:
        """Close the agent's input (EOF). Idempotent."""

    def exit_status(self) -> ExitStatus | None:
        """``(exit code, signal)`` once the agent has exited, else None."""

    async def wait_exited(self) -> ExitStatus:
        """Wait for the agent to exit. Cancellation: only the wait is cancelled."""
        ...

    def is_alive(self) -> bool:
        """Whether the agent process still runs (exists and is not a zombie)."""
        ...

    def stderr_tail(self) -> str:
        """The last bytes the agent wrote to stderr, decoded leniently."""
        ...
