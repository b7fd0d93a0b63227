"""The ACP-over-HTTP event ids: journal cursors, parsed back, and the replay they plan."""

from __future__ import annotations

import pytest

from tether.acp_door.event_ids import Cursors, parse_id


def test_one_session_ids_are_its_seqs_and_parts_show_until_the_entry_is_out() -> None:
    c = Cursors()
    assert c.advance("a", 5, 1, 1)
    assert c.event_id(True, 1) == "5"
    assert c.advance("a", 7, 1, 2)
    assert c.vector() == "7/1"
    assert c.advance("a", 7, 2, 2)
    assert c.vector() == "7"
    assert not c.advance("a", 6, 1, 1)  # a replay of an older entry: the cursor stays
    assert c.event_id(False, 9) == "7~9"


def test_two_sessions_in_the_order_first_relayed() -> None:
    c = Cursors()
    c.advance("a", 3, 1, 1)
    c.advance("b", 10, 1, 1)
    c.advance("a", 4, 1, 1)
    assert c.vector() == "4.10"
    assert parse_id("4.10~3") == [(4, 0), (10, 0)]
    assert parse_id("7/1") == [(7, 1)]
    assert parse_id("~5") == []
    for bad in ("x", "1..2", "-1", "1/x"):
        with pytest.raises(ValueError):
            parse_id(bad)


def test_the_plan_replays_what_the_id_had_not_reached() -> None:
    c = Cursors()
    c.advance("a", 3, 1, 1)
    c.advance("a", 8, 1, 1)
    c.advance("b", 10, 1, 1)
    c.advance("b", 12, 1, 1)
    # "a" up to 3, and "b" not named: b from its first relayed entry (10).
    assert c.plan(parse_id("3")) == [("a", (3, 0), (8, 0)), ("b", (9, 0), (12, 0))]
    assert c.plan(parse_id("8.12")) == []
    assert c.plan(parse_id("0")) == [("a", (2, 0), (8, 0)), ("b", (9, 0), (12, 0))]
    assert c.plan(parse_id("8/1.12")) == [("a", (8, 1), (8, 0))]
