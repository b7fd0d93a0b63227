"""The asyncio follow bridge follows a live owner on its loop (issue 23): a live entry
never crosses a thread, a reader that leaves mid-turn lets go of the owner's socket and
of the follower's thread, and a ``lagged`` drop goes back to the database and attaches
again from the cursor. Over a stand-in owner served on the test's loop (a real socket,
a real registry, the real follower)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import threading
import time
from typing import Any

import pytest

from tether import sessions
from tether.ipc import protocol
from tether.operations import watching
from tether.state.registry import Registry

KEY = "live0000000000000000000000000000"


def _session() -> None:
    with Registry() as registry:
        registry.upsert_session(
            key=KEY, name="live", agent_command=["agent"], agent_label="agent", cwd="/"
        )


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def _entry(rid: str, seq: int, kind: str = "acp") -> bytes:
    entry = {"seq": seq, "at": 1.0, "kind": kind, "requestId": rid, "text": f"e{seq}"}
    return _line({"type": "entry", "requestId": rid, "entry": entry})


class StandInOwner:
    """Answers each ``watch`` from its ``fromSeq``: the entries through ``last`` one
    write each, then -- per attachment, in order -- ``"end"`` (a ``session_ended``
    entry and the result), ``"lag"`` (dropped as lagging) or ``"hold"`` (kept open)."""

    def __init__(self, last: int, plan: list[str]) -> None:
        self.last = last
        self.plan = plan
        self.watches: list[dict[str, Any]] = []
        self.closed = asyncio.Event()  # a held connection saw its reader go

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_line({"type": "hello", "v": protocol.VERSION, "generation": 1}))
        request = json.loads(await reader.readline())
        rid, payload = request["requestId"], request["payload"]
        self.watches.append(payload)
        how = self.plan[len(self.watches) - 1]
        writer.write(_line({"type": "ack", "requestId": rid}))
        for seq in range(payload["fromSeq"], self.last + 1):
            writer.write(_entry(rid, seq))
            await writer.drain()
            await asyncio.sleep(0)
        if how == "end":
            writer.write(_entry(rid, self.last + 1, "session_ended"))
            writer.write(
                _line({"type": "result", "requestId": rid, "result": {"reason": "session-ended"}})
            )
        elif how == "lag":
            writer.write(_line({"type": "lagged", "requestId": rid, "lastSeq": self.last}))
        else:
            await writer.drain()
            await reader.read()  # until the follower lets go
            self.closed.set()
        await writer.drain()
        writer.close()


async def _serving(owner: StandInOwner) -> asyncio.Server:
    return await asyncio.start_unix_server(owner.serve, path=sessions.socket_path(KEY))


def _followers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("follow-")]


def test_live_entries_are_made_into_items_on_the_loop_thread_in_order() -> None:
    """Before: each live entry was read and made into an item in the follower's thread
    and handed across; now the thread waits while the loop reads the owner."""
    _session()
    owner = StandInOwner(last=40, plan=["end"])

    async def main() -> tuple[list[int], set[int], int]:
        server = await _serving(owner)
        made_on: set[int] = set()

        def item(seq: int, line: str) -> int:
            made_on.add(threading.get_ident())
            return seq

        got: list[int] = []
        async with server:
            async for batch in watching.watch_batches(KEY, item, check=False, door="http"):
                got.extend(batch)
        return got, made_on, threading.get_ident()

    got, made_on, loop_thread = asyncio.run(main())
    assert got == list(range(1, 42))  # 1..40, then the session's end
    assert made_on == {loop_thread}
    assert owner.watches == [{"fromSeq": 1, "follow": True, "client": "http"}]
    assert _followers() == []


def test_a_reader_leaving_mid_turn_lets_go_of_the_owner_and_the_thread() -> None:
    _session()
    owner = StandInOwner(last=5, plan=["hold"])

    async def main() -> None:
        server = await _serving(owner)
        async with server:
            batches = watching.watch_batches(KEY, lambda seq, _line: seq, check=False)
            async with contextlib.aclosing(batches):
                async for batch in batches:
                    if 5 in batch:
                        break
            # The owner's end of the socket sees us go (bounded: the test fails, not hangs).
            await asyncio.wait_for(owner.closed.wait(), 5.0)

    asyncio.run(main())
    assert _followers() == []


def test_a_lagged_drop_goes_back_to_the_database_and_attaches_from_the_cursor() -> None:
    _session()
    owner = StandInOwner(last=7, plan=["lag", "end"])

    async def main() -> list[int]:
        server = await _serving(owner)
        got: list[int] = []
        async with server:
            async for batch in watching.watch_batches(KEY, lambda seq, _line: seq, check=False):
                got.extend(batch)
        return got

    got = asyncio.run(main())
    # The first attachment delivered 1..7 and was dropped; the database holds none of
    # them (a stand-in owner stores nothing), so the second starts past what we have.
    assert got == list(range(1, 9))
    assert [w["fromSeq"] for w in owner.watches] == [1, 8]


def test_a_small_bound_holds_the_owner_back_and_loses_nothing() -> None:
    """The live phase waits for room (never the loop): with a bound of 2, every entry
    still arrives, once, in order."""
    _session()
    owner = StandInOwner(last=300, plan=["end"])

    async def main() -> tuple[list[int], int]:
        server = await _serving(owner)
        got: list[int] = []
        biggest = 0
        async with server:
            batches = watching.watch_batches(KEY, lambda seq, _line: seq, check=False, bound=2)
            async for batch in batches:
                biggest = max(biggest, len(batch))
                got.extend(batch)
                await asyncio.sleep(0.001)  # a slow reader
        return got, biggest

    got, biggest = asyncio.run(main())
    assert got == list(range(1, 302))
    assert biggest < 300  # handed over as it came, not held until the end


# The test abandons the reader's task and the live phase with the loop: Python reports
# the coroutines and the socket it could no longer close as it collects them.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_loop_closed_under_a_live_follower_lets_its_thread_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A loop closed with the live phase pending (no ``asyncio.run`` to cancel it)
    resolves nothing; the follower's thread sees the loop gone at its next check."""
    monkeypatch.setattr(watching, "LIVE_CHECK_S", 0.05)
    _session()
    owner = StandInOwner(last=3, plan=["hold"])
    loop = asyncio.new_event_loop()

    tasks: list[asyncio.Task[None]] = []

    async def start() -> None:
        server = await _serving(owner)
        third = asyncio.Event()

        async def read() -> None:
            async for batch in watching.watch_batches(KEY, lambda s, _l: s, check=False):
                if 3 in batch:
                    third.set()

        tasks.append(loop.create_task(read()))
        await third.wait()
        server.close()

    loop.run_until_complete(start())
    assert len(_followers()) == 1
    loop.close()  # the reader's task and the live phase never ran to their ends
    deadline = time.monotonic() + 5.0
    while _followers() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _followers() == []
    tasks.clear()
    gc.collect()  # here, under this test's filter: what the closed loop left behind
