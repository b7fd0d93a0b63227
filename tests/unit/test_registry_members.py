"""Recorded run members (schema v7): the migration, the record, the marks, the hint."""

from __future__ import annotations

import os
import sqlite3

import pytest

from tether import _os, access, paths
from tether.registry import Registry
from tether.schema import MIGRATIONS


def _starttime(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    return int(raw[raw.rindex(b")") + 2 :].split()[19])


def test_a_v6_database_migrates_to_run_members() -> None:
    """A state.db of the schema before members opens with an empty, working table."""
    db = sqlite3.connect(paths.state_db(), isolation_level=None)
    for migration in MIGRATIONS[:6]:
        for statement in migration.split(";"):
            if statement.strip():
                db.execute(statement)
    db.execute("PRAGMA user_version = 6")
    db.close()
    with Registry() as reg:
        assert reg._db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert reg.members() == []
        reg.record_members("l1", "s1", "boot", [(10, 100), (11, 110)], "root")
        reg.record_members("l2", "s2", "boot", [(10, 100)], "requester")  # first record wins
        found = reg.member_in("boot", [(12, 120), (11, 110), (10, 100)])
        assert found is not None
        assert (found.pid, found.lease_id, found.session_key) == (11, "l1", "s1")
        assert reg.member_in("other-boot", [(11, 110)]) is None
        assert [m.lease_id for m in reg.members(session_key="s1")] == ["l1", "l1"]
        assert reg.members(lease_id="l2") == []


def test_a_record_leaves_a_mark_the_hint_sees_and_forgetting_removes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stdlib hint (no database) finds a recorded member by its mark file."""
    for name in ("TETHER_SESSION_KEY", "TETHER_LEASE_ID", "TETHER_OWNER_OF"):
        monkeypatch.delenv(name, raising=False)
    me = os.getpid()
    if access.could_be_agent(me):
        pytest.skip("the test run itself sits inside an agent tree")
    with Registry() as reg:
        boot = _os.current().boot_id()
        reg.record_members("l1", "s1", boot, [(me, _starttime(me))], "root")
        assert os.path.exists(os.path.join(paths.members_dir_path(), f"{me}.{_starttime(me)}"))
        assert access.could_be_agent(me)
        reg.forget_members(reg.members(lease_id="l1"))
        assert not access.could_be_agent(me)
