"""The running server of ``tether serve``: uvicorn with our signal handling, and what is
released when it stops (the listening socket, a Unix socket file still ours, the owner
fork server). Imported only once the serve extra is known to be installed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from tether import _aio


class Release:
    """What a stopping server gives back; ``__call__`` may run more than once."""

    def __init__(self, sock: socket.socket, unix_path: str | None, dump: Callable[[], None]):
        self.sock = sock
        self.unix_path = unix_path
        self.ours = os.stat(unix_path) if unix_path else None
        self.dump_profile = dump
        # The owner launcher started with the gateway (the fork server, or the session
        # hosts' pool), and how to stop it.
        self.launcher: Any = None
        self.stop_launcher: Callable[[Any], None] = lambda _launcher: None

    def __call__(self) -> None:
        """Close the listening socket; remove a Unix socket file if it is still ours;
        stop the owner launcher (the fork server ends; session hosts are offered no more)."""
        self.dump_profile()
        self.sock.close()
        if self.launcher is not None:
            self.stop_launcher(self.launcher)
        if self.unix_path is not None and self.ours is not None:
            with contextlib.suppress(OSError):
                now = os.lstat(self.unix_path)
                if (now.st_dev, now.st_ino) == (self.ours.st_dev, self.ours.st_ino):
                    os.unlink(self.unix_path)


TICK_S = 1.0  # uvicorn's per-second chores (the Date header): its own loop ticks 10 times


class Server(uvicorn.Server):
    """uvicorn, releasing before the signal that stopped it is raised again, ending the
    gateway's streams at once, and handing a fleet host's SIGTERM to its drainer; its
    main loop wakes once a second, or at once when asked to exit."""

    def __init__(self, config: uvicorn.Config, gateway: Any, release: Release) -> None:
        self._exit_wake: asyncio.Future[None] | None = None
        super().__init__(config)
        self.gateway = gateway
        self.release = release
        self.drainer: Any = None

    # uvicorn's main loop polls ``should_exit`` ten times a second (``asyncio.sleep(0.1)``):
    # an idle gateway woke 10 times a second, ~1.7 ms of CPU a second, and each prompt
    # of a session prompted now and then found its caches cold. Ours sleeps through its
    # once-a-second chores and is woken by whoever sets ``should_exit`` (a signal, the
    # fleet drainer).

    @property
    def should_exit(self) -> bool:
        return bool(self.__dict__.get("_should_exit", False))

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self.__dict__["_should_exit"] = value
        wake = self._exit_wake
        if value and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                wake.get_loop().call_soon_threadsafe(_aio.resolve, wake)

    async def main_loop(self) -> None:
        loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000  # on_tick's chores run when it is a multiple of 10
            wake = self._exit_wake = loop.create_future()
            tick = loop.call_later(TICK_S, _aio.resolve, wake)
            if not self.should_exit:
                await wake
            tick.cancel()
            self._exit_wake = None
            should_exit = await self.on_tick(counter)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # When this context ends uvicorn raises again the signal that stopped it,
        # and the process dies of it: what must happen before that happens here.
        with super().capture_signals():
            try:
                yield
            finally:
                self.release()

    def handle_exit(self, sig: int, frame: Any) -> None:
        drainer = self.drainer
        if drainer is not None and sig == signal.SIGTERM:
            # A fleet host drains (tether.fleet.drain): the server exits once done.
            # Begun from the loop, never from this handler: a second SIGTERM landing
            # inside the first request must not re-enter it.
            loop = self.gateway.loop
            if loop is None:
                drainer.request()  # (not serving yet)
            else:
                loop.call_soon_threadsafe(drainer.request)
            return
        # Streams end at once: a server waiting for open SSE connections to finish
        # on their own would wait forever.
        loop = self.gateway.loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.gateway.stop)
        super().handle_exit(sig, frame)
