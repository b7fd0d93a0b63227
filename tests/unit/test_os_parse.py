"""The platform helpers that need no processes: stat parsing, cgroup mount discovery, probing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether._os import (
    ProcStat,
    cgroup_writable,
    environ_lookup,
    find_cgroup2_mount,
    parse_stat,
)


def _stat_line(comm: bytes, state: bytes = b"S", starttime: int = 4242) -> bytes:
    # Fields 3..22 of proc(5): state ppid pgrp session tty tpgid flags minflt cminflt
    # majflt cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime
    rest = [state, b"1", b"77", b"77", b"0", b"-1", b"4194560"]
    rest += [b"0"] * 12 + [str(starttime).encode()] + [b"9999", b"100"]
    return b"123 (" + comm + b") " + b" ".join(rest) + b"\n"


@pytest.mark.parametrize(
    "comm",
    [
        pytest.param(b"sleep", id="plain"),
        pytest.param(b"we) ird (x", id="paren-space-paren"),
        pytest.param(b"a b c", id="spaces"),
        pytest.param(b") (", id="close-open"),
        pytest.param(b"\xff\xfeodd", id="non-utf8"),
        pytest.param(b"x) S 1 2 3", id="fake-fields-in-comm"),
    ],
)
def test_parse_stat_splits_after_the_last_paren(comm: bytes) -> None:
    """parse_stat keeps comm verbatim and reads the numeric fields after the last ')'."""
    st = parse_stat(123, _stat_line(comm))
    assert st == ProcStat(pid=123, ppid=1, pgid=77, sid=77, state="S", starttime=4242, comm=comm)


def test_parse_stat_reports_zombies() -> None:
    """A 'Z' state parses as a zombie, which supervision treats as not alive."""
    st = parse_stat(123, _stat_line(b"defunct", state=b"Z"))
    assert st.state == "Z"
    assert st.is_zombie


@pytest.mark.parametrize(
    "raw", [b"", b"123 no parens here", b"123 (x) S 1 2"], ids=["empty", "no-comm", "short"]
)
def test_parse_stat_rejects_garbage(raw: bytes) -> None:
    """Bytes that are not a stat line raise ValueError rather than yielding wrong numbers."""
    with pytest.raises(ValueError, match="malformed"):
        parse_stat(123, raw)


def test_find_cgroup2_mount_reads_fstype_not_paths(tmp_path: Path) -> None:
    """The cgroup2 mount is found by fstype, with mountinfo octal escapes decoded."""
    info = tmp_path / "mountinfo"
    info.write_bytes(
        b"22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
        b"30 25 0:26 / /sys/fs/cgroup/memory rw shared:9 - cgroup cgroup rw,memory\n"
        b"41 31 0:38 / /sys/fs/cgroup/my\\040v2 rw,relatime shared:10 - cgroup2 cgroup2 rw\n"
    )
    assert find_cgroup2_mount(str(info)) == "/sys/fs/cgroup/my v2"


def test_find_cgroup2_mount_none_without_cgroup2(tmp_path: Path) -> None:
    """No cgroup2 line (or no file) means None, never an exception."""
    info = tmp_path / "mountinfo"
    info.write_bytes(b"22 1 0:21 / /proc rw - proc proc rw\n")
    assert find_cgroup2_mount(str(info)) is None
    assert find_cgroup2_mount(str(tmp_path / "missing")) is None


def test_find_cgroup2_mount_on_this_host() -> None:
    """On this machine kind the real mountinfo names a cgroup2 mount."""
    mount = find_cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup2 mount on this host")
    assert Path(mount, "cgroup.procs").exists()


def test_cgroup_writable_refuses_a_plain_directory(tmp_path: Path) -> None:
    """A plain writable directory is reported unusable as a cgroup, and cleaned up."""
    mount = tmp_path / "not-a-cgroup"
    mount.mkdir()
    ok, reason = cgroup_writable(str(mount))
    assert not ok
    assert "cgroup.kill" in reason
    assert list(mount.iterdir()) == []


def test_cgroup_writable_never_raises_on_a_missing_mount(tmp_path: Path) -> None:
    """Probing a path that does not exist returns (False, reason) instead of raising."""
    ok, reason = cgroup_writable(str(tmp_path / "nope"))
    assert not ok
    assert reason


def test_cgroup_writable_on_this_host() -> None:
    """Where the cgroup2 mount is writable, the probe says so and leaves nothing behind."""
    mount = find_cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup2 mount on this host")
    before = set(Path(mount).iterdir())
    ok, reason = cgroup_writable(mount)
    if not ok:
        pytest.skip(f"cgroup2 not writable here: {reason}")
    assert set(Path(mount).iterdir()) == before


def _environ_lookup_by_split(raw: bytes, key: bytes) -> bytes | None:
    """The obvious reading of getenv's rule, kept as the reference."""
    for entry in raw.split(b"\0"):
        if entry.startswith(key + b"="):
            return entry[len(key) + 1 :]
    return None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(b"TETHER_RUN=a\0PATH=/bin\0", b"a", id="first-entry"),
        pytest.param(b"PATH=/bin\0TETHER_RUN=b\0", b"b", id="later-entry"),
        pytest.param(b"PATH=/bin\0TETHER_RUN=c", b"c", id="no-final-nul"),
        pytest.param(b"TETHER_RUN=1\0TETHER_RUN=2\0", b"1", id="first-occurrence-wins"),
        pytest.param(b"XTETHER_RUN=x\0", None, id="a-longer-name-is-another-key"),
        pytest.param(b"A=TETHER_RUN=v\0", None, id="inside-a-value-is-not-an-entry"),
        pytest.param(b"TETHER_RUN\0", None, id="no-equals"),
        pytest.param(b"TETHER_RUN=\0", b"", id="empty-value"),
        pytest.param(b"", None, id="empty-block"),
    ],
)
def test_environ_lookup_follows_getenv(raw: bytes, expected: bytes | None) -> None:
    """The marker scan's lookup: whole entry names only, the first occurrence wins."""
    assert environ_lookup(raw, b"TETHER_RUN") == expected
    assert _environ_lookup_by_split(raw, b"TETHER_RUN") == expected


@given(
    entries=st.lists(
        st.one_of(
            st.binary(max_size=12).filter(lambda b: b"\0" not in b),
            st.sampled_from([b"K=v", b"K=", b"KK=w", b"K", b"=K=", b"XK=y"]),
        ),
        max_size=8,
    ),
    trailing_nul=st.booleans(),
)
def test_environ_lookup_agrees_with_the_split_reading(
    entries: list[bytes], trailing_nul: bool
) -> None:
    raw = b"\0".join(entries) + (b"\0" if trailing_nul and entries else b"")
    assert environ_lookup(raw, b"K") == _environ_lookup_by_split(raw, b"K")
