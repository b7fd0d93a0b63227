"""LineFramer: NDJSON lines out of any chunking, bounded in size."""

from __future__ import annotations

import pytest

from tether.errors import LocalProtocolError
from tether.jsonrpc import EOF, LineFramer, Oversized
from tether.jsonrpc.framing import DEFAULT_MAX_FRAME_BYTES


def drain(framer: LineFramer) -> list[bytes | Oversized]:
    out: list[bytes | Oversized] = []
    while True:
        frame = framer.next_frame()
        if frame is None or frame is EOF:
            return out
        out.append(frame)


def frames_of(chunks: list[bytes], max_frame_bytes: int = 64) -> list[bytes | Oversized]:
    framer = LineFramer(max_frame_bytes)
    out: list[bytes | Oversized] = []
    for chunk in chunks:
        framer.feed(chunk)
        out.extend(drain(framer))
    return out


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        pytest.param([b'{"a":1}\n'], [b'{"a":1}'], id="one-line"),
        pytest.param([b"a\nb\nc\n"], [b"a", b"b", b"c"], id="three-lines-one-chunk"),
        pytest.param([b"ab", b"c\nd", b"e\n"], [b"abc", b"de"], id="split-mid-line"),
        pytest.param([b"a\r\n", b"b\r\n"], [b"a", b"b"], id="crlf"),
        pytest.param([b"a\r", b"\nb\n"], [b"a", b"b"], id="crlf-split-between-cr-and-lf"),
        pytest.param([b"a\r\r\n"], [b"a\r"], id="only-one-cr-stripped"),
        pytest.param([b"\n\n\na\n\r\n \t \nb\n"], [b"a", b"b"], id="blank-and-space-lines"),
        pytest.param([b"a\nfinal", b""], [b"a", b"final"], id="final-line-without-newline"),
        pytest.param([b"final\r", b""], [b"final"], id="final-line-cr-at-eof"),
        pytest.param([b"a\n  ", b""], [b"a"], id="final-blank-at-eof"),
        pytest.param([b""], [], id="empty-stream"),
        pytest.param([b"partial"], [], id="unterminated-without-eof-waits"),
    ],
)
def test_framing_table(chunks: list[bytes], expected: list[bytes]) -> None:
    """Lines come out without terminators, blank lines vanish, and EOF flushes the last line."""
    assert frames_of(chunks) == expected


def test_byte_by_byte_equals_one_chunk() -> None:
    """Feeding a stream one byte at a time yields exactly the frames of feeding it whole."""
    stream = b'{"id":1}\r\n\n{"method":"x"}\nlast'
    whole = frames_of([stream, b""])
    assert frames_of([stream[i : i + 1] for i in range(len(stream))] + [b""]) == whole
    assert whole == [b'{"id":1}', b'{"method":"x"}', b"last"]


def test_need_data_then_eof_forever() -> None:
    """next_frame returns None while waiting, then EOF on every call once the stream ended."""
    framer = LineFramer()
    assert framer.next_frame() is None
    framer.feed(b"")
    assert framer.at_eof
    assert framer.next_frame() is EOF
    assert framer.next_frame() is EOF


def test_feed_after_eof_is_a_local_error() -> None:
    """Feeding data after EOF is a caller bug, but repeating EOF is harmless."""
    framer = LineFramer()
    framer.feed(b"")
    framer.feed(b"")
    with pytest.raises(LocalProtocolError):
        framer.feed(b"x")


def test_max_frame_bytes_must_be_positive() -> None:
    """A zero bound would reject every line, so it is refused up front."""
    with pytest.raises(ValueError):
        LineFramer(0)
    assert LineFramer().max_frame_bytes == DEFAULT_MAX_FRAME_BYTES


def test_line_of_exactly_max_bytes_is_accepted() -> None:
    """The bound is inclusive and does not count the newline."""
    assert frames_of([b"x" * 8 + b"\n"], max_frame_bytes=8) == [b"x" * 8]
    assert frames_of([b"x" * 8, b""], max_frame_bytes=8) == [b"x" * 8]


def test_terminated_oversized_line_then_good_line() -> None:
    """An oversized line that arrives whole is reported once and the next line survives."""
    got = frames_of([b"y" * 300 + b"\nok\n"], max_frame_bytes=16)
    assert got == [Oversized(b"y" * 200, 300), b"ok"]


def test_streamed_oversized_line_reported_once_and_memory_bounded() -> None:
    """A runaway unterminated line is reported at once, discarded chunk by chunk, then resynced."""
    framer = LineFramer(16)
    framer.feed(b"z" * 20)
    assert framer.next_frame() == Oversized(b"z" * 20, 20)
    for _ in range(100):
        framer.feed(b"z" * 1000)
        assert framer.next_frame() is None
        assert framer.buffered == 0
    framer.feed(b"zzz\nnext\n")
    assert drain(framer) == [b"next"]


def test_oversized_line_split_on_newline_boundary() -> None:
    """In discard mode a chunk starting with the newline resumes at the very next byte."""
    assert frames_of([b"q" * 17, b"q" * 5, b"\nafter\n"], max_frame_bytes=16) == [
        Oversized(b"q" * 17, 17),
        b"after",
    ]


def test_oversized_unterminated_line_at_eof() -> None:
    """A runaway final line at EOF is reported once and then the stream ends cleanly."""
    framer = LineFramer(4)
    framer.feed(b"good\n" + b"w" * 10)
    framer.feed(b"")
    assert framer.next_frame() == b"good"
    assert framer.next_frame() == Oversized(b"w" * 10, 10)
    assert framer.next_frame() is EOF


def test_scan_position_survives_partial_lines() -> None:
    """A line built from many small chunks is found once its newline arrives, not before."""
    framer = LineFramer()
    for piece in (b"ab", b"cd", b"ef"):
        framer.feed(piece)
        assert framer.next_frame() is None
    framer.feed(b"\n")
    assert framer.next_frame() == b"abcdef"
    assert framer.buffered == 0
