"""The owner's watch on its state database's files (issue 21 item 6): the pure verdict,
and a snapshot of real files removed, replaced, truncated, or losing their WAL."""

from __future__ import annotations

import os
from pathlib import Path

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
