"""Closing a session closes what it spawned, children first (with a recording closer)."""

from __future__ import annotations

from typing import Any

from tether.errors import NoSession, OwnerUnavailable
from tether.policy.cascade import close_tree
from tether.state.registry import Registry


def _family() -> None:
    with Registry() as reg:
        for key, parent in (("root", None), ("a", "root"), ("a1", "a"), ("b", "root")):
            reg.upsert_session(
                key=key,
                name=key,
                agent_command=["x"],
                agent_label="mock",
                cwd="/p",
                owner={"spawned_by": parent, "parent_session_key": parent},
            )
        reg.upsert_session(key="other", name="o", agent_command=["x"], agent_label="mock", cwd="/p")


def _closer(log: list[str], fail: dict[str, Exception] | None = None) -> Any:
    def close_one(key: str) -> dict[str, Any]:
        log.append(key)
        if fail and key in fail:
            raise fail[key]
        with Registry() as reg:
            reg.update_session(key, state="closed")
        return {"action": "session_closed", "sessionKey": key, "survivors": []}

    return close_one


def test_children_first_then_the_session() -> None:
    _family()
    log: list[str] = []
    result = close_tree("root", _closer(log), cfg={})
    assert log == ["a1", "a", "b", "root"]
    assert [c["sessionKey"] for c in result["closedChildren"]] == ["a1", "a", "b"]
    assert result["survivors"] == []


def test_cascade_can_be_turned_off() -> None:
    _family()
    log: list[str] = []
    close_tree("root", _closer(log), cfg={"sessions": {"closeChildren": False}})
    assert log == ["root"]


def test_a_child_that_fails_is_reported_and_the_rest_go_on() -> None:
    _family()
    log: list[str] = []
    fail = {"a1": OwnerUnavailable("stuck"), "b": NoSession("gone")}
    result = close_tree("root", _closer(log, fail), cfg={})
    assert log == ["a1", "a", "b", "root"]
    assert result["closedChildren"] == [
        {"sessionKey": "a1", "error": "stuck"},
        {"sessionKey": "a", "survivors": []},
    ]


def test_an_unreadable_database_still_closes_the_session_through_its_owner() -> None:
    """Issue 21 item 6: with state.db unreadable (here: not a database), the children
    cannot be looked up, but the session itself is still closed (its owner needs no
    database) and the result says the children are unknown."""
    from tether import paths

    with open(paths.state_db(), "wb") as f:
        f.write(b"this is not an sqlite file at all" * 4)
    log: list[str] = []

    def close_one(key: str) -> dict[str, Any]:
        log.append(key)
        return {"action": "session_closed", "sessionKey": key, "survivors": []}

    result = close_tree("root", close_one)
    assert log == ["root"]
    assert "damaged" in result["childrenUnknown"]
    assert result["closedChildren"] == []


def test_the_family_is_read_without_the_registry_the_same_way() -> None:
    """The close's family links (sqlite3 alone, issue 23) give the registry's close order."""
    from tether.policy import ownership
    from tether.state.family import open_rows

    _family()
    with Registry() as reg:
        reg.upsert_session(
            key="a2",
            name="a2",
            agent_command=["x"],
            agent_label="mock",
            cwd="/p",
            owner={"owner_session_key": "a"},  # a parent by ownership alone
        )
        reg.update_session("b", state="closed")
        expected = ownership.close_order("root", reg.sessions(include_closed=False))
    rows = open_rows()
    assert rows is not None
    assert ownership.close_order("root", rows) == expected == ["a1", "a2", "a"]


def test_the_family_reader_leaves_other_schemas_to_the_registry() -> None:
    """No database, or one at another schema version: None (the registry's way is taken)."""
    import sqlite3

    from tether import paths
    from tether.state.family import open_rows

    assert open_rows() is None  # no database yet: the registry creates it
    _family()
    db = sqlite3.connect(paths.state_db())
    db.execute("PRAGMA user_version = 1")
    db.close()
    assert open_rows() is None
