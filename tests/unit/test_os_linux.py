"""The real Linux process table against this very process and a child it starts."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tether import _os
from tether._os import UNREADABLE, ProcessIdentity

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def test_current_is_chosen_once() -> None:
    """current() returns the same Linux table every time."""
    assert _os.current() is _os.current()


def test_own_stat_and_identity() -> None:
    """Our own stat has our pid, ppid, pgid and a starttime that identity_of repeats."""
    table = _os.current()
    st = table.stat(os.getpid())
    assert st is not None
    assert (st.pid, st.ppid, st.pgid, st.sid) == (
        os.getpid(),
        os.getppid(),
        os.getpgid(0),
        os.getsid(0),
    )
    assert not st.is_zombie
    ident = _os.identity_of(table, os.getpid())
    assert ident == ProcessIdentity(table.boot_id(), os.getpid(), st.starttime)
    assert len(table.boot_id()) == 36
    assert table.pid_namespace() is not None
    assert os.getpid() in table.pids()


def test_stat_of_a_missing_pid_is_none() -> None:
    """A pid that does not exist (beyond pid_max) reads as None, not as an error."""
    table = _os.current()
    assert table.stat(2**22 + 7) is None
    assert table.cmdline(2**22 + 7) is None
    assert table.children(2**22 + 7) == []
    with pytest.raises(ProcessLookupError):
        table.pidfd_open(2**22 + 7)


def test_own_environ_value_returns_one_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """environ_value reads one key from the environment as of exec; absent keys are None."""
    table = _os.current()
    path = os.environb.get(b"PATH")
    assert table.environ_value(os.getpid(), b"PATH") == path
    assert table.environ_value(os.getpid(), b"TETHER_SURELY_NOT_SET_XYZ") is None
    assert table.environ_value(2**22 + 7, b"PATH") is UNREADABLE


def test_child_sleep_signalled_through_pidfd() -> None:
    """A spawned sleep shows as our child with its marker, dies by a pidfd SIGKILL and is reaped."""
    table = _os.current()
    env = dict(os.environ, TETHER_LEASE_ID="lease-linux-test")
    child = subprocess.Popen(["sleep", "30"], env=env, start_new_session=True)
    try:
        # Until exec completes the child may still be a python fork: wait for sleep.
        for _ in range(500):
            argv = table.cmdline(child.pid)
            if argv and argv[0].endswith(b"sleep"):
                break
            os.sched_yield()
        assert child.pid in table.children(os.getpid())
        st = table.stat(child.pid)
        assert st is not None
        assert st.ppid == os.getpid()
        assert st.pgid == child.pid
        assert table.environ_value(child.pid, b"TETHER_LEASE_ID") == b"lease-linux-test"
        assert table.cmdline(child.pid) == [b"sleep", b"30"]
        fd = table.pidfd_open(child.pid)
        try:
            table.pidfd_send_signal(fd, signal.SIGKILL)
        finally:
            table.close_fd(fd)
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert table.stat(child.pid) is None or table.stat(child.pid) != st
    finally:
        if child.poll() is None:
            child.kill()  # our own unreaped child: safe to signal by pid
            child.wait(timeout=10)


def test_pidfd_of_a_reaped_child_is_esrch() -> None:
    """Signalling through a pidfd after its process was reaped raises ProcessLookupError."""
    table = _os.current()
    child = subprocess.Popen(["true"])
    fd = table.pidfd_open(child.pid)
    try:
        child.wait(timeout=10)
        with pytest.raises(ProcessLookupError):
            table.pidfd_send_signal(fd, signal.SIGTERM)
    finally:
        table.close_fd(fd)


def test_killpg_refuses_init_and_our_group() -> None:
    """killpg never accepts group 0 or 1, which would hit our own group or init's."""
    table = _os.current()
    for pgid in (0, 1):
        with pytest.raises(ValueError, match="refusing"):
            table.killpg(pgid, 0)


def test_cgroup_reads_of_a_missing_cgroup() -> None:
    """A cgroup path that does not exist has no procs and an unknown populated state."""
    table = _os.current()
    assert table.cgroup_procs("/nonexistent/cgroup") == []
    assert table.cgroup_populated("/nonexistent/cgroup") is None


def test_child_handle_signal_and_reap() -> None:
    """child_handle/signal_child/reap_child on a real child: exact, and the status comes back."""
    table = _os.current()
    child = subprocess.Popen(["sleep", "30"])
    handle = table.child_handle(child.pid)
    table.signal_child(handle, signal.SIGKILL)
    select.select([handle], [], [], 10)
    assert table.reap_child(handle) == signal.SIGKILL
    child.returncode = -signal.SIGKILL  # reaped through the handle; keep Popen quiet


def test_try_lock_exclusive_is_exclusive(tmp_path: Path) -> None:
    """A second exclusive lock on the same file is refused while the first is held."""
    table = _os.current()
    path = str(tmp_path / "s.lock")
    fd = table.try_lock_exclusive(path)
    assert fd is not None
    assert table.try_lock_exclusive(path) is None
    os.close(fd)
    again = table.try_lock_exclusive(path)
    assert again is not None
    os.close(again)
