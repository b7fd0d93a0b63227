"""The SSE relay's bulk path with no server: a follower takes runs of entry frames as
one block, the hub turns a block into SSE events with a few bytes operations, and the
ring of chunks serves any cursor. Any chunking of the owner's stream delivers every
entry once, in order, as the line-by-line path would."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.ipc.client import OwnerConnection
from tether.ipc.lines import LineReader
from tether.operations.handover import Handover
from tether.serve import stream, stream_clients
from tether.serve.sse import Chunk
from tether.state.journal.follow import Follower
from tether.state.journal.live_frames import block_taker, entry_taker

RID = "r-0123456789abcdef"
PREFIX = b'{"type":"entry","requestId":"' + RID.encode() + b'","entry":'


def entry(seq: int, kind: str = "acp", text: str = "x") -> str:
    return json.dumps(
        {"seq": seq, "at": 1.5, "kind": kind, "requestId": RID, "text": text},
        separators=(",", ":"),
    )


def frame(seq: int, kind: str = "acp") -> bytes:
    return PREFIX + entry(seq, kind).encode() + b"}\n"


def other(kind: str = "interaction") -> bytes:
    return json.dumps({"type": kind, "requestId": RID}, separators=(",", ":")).encode() + b"\n"


class Sink:
    """What a follower delivered, whichever path it took: (seq, line) in order."""

    def __init__(self) -> None:
        self.got: list[tuple[int, str]] = []
        self.blocks = 0

    def emit(self, seq: int, line: str) -> None:
        self.got.append((seq, line))

    def emit_block(self, first: int, last: int, entries: list[bytes]) -> None:
        lines = [e.decode() for e in entries]
        assert len(lines) == last - first + 1
        self.got.extend(zip(range(first, last + 1), lines, strict=True))
        self.blocks += 1


def follower(sink: Sink, cursor: int = 1) -> Follower:
    return Follower(None, "k" * 64, cursor, sink.emit, emit_block=sink.emit_block)  # type: ignore[arg-type]


def test_a_run_of_entries_is_taken_whole_with_its_seqs() -> None:
    sink = Sink()
    f = follower(sink, cursor=3)
    block = b"".join(frame(s) for s in range(3, 8))
    assert block_taker(f, PREFIX)(block) == len(block)
    assert sink.blocks == 1
    assert sink.got == [(s, entry(s)) for s in range(3, 8)]
    assert f.cursor == 8
    assert not f.ended


def test_entries_before_another_frame_are_taken_and_the_frame_is_left() -> None:
    sink = Sink()
    f = follower(sink, cursor=3)
    entries = frame(3) + frame(4)
    assert block_taker(f, PREFIX)(entries + other() + frame(5)) == len(entries)
    assert sink.got == [(3, entry(3)), (4, entry(4))]
    assert block_taker(f, PREFIX)(other() + frame(5)) == 0  # not an entry: line by line


def test_an_overlap_or_a_gap_goes_line_by_line_without_duplicates() -> None:
    sink = Sink()
    f = follower(sink, cursor=5)
    block = b"".join(frame(s) for s in (3, 4, 5, 6, 8))
    assert block_taker(f, PREFIX)(block) == len(block)
    assert sink.blocks == 0
    assert [s for s, _ in sink.got] == [5, 6, 8]
    assert f.cursor == 9


def test_session_ended_at_the_end_of_a_block_ends_the_follower() -> None:
    sink = Sink()
    f = follower(sink, cursor=1)
    assert block_taker(f, PREFIX)(frame(1) + frame(2, "session_ended"))
    assert f.ended


class ChunkedSocket:
    """A socket whose reads return the owner's bytes cut at the given places."""

    def __init__(self, data: bytes, cuts: list[int]) -> None:
        edges = sorted({c for c in cuts if 0 < c < len(data)})
        self.pieces = [data[a:b] for a, b in zip([0, *edges], [*edges, len(data)], strict=True)]

    def recv(self, size: int) -> bytes:
        if not self.pieces:
            return b""
        piece = self.pieces[0]
        if len(piece) > size:
            self.pieces[0] = piece[size:]
            return piece[:size]
        return self.pieces.pop(0)

    def settimeout(self, _t: float | None) -> None:
        pass

    def gettimeout(self) -> None:
        return None


