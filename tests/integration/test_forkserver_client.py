"""The owner fork server's handle, driven directly (as the gateway does, through
``owner_launch``'s launcher) with real processes: one caller-side readiness logic for
both launchers, a request the fork server must not serve is exec'd without counting as a
failure, and stopping it leaves nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether import owner_launch
from tether.errors import NoSession
from tether.forkserver.client import ForkServer

pytestmark = pytest.mark.integration


@pytest.fixture
def fork_server(tether_home: Path) -> Iterator[ForkServer]:
    server = ForkServer()
    server.start()
    owner_launch.set_launcher(server.launch)
    try:
        yield server
    finally:
        owner_launch.set_launcher(None)
        server.stop()


def gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_a_forked_owner_says_its_readiness_line_to_the_caller(fork_server: ForkServer) -> None:
    """An owner forked for a session that does not exist answers ``noSession`` on the
    caller's readiness pipe, exactly as an exec'd one: the same NoSession."""
    with pytest.raises(NoSession):
        owner_launch.spawn_owner_daemon("0" * 64)
    assert (fork_server.forks, fork_server.fallbacks) == (1, 0)


def test_another_import_time_environment_is_execd_quietly(fork_server: ForkServer) -> None:
    """A start whose environment differs from the fork server's in what its preloaded
    modules read at import (here a PYTHON* variable) is exec'd, not forked, and is no
    failure: the fork server is kept and forks the next start."""
    with pytest.raises(NoSession):
        owner_launch.spawn_owner_daemon("0" * 64, env={"PYTHONTETHERPROBE": "1"})
    assert (fork_server.forks, fork_server.fallbacks, fork_server.starts) == (0, 0, 1)
    with pytest.raises(NoSession):
        owner_launch.spawn_owner_daemon("0" * 64)
    assert (fork_server.forks, fork_server.fallbacks, fork_server.starts) == (1, 0, 1)


def test_stop_ends_the_fork_server_and_later_starts_exec(fork_server: ForkServer) -> None:
    """Once stopped, the fork server is gone (reaped) and starts are exec'd quietly."""
    pid = fork_server.status()["pid"]
    assert pid is not None
    fork_server.stop()
    assert gone(pid)
    assert fork_server.status()["pid"] is None
    with pytest.raises(NoSession):
        owner_launch.spawn_owner_daemon("0" * 64)
    assert (fork_server.forks, fork_server.fallbacks) == (0, 0)
