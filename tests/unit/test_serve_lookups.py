"""The gateway's hot lookups: one registry connection per thread, reused, and reopened
when the database file is replaced."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tether import paths
from tether.errors import NoSession
from tether.serve import lookups
from tether.state.registry import Registry


def test_a_thread_reuses_its_connection_until_the_database_is_replaced(
    tether_home: Path,
) -> None:
    key = "a" * 64
    assert lookups.last_seq(key) == 0
    with lookups.registry() as first:
        pass
    with lookups.registry() as again:
        assert again is first
    with pytest.raises(NoSession):
        lookups.stream_info(key)
    with lookups.registry() as after_miss:
        assert after_miss is first  # an unknown session is no reason to reconnect
    os.unlink(paths.state_db())
    Registry().close()  # a new database file in its place
    with lookups.registry() as fresh:
        assert fresh is not first
    assert lookups.last_seq(key) == 0


def test_threads_do_not_share_a_connection(tether_home: Path) -> None:
    with lookups.registry() as mine:
        pass
    theirs: list[Registry] = []

    def other() -> None:
        with lookups.registry() as reg:
            theirs.append(reg)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert theirs
    assert theirs[0] is not mine
