"""Reading ``/proc/locks`` for the state database's write-lock holders (a pure parse)."""

from __future__ import annotations

from tether.state.lock_holders import write_holders

DB = (0x00, 0x2F, 5678)
SHM = (0x00, 0x2F, 5679)

LOCKS = """\
1: POSIX  ADVISORY  READ 700 00:2f:5679 128 128
2: POSIX  ADVISORY  WRITE 701 00:2f:5679 120 120
2: -> POSIX  ADVISORY  WRITE 702 00:2f:5679 120 120
3: OFDLCK ADVISORY  WRITE -1 00:2f:5679 0 EOF
4: POSIX  ADVISORY  WRITE 703 08:01:5679 120 120
5: FLOCK  ADVISORY  WRITE 704 00:2f:5678 0 EOF
6: POSIX  ADVISORY  WRITE 705 00:2f:9999 0 EOF
7: POSIX  ADVISORY  WRITE 701 00:2f:5678 0 0
8: POSIX  ADVISORY  WRITE 706 00:2f:5679 121 121
9: LEASE  ACTIVE    WRITE 707 00:2f:5678 0 EOF
garbage line
10: POSIX  ADVISORY  WRITE notapid 00:2f:5678 0 EOF
"""


def test_only_holders_of_write_locks_on_our_files_are_named_once() -> None:
    """Readers (700), waiters (``->``, 702), open-file-description locks (pid -1),
    another device's same inode (703), other files (705), leases and garbage are not
    holders; a holder of two locks is named once."""
    assert write_holders(LOCKS, [DB, SHM], exclude=0) == [701, 704, 706]


def test_the_asking_process_never_names_itself() -> None:
    assert write_holders(LOCKS, [DB, SHM], exclude=701) == [704, 706]


def test_nothing_listed_is_nobody() -> None:
    assert write_holders("", [DB], exclude=0) == []
    assert write_holders(LOCKS, [], exclude=0) == []
