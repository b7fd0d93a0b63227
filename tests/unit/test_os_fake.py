"""The recording fake process table behaves like the kernel where ownership depends on it."""

from __future__ import annotations

import signal

import pytest

from tether._os import UNREADABLE, ProcessIdentity, ProcUnreadable, identity_of
from tether._os._fake import FakeProcessTable


def test_stale_pidfd_never_reaches_a_reused_pid() -> None:
    """A pidfd opened before a pid was reused raises ProcessLookupError and records nothing."""
    table = FakeProcessTable()
    table.add(500, starttime=10)
    fd = table.pidfd_open(500)
    table.reuse(500, starttime=99)
    with pytest.raises(ProcessLookupError):
        table.pidfd_send_signal(fd, signal.SIGTERM)
    assert table.signals == []
    assert table.signalled == []
    table.close_fd(fd)
    assert table.open_fds == []


def test_pidfd_after_remove_is_esrch() -> None:
    """A pidfd whose process was reaped raises ProcessLookupError, like ESRCH."""
    table = FakeProcessTable()
    table.add(500, starttime=10)
    fd = table.pidfd_open(500)
    table.remove(500)
    with pytest.raises(ProcessLookupError):
        table.pidfd_send_signal(fd, signal.SIGKILL)
    with pytest.raises(ProcessLookupError):
        table.pidfd_open(500)


def test_signals_are_recorded_with_identities() -> None:
    """Delivered pidfd, killpg and cgroup signals are recorded in order."""
    table = FakeProcessTable()
    table.add(500, starttime=10, pgid=500)
    table.cgroups["/cg/x"] = [500]
    fd = table.pidfd_open(500)
    table.pidfd_send_signal(fd, signal.SIGTERM)
    table.killpg(500, signal.SIGTERM)
    table.cgroup_kill("/cg/x")
    assert table.signals == [
        ("pidfd", 500, signal.SIGTERM),
        ("killpg", 500, signal.SIGTERM),
        ("cgroup_kill", "/cg/x", 9),
    ]
    assert table.signalled == [ProcessIdentity("boot-A", 500, 10)]


def test_killpg_of_an_empty_group_is_esrch() -> None:
    """killpg of a group with no live members raises and records nothing."""
    table = FakeProcessTable()
    with pytest.raises(ProcessLookupError):
        table.killpg(4321, signal.SIGKILL)
    assert table.signals == []


def test_unreadable_proc_fails_reads_closed() -> None:
    """With /proc unreadable, stat/pids/children raise ProcUnreadable and environ is UNREADABLE."""
    table = FakeProcessTable()
    table.add(500, starttime=10, env={b"K": b"v"})
    table.proc_readable = False
    with pytest.raises(ProcUnreadable):
        table.stat(500)
    with pytest.raises(ProcUnreadable):
        table.pids()
    with pytest.raises(ProcUnreadable):
        table.children(1)
    with pytest.raises(ProcUnreadable):
        table.cmdline(500)
    assert table.environ_value(500, b"K") is UNREADABLE


def test_environ_value_distinguishes_absent_from_unreadable() -> None:
    """An absent key is None; an unreadable environment is UNREADABLE; a zombie reads empty."""
    table = FakeProcessTable()
    table.add(500, starttime=10, env={b"K": b"v"})
    table.add(501, starttime=10, env={b"K": b"v"}, env_readable=False)
    assert table.environ_value(500, b"K") == b"v"
    assert table.environ_value(500, b"OTHER") is None
    assert table.environ_value(501, b"K") is UNREADABLE
    assert table.environ_value(999, b"K") is UNREADABLE
    table.set_state(500, "Z")
    assert table.environ_value(500, b"K") is None


def test_boot_change_hides_the_old_boots_processes() -> None:
    """After a simulated reboot the old boot's processes are gone from every view."""
    table = FakeProcessTable()
    table.add(500, starttime=10)
    table.boot = "boot-B"
    assert table.stat(500) is None
    assert table.pids() == []
    table.add(600, starttime=3)
    assert identity_of(table, 600) == ProcessIdentity("boot-B", 600, 3)


def test_identity_of_skips_zombies_unless_asked() -> None:
    """identity_of treats a zombie as gone unless include_zombies is set."""
    table = FakeProcessTable()
    table.add(500, starttime=10, state="Z")
    assert identity_of(table, 500) is None
    assert identity_of(table, 500, include_zombies=True) == ProcessIdentity("boot-A", 500, 10)


def test_kill_effect_turns_targets_into_zombies() -> None:
    """With kill_effect, a lethal signal zombifies its target unless the target ignores it."""
    table = FakeProcessTable(kill_effect=True)
    table.add(500, starttime=10)
    table.add(501, starttime=10, ignores=frozenset({signal.SIGTERM}))
    for pid in (500, 501):
        fd = table.pidfd_open(pid)
        table.pidfd_send_signal(fd, signal.SIGTERM)
        table.close_fd(fd)
    assert table.process(500) is not None
    assert table.process(500).state == "Z"  # type: ignore[union-attr]
    assert table.alive() == [ProcessIdentity("boot-A", 501, 10)]


def test_child_handle_reaps_exactly_its_child() -> None:
    """A child handle signals and reaps the process it was opened on, and is closed by the reap."""
    table = FakeProcessTable(kill_effect=True)
    table.add(700, starttime=5)
    handle = table.child_handle(700)
    table.signal_child(handle, signal.SIGKILL)
    assert table.reap_child(handle) == 0
    assert table.reaped == [700]
    assert table.process(700) is None
    assert table.open_fds == []
    # Signalling a reaped child through a stale handle is a quiet no-op.
    table.add(701, starttime=6)
    stale = table.child_handle(701)
    table.remove(701)
    table.signal_child(stale, signal.SIGTERM)
    assert table.reap_child(stale) is None


def test_cgroup_create_and_remove_follow_the_kernel() -> None:
    """A populated cgroup cannot be removed (EBUSY -> False); an empty one can; creation
    fails without delegation."""
    table = FakeProcessTable()
    path = table.cgroup_create("/cg/tether", "L1")
    table.add(800, starttime=9)
    table.cgroups[path].append(800)
    assert table.cgroup_remove(path) is False
    table.remove(800)
    assert table.cgroup_remove(path) is True
    assert table.cgroup_remove(path) is True  # already gone
    table.cgroups_writable = False
    with pytest.raises(PermissionError):
        table.cgroup_create("/cg/tether", "L2")


def test_exclusive_lock_is_held_once() -> None:
    """try_lock_exclusive: the second taker gets None until the holder releases."""
    table = FakeProcessTable()
    fd = table.try_lock_exclusive("/run/s.lock")
    assert fd is not None
    assert table.try_lock_exclusive("/run/s.lock") is None
    table.release_lock(fd)
    assert table.try_lock_exclusive("/run/s.lock") is not None