@settings(max_examples=200, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(["entry", "entry", "entry", "other"]), max_size=60),
    cuts=st.lists(st.integers(min_value=1, max_value=6000), max_size=30),
    start=st.integers(min_value=1, max_value=4),
    cursor=st.integers(min_value=1, max_value=8),
)
def test_any_chunking_delivers_every_entry_once_in_order(
    kinds: list[str], cuts: list[int], start: int, cursor: int
) -> None:
    ack = json.dumps({"type": "ack", "requestId": RID}).encode() + b"\n"
    result = json.dumps({"type": "result", "requestId": RID, "result": {}}).encode() + b"\n"
    body, seq, expected = [ack], start, []
    for kind in kinds:
        if kind == "entry":
            body.append(frame(seq))
            if seq >= cursor:
                expected.append((seq, entry(seq)))
            seq += 1
        else:
            body.append(other())
    body.append(result)
    sink = Sink()
    f = follower(sink, cursor=cursor)
    conn = OwnerConnection(ChunkedSocket(b"".join(body), cuts))  # type: ignore[arg-type]
    conn.recv_size = 997  # small reads: lines cut across them
    frames: list[dict[str, Any]] = []
    assert (
        conn.wait(
            RID,
            on_frame=frames.append,
            on_raw=entry_taker(f, PREFIX),
            on_block=block_taker(f, PREFIX),
        )
        == {}
    )
    assert sink.got == expected
    assert len(frames) == kinds.count("other")


def test_peek_block_offers_complete_lines_only() -> None:
    reader = LineReader(max_bytes=64)
    reader.feed(b"a\nbb\ncc")
    assert reader.peek_block() == b"a\nbb\n"
    reader.skip(2)
    assert reader.peek_block() == b"bb\n"
    reader.skip(3)
    assert reader.peek_block() is None  # "cc" waits for its newline
    assert reader.next_line() is None
    reader.feed(b"c\nd\n")
    assert reader.peek_block() is None  # a line spanning chunks goes through next_line
    assert reader.next_line() == b"ccc"
    assert reader.peek_block() == b"d\n"


def test_sse_block_is_the_events_one_by_one() -> None:
    lines = [entry(s) for s in range(7, 12)]
    lines[2] = lines[2].replace(",", ",\r", 1)
    want = "".join(stream.sse_event(s, line) for s, line in zip(range(7, 12), lines, strict=True))
    assert stream.sse_block(7, [line.encode() for line in lines]) == want.encode()
    assert stream.sse_block(3, [entry(3).encode()]) == stream.sse_event(3, entry(3)).encode()


def test_event_offset_finds_a_seq_or_the_next_one() -> None:
    data = b"".join(stream.sse_event(s, entry(s)).encode() for s in (4, 5, 7, 8))
    assert stream.event_offset(data, 4) == 0
    assert data[stream.event_offset(data, 5) :].startswith(b"id: 5\n")
    assert data[stream.event_offset(data, 6) :].startswith(b"id: 7\n")  # 6 is missing
    assert stream.event_offset(data, 9) == len(data)


def _ring_hub(ring_entries: int) -> stream.Hub:
    hub = stream.Hub("k" * 64, asyncio.get_running_loop(), ring_entries=ring_entries)
    hub._started(1)
    return hub


def _block(hub: stream.Hub, first: int, count: int) -> None:
    lines = [entry(s) for s in range(first, first + count)]
    hub._take([hub._chunk_block(first, first + count - 1, [line.encode() for line in lines])])


def test_blocks_in_the_ring_serve_a_cursor_inside_them() -> None:
    async def run() -> None:
        hub = _ring_hub(ring_entries=250)
        for first in range(1, 1001, 100):
            _block(hub, first, 100)
        assert hub.next_seq == 1001
        assert 250 * 3 // 4 <= hub.ring_count <= 250  # trimmed by whole chunks
        got = hub.slice_from(hub.first + 150)
        assert got is not None
        data, cursor = got
        assert cursor == 1001
        ids = [int(x.split(b"\n")[0]) for x in data.split(b"id: ")[1:]]
        assert ids == list(range(hub.first + 150, 1001))
        data, cursor = hub.slice_from(hub.first, limit=1) or (b"", 0)
        assert cursor == hub.first + 1  # one event larger than ``limit``: that event whole
        assert data.startswith(b"id: %d\n" % hub.first)
        assert data.count(b"id: ") == 1

    asyncio.run(run())


def test_a_client_is_given_bounded_windows_of_whole_events() -> None:
    """What one write to a client holds is bounded (a stream that does not read keeps
    at most that, never its own copy of a turn); windows cut inside a relayed block end
    on an event boundary, and the windows together are the ring's events exactly."""

    async def run() -> None:
        hub = _ring_hub(ring_entries=4096)
        _block(hub, 1, 700)  # one relayed block, far larger than a window
        _block(hub, 701, 3)
        limit = 4096
        cursor, seen = 1, b""
        for _ in range(1000):
            got = hub.slice_from(cursor, limit=limit)
            if got is None:
                break
            data, after = got
            assert len(data) <= limit
            assert data.startswith(b"id: %d\n" % cursor)
            assert data.endswith(b"\n\n")
            assert data.count(b"id: ") == after - cursor
            seen += data
            cursor = after
        assert cursor == 704
        want = b"".join(stream.sse_event(s, entry(s)).encode() for s in range(1, 704))
        assert seen == want
        whole = hub.slice_from(701)
        assert whole is not None
        assert whole[0] is hub.chunks[-1].data

    asyncio.run(run())


