"""The gateway's main loop (``tether.serve.serving.Server``): uvicorn's ticks ten times a
second to look at ``should_exit``; ours does its once-a-second chores (the Date header)
and is woken at once by whoever asks it to exit -- an idle gateway stays asleep."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import uvicorn

from tether.serve import serving


class Gateway:
    loop: Any = None

    def stop(self) -> None:
        pass


def _server() -> tuple[serving.Server, list[int]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    release = serving.Release(sock, None, lambda: None)
    sock.close()  # never bound: the loop under test serves nothing

    async def app(scope: Any, receive: Any, send: Any) -> None:  # never called
        raise AssertionError

    server = serving.Server(uvicorn.Config(app, lifespan="off"), Gateway(), release)
    ticks: list[int] = []
    on_tick = server.on_tick

    async def counted(counter: int) -> bool:
        ticks.append(counter)
        return await on_tick(counter)

    server.on_tick = counted  # type: ignore[method-assign]
    return server, ticks


def test_an_idle_main_loop_wakes_once_a_second_with_its_chores_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(serving, "TICK_S", 0.1, raising=False)  # ten of ours in a second

    async def main() -> list[int]:
        server, ticks = _server()
        asyncio.get_running_loop().call_later(1.05, setattr, server, "should_exit", True)
        server.server_state.default_headers = []
        await server.main_loop()
        assert server.server_state.default_headers[0][0] == b"date"
        return ticks

    ticks = asyncio.run(main())
    # uvicorn's own loop ticks every 0.1 s at TICK_S's place, its chores every tenth:
    # ours ticks once per TICK_S, each tick its chores (a counter that is a multiple of 10).
    assert 8 <= len(ticks) <= 13
    assert all(counter % 10 == 0 for counter in ticks)


def test_asking_to_exit_wakes_the_main_loop_at_once() -> None:
    """A tick is a second long; the exit (a signal's handler, the fleet drainer) is
    seen in the same loop pass it was asked for, not at the next tick."""

    async def main() -> list[int]:
        server, ticks = _server()
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, setattr, server, "should_exit", True)
        await asyncio.wait_for(server.main_loop(), 0.9)  # < TICK_S: woken, not ticked
        return ticks

    assert asyncio.run(main()) == [0, 10]
    assert getattr(serving, "TICK_S", None) == 1.0


def test_an_exit_asked_before_the_loop_waits_is_not_missed() -> None:
    async def main() -> list[int]:
        server, ticks = _server()
        server.should_exit = True
        await asyncio.wait_for(server.main_loop(), 0.9)
        return ticks

    assert asyncio.run(main()) == [0]
