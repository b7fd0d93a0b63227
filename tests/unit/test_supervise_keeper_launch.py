"""launch_keeper's failure paths: the real cause surfaces as SpawnError, nothing is left open."""

from __future__ import annotations

import os
import termios
from pathlib import Path

import pytest

from tether.errors import SpawnError
from tether.supervise import keeper_launch
from tether.supervise.run_types import SpawnSpec


def _open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")


def test_a_failing_pty_open_raises_spawn_error_not_key_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The PTY cannot be opened: launch_keeper raises SpawnError naming the cause (the
    cleanup used to raise a KeyError over it) and closes both ends of the control socket."""

    def no_pty() -> tuple[int, int]:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(keeper_launch, "_open_pty", no_pty)
    before = _open_fds()
    spec = SpawnSpec(argv=["true"], cwd=str(tmp_path), pty=True)
    with pytest.raises(SpawnError, match="Too many open files"):
        keeper_launch.launch_keeper(spec, ["true"], lease_id="L1", instance_id="I1", cgroup=None)
    assert _open_fds() <= before


def test_a_pty_whose_modes_cannot_be_set_is_closed_and_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """tcgetattr fails on the new PTY (termios.error is no OSError): both PTY ends are
    closed and the failure is a SpawnError, not a stray termios.error."""

    def broken(fd: int) -> list[object]:
        raise termios.error(25, "Inappropriate ioctl for device")

    monkeypatch.setattr(termios, "tcgetattr", broken)
    before = _open_fds()
    spec = SpawnSpec(argv=["true"], cwd=str(tmp_path), pty=True)
    with pytest.raises(SpawnError, match="PTY"):
        keeper_launch.launch_keeper(spec, ["true"], lease_id="L1", instance_id="I1", cgroup=None)
    assert _open_fds() <= before
