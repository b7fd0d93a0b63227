"""``tether acp``: the ACP front door over this process's stdin and stdout.

Standard output carries nothing but JSON-RPC lines (logs go to stderr). Standard input
is read as it comes; at EOF the client is gone: its running turns are cancelled and its
sessions stay warm (``--close-on-exit`` closes them). SIGTERM, SIGINT and SIGHUP end the
door the same way.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from tether.acp_door.door import AcpDoor, DoorOptions
from tether.ipc import protocol

__all__ = ["door_options", "run_stdio"]

READ_CHUNK = 65536


def door_options(ctx: Any, owner_flags: dict[str, Any]) -> DoorOptions:
    """The door's settings from the CLI context (agent, credentials) and the owner
    settings of the sessions it creates: the config and ``owner_flags`` (the flags of
    ``tether acp``) through the table every door uses (:func:`tether.operations.settings`).
    """
    from tether import operations

    auth = ctx.config.get("auth") or {}
    return DoorOptions(
        agent_label=ctx.agent_label,
        agent_argv=list(ctx.agent_argv),
        agent_scope=ctx.agent_scope,
        owner_options=operations.settings(ctx.config, owner_flags),
        auth_config={str(k): str(v) for k, v in auth.items()} if isinstance(auth, dict) else {},
        close_on_exit=bool(ctx.inv.close_on_exit),
        max_frame_bytes=protocol.prompt_max_bytes(ctx.config) + protocol.ENVELOPE_SLACK,
    )


def run_stdio(ctx: Any, owner_flags: dict[str, Any]) -> int:
    """Serve one ACP client on stdin/stdout until it disconnects; returns the exit code."""
    asyncio.run(serve_stdio(door_options(ctx, owner_flags)))
    return 0


class _Input(asyncio.Protocol):
    def __init__(self) -> None:
        self.chunks: asyncio.Queue[bytes] = asyncio.Queue()

    def data_received(self, data: bytes) -> None:
        self.chunks.put_nowait(data)

    def eof_received(self) -> bool:
        self.chunks.put_nowait(b"")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.chunks.put_nowait(b"")


async def serve_stdio(options: DoorOptions) -> None:
    """Run the door on fd 0 / fd 1 (pipes or sockets; a regular file is read in a thread)."""
    loop = asyncio.get_running_loop()
    stdout = os.fdopen(1, "wb", 0)
    close_out: Callable[[], None]
    try:
        out_transport, _ = await loop.connect_write_pipe(asyncio.Protocol, stdout)
        write: Callable[[bytes], None] = out_transport.write
        close_out = out_transport.close
    except ValueError:  # a regular file on stdout: writes to it do not block; plain writes

        def write(data: bytes) -> None:
            view = memoryview(data)
            while view:
                view = view[os.write(1, view) :]

        def close_out() -> None:
            pass

    door = AcpDoor(write, options)
    stdin = os.fdopen(0, "rb", 0)
    source = _Input()
    try:
        await loop.connect_read_pipe(lambda: source, stdin)

        async def read() -> bytes:
            return await source.chunks.get()

    except ValueError:  # a regular file on stdin: no pipe transport for it

        async def read() -> bytes:
            return await asyncio.to_thread(os.read, 0, READ_CHUNK)

    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await door.serve(read)
    except asyncio.CancelledError:
        pass  # a signal: the door has let go of its sessions (serve's cleanup)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        close_out()
        sys.stdout.flush()
