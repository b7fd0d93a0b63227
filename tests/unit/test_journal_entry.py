"""The journal's pure parts: entry lines, cursors, retention arithmetic, durations."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.state.journal.entry import (
    JournalStats,
    Retention,
    acp_body,
    age_cutoff,
    body_of,
    bytes_over,
    entries_over,
    entry_line,
    parse_duration,
    parse_line,
    start_seq,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
payloads = st.dictionaries(
    st.text().filter(lambda k: k not in ("seq", "at", "kind", "requestId")), json_values
)


@given(
    seq=st.integers(min_value=1, max_value=2**53),
    kind=st.text(min_size=1),
    rid=st.none() | st.text(),
    payload=payloads,
)
def test_entry_line_is_the_header_plus_the_payload(
    seq: int, kind: str, rid: str | None, payload: dict[str, object]
) -> None:
    """Splicing the stored body into the header yields exactly header plus payload."""
    line = entry_line(seq, 1763900000.25, kind, rid, body_of(payload))
    decoded = parse_line(line)
    expected = {"seq": seq, "at": 1763900000.25, "kind": kind, **payload}
    if rid is not None:
        expected["requestId"] = rid
    assert decoded == expected
    assert json.loads(line) == expected


def test_acp_body_embeds_the_frame_byte_for_byte() -> None:
    raw = b'{"jsonrpc":"2.0","method":"session/update","params":{"x":"\\u00e9"}}'
    line = entry_line(7, 1.0, "acp", "r-1", acp_body("in", raw))
    assert raw.decode() in line
    assert parse_line(line)["frame"] == json.loads(raw)
    assert parse_line(line)["direction"] == "in"


def test_start_seq_from_tail_and_live() -> None:
    assert start_seq(10, from_seq=3) == 3
    assert start_seq(10, from_seq=0) == 1
    assert start_seq(10, tail=4) == 7
    assert start_seq(10, tail=100) == 1
    assert start_seq(10, tail=0) == 11
    assert start_seq(10) == 11
    assert start_seq(0) == 1


def test_entries_over_keeps_nine_tenths_of_the_bound() -> None:
    """Entries are counted, not seqs: a journal with a hole has fewer entries than seqs."""
    stats = JournalStats(first_seq=1, last_seq=1500, entries=1500, bytes=0, oldest_at=0.0)
    assert entries_over(stats, Retention(max_entries=1000)) == 1500 - 900
    assert entries_over(stats, Retention(max_entries=2000)) == 0
    assert entries_over(stats, Retention(max_entries=0)) == 0
    holed = JournalStats(first_seq=1, last_seq=1 << 21, entries=1500, bytes=0, oldest_at=0.0)
    assert entries_over(holed, Retention(max_entries=1000)) == 600


def test_bytes_over_and_age_cutoff() -> None:
    stats = JournalStats(first_seq=1, last_seq=10, entries=10, bytes=2000, oldest_at=0.0)
    assert bytes_over(stats, Retention(max_bytes=1000)) == 2000 - 900
    assert bytes_over(stats, Retention(max_bytes=5000)) == 0
    assert age_cutoff(1000.0, Retention(max_age_s=10)) == 990.0
    assert age_cutoff(1000.0, Retention(max_age_s=0)) is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("15m", 900.0),
        ("12h", 43200.0),
        ("7d", 604800.0),
        ("2W", 1209600.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "-5m", "nan", "inf", "5x"])
def test_parse_duration_refuses_nonsense(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)