def test_a_block_larger_than_the_ring_is_cut_to_its_bound() -> None:
    """Entries arriving in big blocks are kept to the ring's bound all the same: a
    client more than ``ring_entries`` behind is past the ring, whatever the blocks."""

    async def run() -> None:
        hub = _ring_hub(ring_entries=64)
        _block(hub, 1, 500)
        _block(hub, 501, 500)
        assert hub.ring_count == 48
        assert hub.first == 1000 - 48 + 1
        assert [(c.first, c.last) for c in hub.chunks] == [(953, 1000)]
        data, cursor = hub.slice_from(1) or (b"", 0)
        assert data.startswith(b"id: 953\n")
        assert cursor == 1001

    asyncio.run(run())


async def _take(gen: Any, until: bytes) -> bytes:
    out = b""
    while until not in out:
        out += await gen.__anext__()
    return out


def test_a_client_that_falls_behind_is_dropped_with_its_last_seq_and_never_waited_for() -> None:
    """While a client reads nothing the hub keeps taking blocks (the follower's hand-over
    never waits for a client); when it reads again it gets ``lagged`` naming the last
    seq it was sent, and a resume from there misses nothing."""

    async def run() -> None:
        hubs = stream.Hubs(ring_entries=200, linger=0)
        hub = _ring_hub(ring_entries=200)
        hubs.by_key[hub.key, False] = hub
        hub.clients = 1
        stopping = asyncio.Event()
        gen = stream_clients.follow(hubs, hub, 1, heartbeat=60, stopping=stopping)
        _block(hub, 1, 100)
        got = await _take(gen, b"id: 100\n")
        assert got.count(b"id: ") == 100

        def take() -> None:
            hub._take(handover.take()[0])

        handover: Handover[Chunk] = Handover(asyncio.get_running_loop(), take)

        def produce() -> None:  # the follower thread: nothing here waits on the client
            for first in range(101, 2001, 100):
                lines = [entry(s).encode() for s in range(first, first + 100)]
                handover.put(hub._chunk_block(first, first + 99, lines), 100)

        thread = threading.Thread(target=produce)
        thread.start()
        await asyncio.to_thread(thread.join)  # the loop takes the hand-overs meanwhile
        take()
        assert hub.next_seq == 2001
        assert hub.first > 101
        last = await gen.__anext__()
        assert last == stream_clients.sse_control("lagged", {"lastSeq": 100}).encode()
        assert hubs.lagged_total == 1
        await gen.aclose()
        assert hub.clients == 0

    asyncio.run(run())


def test_a_hub_lingers_after_its_last_client_and_is_reused() -> None:
    """The next stream of a session finds its hub warm; a controller hub never lingers."""

    async def run() -> None:
        started: list[stream.Hub] = []

        class Hubs(stream.Hubs):
            def acquire(self, key: str, *, control: bool = False) -> stream.Hub:
                hub = self.by_key.get((key, control))
                if hub is None:  # as Hubs.acquire, without a follower thread
                    hub = stream.Hub(key, asyncio.get_running_loop(), control=control)
                    hub.start = lambda: None  # type: ignore[method-assign]
                    started.append(hub)
                    self.by_key[key, control] = hub
                    hub._started(1)
                return super().acquire(key, control=control)

        hubs = Hubs(linger=0.2)
        hub = hubs.acquire("a" * 64)
        hubs.release(hub)
        assert hubs.warm("a" * 64) is hub
        assert not hub.closing
        assert hubs.acquire("a" * 64) is hub  # warm: no second follower
        hubs.release(hub)
        await asyncio.sleep(0.4)
        assert hub.closing
        assert hubs.warm("a" * 64) is None
        control = hubs.acquire("b" * 64, control=True)
        hubs.release(control)
        assert control.closing
        assert len(started) == 2

    asyncio.run(run())


def test_memory_is_trimmed_once_after_a_burst_not_during_it() -> None:
    """The gateway gives its memory back once the relay has been quiet a settle period:
    activity since the last look defers it; one trim per burst. (The timer's ticks are
    run by hand here: no wall time involved.)"""
    from tether.serve.memory import QuietTrim

    async def run() -> None:
        quiet = QuietTrim(settle=3600)
        quiet.touch()
        for _ in range(3):  # a long burst: each look finds activity since the last one
            quiet.touch()
            quiet._run()
            assert quiet.trims == 0
            assert quiet._handle is not None
        quiet._run()  # a settle period with nothing relayed
        assert quiet.trims == 1
        assert quiet._handle is None
        quiet.touch()
        quiet.cancel()
        assert quiet._handle is None

    asyncio.run(run())
