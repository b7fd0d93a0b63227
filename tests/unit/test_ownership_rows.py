"""Ownership rows: the appended migration, recording on create, the forest and close order."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tether import operations
from tether.policy import ownership
from tether.state import registry, schema
from tether.state.registry import Registry


def _new(reg: Registry, key: str, label: str = "mock", **owner: object) -> registry.Session:
    session, _created = reg.upsert_session(
        key=key, name=key, agent_command=["x"], agent_label=label, cwd="/p", owner=owner
    )
    return session


def test_old_rows_migrate_operator_owned(tmp_path: Path) -> None:
    """A database written before ownership existed opens, and its rows are operator-owned."""
    path = str(tmp_path / "old.db")
    db = sqlite3.connect(path)
    db.executescript(schema.MIGRATIONS[0])
    db.execute("PRAGMA user_version = 1")
    db.execute(
        "INSERT INTO sessions (key, name, agent_command, agent_label, cwd, state, created_at,"
        " updated_at) VALUES ('k', '', '[\"a\"]', 'codex', '/p', 'open', 1.0, 1.0)"
    )
    db.commit()
    db.close()
    with Registry(path) as reg:
        session = reg.session("k")
        assert session is not None
        assert ownership.ownership_json(session, reg.instance_id) == {
            "agentId": "codex",
            "ownerSessionKey": None,
            "spawnedBy": None,
            "parentSessionKey": None,
            "instanceId": reg.instance_id,
            "createdAt": 1.0,
            "sandboxed": False,
        }
        assert ownership.parent_of(session) is None


def test_ownership_recorded_on_create_and_reopen_not_on_reuse() -> None:
    with Registry() as reg:
        _new(reg, "parent")
        child = _new(reg, "child", "codex", spawned_by="parent", parent_session_key="parent")
        assert (child.agent_id, child.spawned_by, child.parent_session_key) == (
            "codex",
            "parent",
            "parent",
        )
        again = _new(reg, "child", "codex", spawned_by="intruder")
        assert again.spawned_by == "parent"  # an open session keeps its owner
        reg.update_session("child", state="closed")
        reopened = _new(reg, "child", "codex", spawned_by="other", sandboxed=True)
        assert (reopened.spawned_by, reopened.sandboxed) == ("other", True)
        assert [s.key for s in reg.children("other")] == ["child"]


def test_tree_and_close_order() -> None:
    with Registry() as reg:
        _new(reg, "root")
        _new(reg, "a", parent_session_key="root")
        _new(reg, "a1", spawned_by="a")
        _new(reg, "b", owner_session_key="root")
        _new(reg, "lone")
        rows = reg.sessions()
        lines = ownership.tree_lines([operations.describe(s, reg.instance_id) for s in rows])
        assert [line.split(" [")[0] for line in lines] == [
            "root",
            "├── a",
            "│   └── a1",
            "└── b",
            "lone",
        ]
        assert ownership.close_order("root", rows) == ["a1", "a", "b"]
        reg.update_session("b", state="closed")
        assert ownership.close_order("root", reg.sessions()) == ["a1", "a"]


def test_close_order_survives_a_cycle() -> None:
    with Registry() as reg:
        _new(reg, "x", spawned_by="y")
        _new(reg, "y", spawned_by="x")
        rows = reg.sessions()
        assert ownership.close_order("x", rows) == ["y"]
        described = [operations.describe(s, reg.instance_id) for s in rows]
        assert len(ownership.tree_lines(described)) == 2


def test_descends_from_walks_the_lineage() -> None:
    with Registry() as reg:
        _new(reg, "root")
        _new(reg, "kid", spawned_by="root", parent_session_key="root")
        grand = _new(reg, "grand", spawned_by="kid", parent_session_key="kid")
        stranger = _new(reg, "stranger")
        assert ownership.descends_from(grand, "root", reg.session)
        assert ownership.descends_from(grand, "kid", reg.session)
        assert not ownership.descends_from(grand, "grand", reg.session)
        assert not ownership.descends_from(stranger, "root", reg.session)


def test_descends_from_cuts_cycles() -> None:
    """Hand-edited rows that point at each other end the walk: no hang, no false yes."""
    with Registry() as reg:
        a = _new(reg, "a", parent_session_key="b")
        _new(reg, "b", parent_session_key="a")
        assert not ownership.descends_from(a, "elsewhere", reg.session)
