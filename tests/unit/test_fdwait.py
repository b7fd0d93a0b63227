"""Waits on descriptors numbered past select's FD_SETSIZE (1024): a gateway with a few
hundred sessions holds that many, and a close's wait for its owner's exit raised
``ValueError`` (a 500) when the owner's pidfd got such a number."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tether import _fdwait
from tether.owner_fence import wait_exit

HIGH_FD = 1500  # past FD_SETSIZE (1024)


@pytest.fixture
def high_fd_room() -> Iterator[None]:
    """A descriptor limit that lets us use HIGH_FD (skipped where the hard limit is lower)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= HIGH_FD:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} leaves no room for fd {HIGH_FD}")
    if soft != resource.RLIM_INFINITY and soft <= HIGH_FD:
        resource.setrlimit(resource.RLIMIT_NOFILE, (HIGH_FD + 1, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _moved_high(fd: int) -> int:
    """``fd`` moved to HIGH_FD (the original closed)."""
    with contextlib.suppress(OSError):
        os.fstat(HIGH_FD)
        pytest.skip(f"fd {HIGH_FD} is in use")
    os.dup2(fd, HIGH_FD)
    os.close(fd)
    return HIGH_FD


@pytest.mark.usefixtures("high_fd_room")
def test_wait_exit_sees_a_process_end_through_a_pidfd_numbered_past_1024() -> None:
    """wait_exit on a pidfd numbered 1500 says the process exited (select raised ValueError)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        fd = _moved_high(os.pidfd_open(proc.pid))
        assert wait_exit(fd, 30.0) is True  # closes fd
    finally:
        proc.wait(timeout=30)
    with pytest.raises(OSError):
        os.fstat(HIGH_FD)  # wait_exit closed it


@pytest.mark.usefixtures("high_fd_room")
def test_readable_waits_on_a_pipe_numbered_past_1024() -> None:
    """A pipe's read end numbered 1500: not readable while empty, readable once written."""
    r, w = os.pipe()
    fd = _moved_high(r)
    try:
        assert _fdwait.readable(fd, 0.0) is False
        os.write(w, b"x")
        assert _fdwait.readable(fd, 30.0) is True
    finally:
        os.close(fd)
        os.close(w)


def test_readable_sees_a_closed_peer_and_refuses_a_closed_descriptor() -> None:
    """A write end closed is readable (EOF), as with select; a closed fd raises OSError."""
    r, w = os.pipe()
    os.close(w)
    try:
        assert _fdwait.readable(r, 30.0) is True
    finally:
        os.close(r)
    with pytest.raises(OSError):
        _fdwait.readable(r, 0.0)
