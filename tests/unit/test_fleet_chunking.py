"""How the shipper cuts committed entries into chunks (pure)."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="tether.fleet needs the fleet extra")

from tether.fleet.shipper import chunk_lines


def rows(first: int, count: int, size: int = 9) -> list[tuple[int, bytes]]:
    return [(s, b"x" * size) for s in range(first, first + count)]


def test_chunks_are_bounded_by_entries_and_bytes() -> None:
    out = chunk_lines(rows(1, 25), max_entries=10, max_bytes=1 << 20)
    assert [(c.first_seq, c.last_seq, c.entries) for c in out] == [
        (1, 10, 10),
        (11, 20, 10),
        (21, 25, 5),
    ]
    by_bytes = chunk_lines(rows(1, 10, size=9), max_entries=100, max_bytes=30)
    assert [c.entries for c in by_bytes] == [3, 3, 3, 1]
    assert all(len(c.data) <= 30 for c in by_bytes)


def test_a_line_larger_than_the_byte_bound_is_a_chunk_of_its_own() -> None:
    out = chunk_lines([(1, b"a"), (2, b"b" * 100), (3, b"c")], max_entries=10, max_bytes=20)
    assert [(c.first_seq, c.last_seq) for c in out] == [(1, 1), (2, 2), (3, 3)]


def test_lines_are_kept_whole_and_in_order_across_holes() -> None:
    src = [(1, b"one"), (2, b"two"), (1048577, b"after the hole")]
    (chunk,) = chunk_lines(src, max_entries=10, max_bytes=1 << 20)
    assert chunk.data == b"one\ntwo\nafter the hole\n"
    assert (chunk.first_seq, chunk.last_seq, chunk.entries) == (1, 1048577, 3)
    assert chunk_lines([], max_entries=10, max_bytes=10) == []
