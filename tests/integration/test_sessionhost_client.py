"""The session hosts' pool, driven directly (as the gateway does, through
``owner_launch``'s launcher) with real processes: one caller-side readiness logic, a
host per environment, a host that leaves when its sessions have, and a pool that
stops without signalling anything."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tether
from tether import owner_launch
from tether.errors import NoSession
from tether.sessionhost.client import HostPool

pytestmark = pytest.mark.integration


@pytest.fixture
def pool(tether_home: Path) -> Iterator[HostPool]:
    hosts = HostPool(4)
    owner_launch.set_launcher(hosts.launch)
    try:
        yield hosts
    finally:
        owner_launch.set_launcher(None)
        hosts.stop()


def no_hosts(pool: HostPool) -> bool:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if pool.status()["hosts"] == []:
            return True
        time.sleep(0.05)
    return False


def test_a_host_says_a_refused_start_to_the_caller_and_leaves(pool: HostPool) -> None:
    """A start for a session that does not exist answers ``noSession`` on the caller's
    readiness pipe, as an exec'd owner does; the host, its only start over, leaves; the
    next start gets a new host."""
    with pytest.raises(NoSession):
        owner_launch.spawn_owner_daemon("0" * 64)
    assert (pool.starts, pool.placed, pool.fallbacks) == (1, 1, 0)
    assert no_hosts(pool)
    with pytest.raises(NoSession):
        owner_launch.spawn_owner_daemon("0" * 64)
    assert (pool.starts, pool.placed, pool.fallbacks) == (2, 2, 0)


def test_sessions_of_one_environment_share_a_host_and_another_gets_its_own(
    pool: HostPool, tether_home: Path, project_dir: Path
) -> None:
    """An owner's environment is its process's: two sessions of one environment share a
    host, a session started with another environment gets a host of its own."""

    async def main() -> dict[str, Any]:
        pids: dict[str, Any] = {}
        async with (
            tether.Client(home=tether_home) as plain,
            tether.Client(home=tether_home, env={"TETHER_PROBE": "1"}) as probed,
        ):
            sessions = [
                await plain.ensure_session("mock", cwd=project_dir, name="a"),
                await plain.ensure_session("mock", cwd=project_dir, name="b"),
                await probed.ensure_session("mock", cwd=project_dir, name="c"),
            ]
            try:
                for session in sessions:
                    assert (await session.run("echo hi"))[1] == "end_turn"
                    pids[session.name] = (await session.status())["ownerPid"]
            finally:
                for session in sessions:
                    report = await session.close()
                    assert report["survivors"] == []
                    assert report["ownerHosted"] is True
        return pids

    pids = asyncio.run(main())
    assert pids["a"] == pids["b"] != pids["c"]
    assert (pool.starts, pool.fallbacks) == (2, 0)
    assert no_hosts(pool)


def test_a_full_host_sends_the_next_start_to_a_new_one(
    tether_home: Path, project_dir: Path
) -> None:
    """One owner per host: the second session's start finds the first host full."""
    pool = HostPool(1)
    owner_launch.set_launcher(pool.launch)

    async def main() -> list[int]:
        async with tether.Client(home=tether_home) as client:
            a = await client.ensure_session("mock", cwd=project_dir, name="a")
            b = await client.ensure_session("mock", cwd=project_dir, name="b")
            try:
                return [(await s.status())["ownerPid"] for s in (a, b)]
            finally:
                for s in (a, b):
                    await s.close()

    try:
        first, second = asyncio.run(main())
        assert first != second
        assert pool.starts == 2
    finally:
        owner_launch.set_launcher(None)
        pool.stop()
    assert no_hosts(pool)
