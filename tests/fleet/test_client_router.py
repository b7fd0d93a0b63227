"""The library against a fleet router (``tether.Client(url=router)``): a session placed
on a host, a turn with a question answered by a callback, history, a watcher, close --
through the router's relay, with the user's token (issue 25 item 4)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import tether
from tests.fleet.test_fleet_e2e import USER_TOKEN, Processes, procs
from tether.errors import HostUnavailable, NoSession, PermissionDenied

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = [
    pytest.mark.fleet,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(240),
]
__all__ = ["procs"]  # the fixture, imported for pytest


def test_the_library_through_a_router(procs: Processes, project_dir: Path) -> None:
    """Every call reaches the session's host through the router and answers as a
    gateway's would; the router's own refusals are the tree's classes."""
    procs.host("h1")
    url = procs.router().url

    async def decide(question: tether.Question) -> str:
        return "allow"

    async def main() -> None:
        async with tether.Client(url=url, token="wrong-token-for-router") as bad:
            with pytest.raises(PermissionDenied):
                await bad.sessions()
        async with tether.Client(url=url, token=USER_TOKEN) as client:
            with pytest.raises(NoSession):
                await tether.Session(client, "e" * 64, "", "mock", "/").history()
            session = await client.ensure_session("mock", cwd=project_dir, name="r")
            seen: list[tether.Event] = []

            async def follow() -> None:
                async for event in session.watch(from_seq=1):
                    seen.append(event)

            watcher = asyncio.ensure_future(follow())
            events = [e async for e in session.prompt("tool edit x", on_question=decide)]
            texts = [e.text for e in events if isinstance(e, tether.AgentMessageChunk)]
            assert texts == ["permission: allowed"]
            assert any(isinstance(e, tether.PermissionRequested) for e in events)
            assert [t["preview"] for t in await session.history()] == ["tool edit x"]
            (listed,) = await client.sessions()
            assert (listed["key"], listed["name"]) == (session.key, "r")
            assert (await session.close())["survivors"] == []
            await asyncio.wait_for(watcher, 60)
            assert isinstance(seen[-1], tether.SessionEnded)
            assert [e.seq for e in seen] == list(range(1, len(seen) + 1))

    asyncio.run(main())


def test_a_watch_through_a_router_ends_host_lost_when_its_host_dies(
    procs: Processes, project_dir: Path
) -> None:
    """The router ends an open stream with ``host_lost`` when the session's host dies;
    the library raises the retryable HostUnavailable (HOST_LOST) naming what is durable,
    never reconnecting forever nor ending as if the session had ended."""
    host = procs.host("h1")
    url = procs.router().url

    async def main() -> None:
        async with tether.Client(url=url, token=USER_TOKEN) as client:
            session = await client.ensure_session("mock", cwd=project_dir, name="doomed")
            assert [e async for e in session.prompt("echo before")]
            seen: list[tether.Event] = []

            async def follow() -> None:
                async for event in session.watch(from_seq=1):
                    seen.append(event)
                    if isinstance(event, tether.TurnEnded):
                        host.proc.kill()  # the host process we started, by its pid

            with pytest.raises(HostUnavailable) as info:
                await asyncio.wait_for(follow(), 60)
            assert info.value.detail_code == "HOST_LOST"
            assert info.value.retryable
            assert isinstance(info.value.fields.get("durable_seq"), int)
            assert seen

    asyncio.run(main())
