"""The one bounded IPC line reader: any chunking gives the same lines; over the bound, an error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import FrameTooLarge, RemoteProtocolError
from tether.ipc.lines import LineReader


def drain(reader: LineReader) -> list[bytes]:
    out = []
    while (line := reader.next_line()) is not None:
        out.append(line)
    return out


def test_walkthrough_lines_across_chunks_and_eof() -> None:
    """Lines split over chunks come out whole; an unterminated rest at EOF is dropped."""
    r = LineReader(max_bytes=16)
    r.feed(b"ab")
    assert (drain(r), r.buffered, r.at_eof, r.truncated) == ([], 2, False, 0)
    r.feed(b"c\nde\n\nfg")
    assert (drain(r), r.buffered, r.at_eof, r.truncated) == ([b"abc", b"de", b""], 2, False, 0)
    r.feed(b"")
    assert (drain(r), r.buffered, r.at_eof, r.truncated) == ([], 0, True, 2)
    assert r.next_line() is None


def test_oversized_line_is_refused_before_its_end_and_names_the_limit() -> None:
    """A line over the bound raises FrameTooLarge (a RemoteProtocolError) with the limit."""
    r = LineReader(max_bytes=8, what="request frame")
    r.feed(b"ok\n")
    assert r.next_line() == b"ok"
    r.feed(b"x" * 9)  # no newline yet: already too long
    with pytest.raises(FrameTooLarge) as info:
        r.next_line()
    assert isinstance(info.value, RemoteProtocolError)
    assert info.value.fields == {"limit": 8}
    assert "limit of 8 bytes" in str(info.value)
    assert r.buffered == 0  # nothing kept
    r.feed(b"\nmore\n")  # broken for good: drop the connection
    with pytest.raises(FrameTooLarge):
        r.next_line()


def test_terminated_line_over_the_bound_is_refused() -> None:
    """A too-long line that arrives whole (newline included) is refused too."""
    r = LineReader(max_bytes=4)
    r.feed(b"12345\n")
    with pytest.raises(FrameTooLarge, match="of 5 bytes"):
        r.next_line()


def test_line_of_exactly_the_bound_is_accepted() -> None:
    """The bound is inclusive and does not count the newline."""
    r = LineReader(max_bytes=4)
    r.feed(b"1234")
    assert r.next_line() is None
    r.feed(b"\n")
    assert r.next_line() == b"1234"


@given(
    st.lists(st.binary(max_size=12).filter(lambda b: b"\n" not in b), max_size=8),
    st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=20),
)
def test_any_chunking_yields_the_same_lines(lines: list[bytes], cuts: list[int]) -> None:
    """Feeding the same bytes in any chunks gives the lines in order, or FrameTooLarge."""
    data = b"".join(line + b"\n" for line in lines)
    r = LineReader(max_bytes=10)
    got: list[bytes] = []
    pos, i = 0, 0
    try:
        while pos < len(data):
            step = cuts[i % len(cuts)]
            r.feed(data[pos : pos + step])
            pos += step
            i += 1
            got.extend(drain(r))
        r.feed(b"")
        got.extend(drain(r))
        assert r.truncated == 0  # every line was terminated
    except FrameTooLarge:
        assert any(len(line) > 10 for line in lines)
        return
    assert got == lines
    assert r.buffered == 0
