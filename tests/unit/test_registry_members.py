"""Recorded run members (schema v7): the migration, the record, the marks, the hint."""

from __future__ import annotations

import os
import sqlite3

import pytest

from tether import _os, paths
from tether._os._fake import FakeProcessTable
from tether.policy import access
from tether.state.registry import Registry
from tether.state.schema import MIGRATIONS
from tether.supervise.members import MemberScan


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


def test_the_owners_scan_records_keeper_descendants_and_drops_the_dead() -> None:
    """Each pass records new descendants of each live run's keeper; one that died is
    forgotten on the next pass, one that left the tree alive stays recorded."""
    table = FakeProcessTable()
    table.add(10, starttime=100)  # the owner
    table.add(11, ppid=10, starttime=110)  # the keeper
    table.add(12, ppid=11, starttime=120)  # the agent
    table.add(13, ppid=12, starttime=130)  # a child that will die
    table.add(14, ppid=12, starttime=140)  # a daemon that will move away
    scan = MemberScan("s", table)
    with Registry() as reg:
        assert scan.scan(reg, [("l", 11)]) == 3
        assert scan.scan(reg, [("l", 11)]) == 0  # nothing new
        table.remove(13)
        table.reuse(14, ppid=1, starttime=140)  # its keeper died: re-parented, alive
        scan.scan(reg, [("l", 11)])
        assert {m.pid for m in reg.members(lease_id="l")} == {12, 14}
        found = reg.member_in(table.boot, [(14, 140)])
        assert found is not None
        assert (found.session_key, found.how) == ("s", "scan")
