"""The owner's watch on its state database's files (issue 21 item 6): the pure verdict,
and a snapshot of real files removed, replaced, truncated, or losing their WAL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tether.owner.state_watch import MIN_DB_BYTES, Files, lost_reason, remember, snapshot

SEEN = Files(db=(1, 10), db_size_ok=True, wal=(1, 11))


@pytest.mark.parametrize(
    ("now", "why"),
    [
        pytest.param(SEEN, None, id="unchanged"),
        pytest.param(SEEN._replace(wal=(1, 11)), None, id="wal-same"),
        pytest.param(SEEN._replace(db=None), "was removed", id="removed"),
        pytest.param(SEEN._replace(db=(1, 99)), "replaced", id="replaced"),
        pytest.param(SEEN._replace(db_size_ok=False), "truncated", id="truncated"),
        pytest.param(SEEN._replace(wal=None), "write-ahead log", id="wal-removed"),
        pytest.param(SEEN._replace(wal=(1, 98)), "write-ahead log", id="wal-replaced"),
    ],
)
def test_the_verdict(now: Files, why: str | None) -> None:
    verdict = lost_reason(SEEN, now)
    if why is None:
        assert verdict is None
    else:
        assert verdict is not None
        assert why in verdict


def test_a_wal_not_seen_yet_is_no_loss_and_is_remembered_once_it_appears() -> None:
    before = SEEN._replace(wal=None)
    assert lost_reason(before, before) is None
    assert remember(before, SEEN) == SEEN
    assert remember(SEEN, SEEN._replace(wal=(1, 12))) == SEEN  # the first one counts


def test_snapshots_of_real_files(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    db.write_bytes(b"\0" * MIN_DB_BYTES)
    (tmp_path / "state.db-wal").write_bytes(b"wal")
    seen = snapshot(str(db))
    assert seen.db_size_ok
    assert seen.wal is not None
    assert lost_reason(seen, snapshot(str(db))) is None
    os.truncate(db, 0)
    assert "truncated" in str(lost_reason(seen, snapshot(str(db))))
    db.write_bytes(b"\0" * MIN_DB_BYTES)
    (tmp_path / "state.db-wal").unlink()
    assert "write-ahead log" in str(lost_reason(seen, snapshot(str(db))))
    (tmp_path / "other").write_bytes(b"\0" * MIN_DB_BYTES)
    os.replace(tmp_path / "other", db)
    assert "replaced" in str(lost_reason(seen, snapshot(str(db))))
    db.unlink()
    assert lost_reason(seen, snapshot(str(db))) == "was removed"


def test_one_thread_looks_for_every_owner_and_tells_each_once(tmp_path: Path) -> None:
    """A session host's owners share one watch: each is told once when its database goes
    (one look per database a pass), an owner that stopped is told nothing, and each
    look also looks at each owner's own files."""
    import threading
    import time

    from tether.owner.state_watch import StateWatch

    db = tmp_path / "state.db"
    db.write_bytes(b"\0" * 4096)
    told: dict[str, list[str]] = {"a": [], "b": [], "c": []}
    looks = {"a": 0, "b": 0, "c": 0}
    done = threading.Event()

    def on_lost(name: str) -> Any:
        def lost(why: str) -> None:
            told[name].append(why)
            if told["a"] and told["b"]:
                done.set()

        return lost

    def each(name: str) -> Any:
        def look() -> None:
            looks[name] += 1

        return look

    watch = StateWatch(interval=0.01)
    watched = {n: watch.add(str(db), on_lost(n), each(n)) for n in told}
    deadline = time.monotonic() + 5
    while min(looks.values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert min(looks.values()) >= 2
    watched["c"].stop()
    db.unlink()
    assert done.wait(5)
    time.sleep(0.05)  # later passes tell nobody again
    assert [len(told[n]) for n in "abc"] == [1, 1, 0]
    assert "was removed" in told["a"][0]
