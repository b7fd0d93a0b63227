"""The owner's journal writer and its watchers, over real sockets, without processes."""

from __future__ import annotations

import asyncio
import json
import socket

from tether import paths
from tether.ipc import protocol
from tether.owner import watchers
from tether.owner.job import Job, Outbox
from tether.owner.watchers import Fanout, Watch
from tether.state.journal import store, writer
from tether.state.registry import Registry


def _watch(owner_writer: asyncio.StreamWriter, rid: str, limit: int = 8 << 20) -> Watch:
    env = protocol.Envelope(rid, "watch", {"follow": True})
    return Watch(Job(env, Outbox(owner_writer, limit=limit), 0.0))


def _key() -> str:
    with Registry() as reg:
        reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")
    return "k"


_KEEP: list[asyncio.StreamWriter | asyncio.StreamReader] = []  # collected streams close


async def _close_all() -> None:
    for stream in _KEEP:
        if isinstance(stream, asyncio.StreamWriter):
            stream.close()
    _KEEP.clear()
    await asyncio.sleep(0)


async def _pair(
    limit: int = 64 * 1024 * 1024,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """(reader side for the test, writer side for the owner)."""
    a, b = socket.socketpair()
    reader, test_writer = await asyncio.open_unix_connection(sock=a, limit=limit)
    owner_reader, owner_writer = await asyncio.open_unix_connection(sock=b)
    _KEEP.extend((test_writer, owner_reader, owner_writer))
    return reader, owner_writer


async def _frames(reader: asyncio.StreamReader) -> list[dict[str, object]]:
    frames = []
    while True:
        line = await reader.readline()
        if not line:
            return frames
        frame = json.loads(line)
        frames.append(frame)
        if frame["type"] in ("result", "lagged", "error"):
            return frames


class Recording(Outbox):
    """An outbox with no socket: every write is recorded instead."""

    def __init__(self) -> None:
        super().__init__(None)
        self.detached = False  # no socket: every write is recorded instead
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


def test_watchers_replay_from_the_database_then_go_live() -> None:
    """A watcher from seq 1 gets stored and live entries in order, no gap, no duplicate."""
    key = _key()
    writer.RING_MIN = 16  # force the replay through the database, not the ring

    async def main() -> None:
        journal = writer.JournalWriter(paths.state_db(), key)
        fanout = Fanout(journal)
        for i in range(500):
            journal.append("turn_ended", {"i": i}, f"r-{i}")
        await asyncio.sleep(0)
        while journal.stored_seq < 500:  # noqa: ASYNC110 -- the writer is a thread, not a task
            await asyncio.sleep(0.01)
        for _ in range(3):  # let the ring trim to its minimum
            journal.append("mode_set", {"modeId": "x"})
        readers = []
        for start in (1, 250, 503):
            reader, w = await _pair()
            watch = _watch(w, f"w-{start}")
            await fanout.attach(watch, start, follow=True)
            readers.append(reader)
        for i in range(200):
            journal.append("turn_ended", {"i": 1000 + i}, None)
        await asyncio.sleep(0.05)
        fanout.end_all("session-ended")
        results = [await _frames(r) for r in readers]
        assert await asyncio.to_thread(journal.close)
        for start, frames in zip((1, 250, 503), results, strict=True):
            seqs = [f["entry"]["seq"] for f in frames if f["type"] == "entry"]
            assert seqs == list(range(start, 704))
            assert frames[-1]["type"] == "result"
            assert frames[-1]["result"]["lastSeq"] == 703
        await _close_all()

    try:
        asyncio.run(main())
    finally:
        writer.RING_MIN = 4096
    with Registry() as reg:
        assert store.last_seq(reg._db, key) == 703


def test_a_watcher_that_never_reads_is_dropped_with_lagged() -> None:
    """Its unsent bytes pass the bound: a terminal `lagged` with the last seq it was given."""
    key = _key()

    async def main() -> None:
        journal = writer.JournalWriter(paths.state_db(), key)
        fanout = Fanout(journal)
        reader, w = await _pair()
        watch = _watch(w, "slow", limit=64 * 1024)
        await fanout.attach(watch, 1, follow=True)
        fast_reader, fast_w = await _pair()
        fast = _watch(fast_w, "fast")
        await fanout.attach(fast, 1, follow=True)
        collected: list[dict[str, object]] = []
        consumer = asyncio.ensure_future(_frames(fast_reader))
        for i in range(20000):
            journal.append_acp("in", b'{"pad":"%s","i":%d}' % (b"y" * 100, i), None)
            if i % 500 == 0:
                await asyncio.sleep(0)
        await asyncio.sleep(0.05)
        assert watch.ended
        journal.append("mode_set", {"modeId": "after the lag"})  # the fan-out lets go of it
        assert watch not in fanout.watches
        fanout.end_all("session-ended")
        collected = await consumer
        slow = await _frames(reader)
        assert await asyncio.to_thread(journal.close)
        assert slow[-1]["type"] == "lagged"
        last = slow[-1]["lastSeq"]
        seqs = [f["entry"]["seq"] for f in slow if f["type"] == "entry"]
        assert seqs == list(range(1, last + 1))
        assert 0 < last < 20000
        fast_seqs = [f["entry"]["seq"] for f in collected if f["type"] == "entry"]
        assert fast_seqs == list(range(1, 20002))
        await _close_all()

    asyncio.run(main())


def test_a_watcher_attaching_inside_the_ring_gets_its_replay_as_one_write() -> None:
    """The ring's replay from the cursor on is one outbox write, framed as entry by entry
    (issue 23: thousands of per-entry writes took the streaming turn's loop time)."""
    key = _key()

    async def main() -> None:
        journal = writer.JournalWriter(paths.state_db(), key)
        fanout = Fanout(journal)
        for i in range(10):
            journal.append("turn_ended", {"i": i}, f"r-{i}")
        outbox = Recording()
        watch = Watch(Job(protocol.Envelope("w", "watch", {"follow": False}), outbox, 0.0))
        await fanout.attach(watch, 4, follow=False)
        assert await asyncio.to_thread(journal.close)
        replay, result = outbox.writes  # the entries, then the terminal result
        frames = [json.loads(line) for line in replay.splitlines()]
        assert [f["entry"]["seq"] for f in frames] == list(range(4, 11))
        assert replay == b"".join(watch.frame(line) for seq, line in journal.ring if seq >= 4)
        assert json.loads(result)["result"]["reason"] == "caught-up"

    asyncio.run(main())


def test_a_turns_frames_wait_for_its_end_and_go_out_with_it_as_one_write() -> None:
    """A warm turn's entries span several loop passes: handed to a watcher once per pass
    they were ~3 writes (and as many wakeups of a gateway's follower) per turn. Its
    frames now wait up to WATCH_BATCH_S for company; its end goes at the end of its
    pass with all of them. A frame with no end after it still goes, WATCH_BATCH_S on,
    and a turn that outlives its window streams once per pass, as before."""
    key = _key()

    async def main() -> None:
        journal = writer.JournalWriter(paths.state_db(), key)
        fanout = Fanout(journal)
        outbox = Recording()
        watch = Watch(Job(protocol.Envelope("w", "watch", {"follow": True}), outbox, 0.0))
        await fanout.attach(watch, 1, follow=True)
        journal.append("prompt_queued", {}, "r1")
        journal.append("turn_started", {}, "r1")
        await asyncio.sleep(0)  # a loop pass: nothing goes yet
        journal.append_acp("in", b'{"jsonrpc":"2.0","method":"session/update"}', "r1")
        await asyncio.sleep(0)
        assert outbox.writes == []
        journal.append("turn_ended", {"stopReason": "end_turn"}, "r1")
        await asyncio.sleep(0)
        (turn,) = outbox.writes  # the whole turn, in one write, at the end's pass
        kinds = [json.loads(line)["entry"]["kind"] for line in turn.splitlines()]
        assert kinds == ["prompt_queued", "turn_started", "acp", "turn_ended"]
        journal.append_acp("in", b'{"jsonrpc":"2.0","method":"session/update"}', "r2")
        await asyncio.sleep(0)
        assert len(outbox.writes) == 1
        await asyncio.sleep(watchers.WATCH_BATCH_S * 5)
        assert len(outbox.writes) == 2  # a lone frame: WATCH_BATCH_S later, not never
        # The turn outlived its window: it streams, and its frames go once per pass.
        journal.append_acp("in", b'{"jsonrpc":"2.0","method":"session/update"}', "r2")
        await asyncio.sleep(0)
        assert len(outbox.writes) == 3
        journal.append("turn_ended", {"stopReason": "end_turn"}, "r2")
        await asyncio.sleep(0)
        assert len(outbox.writes) == 4
        # The next turn's frames wait for company again.
        journal.append("turn_started", {}, "r3")
        await asyncio.sleep(0)
        assert len(outbox.writes) == 4
        fanout.end_all("session-ended")
        assert await asyncio.to_thread(journal.close)

    asyncio.run(main())
