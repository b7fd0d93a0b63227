"""``operations.watch_async``/``watch_batches``, the one follow bridge, over a stand-in
follower (no owner, no database): order, the follower's error after its entries, the
bound on what waits for the loop, and a reader that leaves stopping the follower."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tether.errors import OwnerLost
from tether.operations import watching


class FakeFollower:
    """What ``on_start`` is given: a cursor, and an interrupt that wakes a wait."""

    def __init__(self, stop: threading.Event, cursor: int) -> None:
        self.stop = stop
        self.cursor = cursor
        self.interrupted = False

    def interrupt(self) -> None:
        self.interrupted = True
        self.stop.set()


def fake_follow(
    entries: int, *, then: BaseException | None = None, block: bool = False
) -> tuple[Callable[..., int], dict[str, Any]]:
    """A follow_session that emits ``entries`` entries from seq 1, then raises ``then``,
    or (``block``) waits until it is stopped, as a live follow does."""
    seen: dict[str, Any] = {"attempted": 0, "stopped": False, "followers": []}

    def follow_session(key: str, emit: Callable[[int, str], None], **kw: Any) -> int:
        stop: threading.Event = kw["stop"]
        follower = FakeFollower(stop, 1)
        seen["followers"].append(follower)
        kw["on_start"](follower)
        for seq in range(1, entries + 1):
            if stop.is_set():
                break
            seen["attempted"] = seq
            emit(seq, f'{{"seq":{seq},"kind":"acp"}}')
        if then is not None:
            raise then
        if block:
            stop.wait(30)  # bounded: the reader's leaving sets it
        seen["stopped"] = stop.is_set()
        return entries

    return follow_session, seen


def test_entries_arrive_in_order_then_the_followers_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every entry handed over reaches the reader, in order, before the error the
    follower ended with; the first seq is told before any batch."""
    follow, _seen = fake_follow(500, then=OwnerLost("gone"))
    monkeypatch.setattr(watching, "follow_session", follow)

    async def main() -> None:
        starts: list[int] = []
        got: list[int] = []

        async def read() -> None:
            async for seq, line in watching.watch_async(
                "k" * 64, check=False, bound=16, on_start=starts.append
            ):
                assert line.startswith(f'{{"seq":{seq},')
                assert starts == [1]
                got.append(seq)

        with pytest.raises(OwnerLost):
            await read()
        assert got == list(range(1, 501))

    asyncio.run(main())


def test_a_reader_that_falls_behind_holds_the_follower_at_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What waits for the reader is bounded: however slowly it takes entries, the
    follower is never further ahead than the batch being read (at most ``bound``), the
    ``bound`` entries waiting for the loop, and the one it is handing over."""
    follow, seen = fake_follow(300)
    monkeypatch.setattr(watching, "follow_session", follow)
    bound = 8

    async def main() -> None:
        taken = 0
        async for seq, _line in watching.watch_async("k" * 64, check=False, bound=bound):
            taken += 1
            assert seq == taken
            assert seen["attempted"] <= taken + 2 * bound + 1
            if taken % 50 == 0:
                await asyncio.sleep(0.01)  # a slow reader: the follower runs ahead, to the bound
        assert taken == 300

    asyncio.run(main())


def test_leaving_early_stops_the_follower_before_the_reader_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reader that leaves (``break``) stops and interrupts the follower, and its thread
    has let go when the iteration is closed."""
    follow, seen = fake_follow(5, block=True)
    monkeypatch.setattr(watching, "follow_session", follow)

    async def main() -> None:
        entries = watching.watch_async("k" * 64, check=False)
        async for seq, _line in entries:
            if seq == 5:
                break
        await entries.aclose()
        assert seen["stopped"]
        assert seen["followers"][0].interrupted

    asyncio.run(main())


def test_a_cancelled_reader_stops_the_follower_before_the_cancellation_propagates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cancellation: the follower is stopped and its thread let go (bounded) first."""
    follow, seen = fake_follow(3, block=True)
    monkeypatch.setattr(watching, "follow_session", follow)

    async def main() -> None:
        got: list[int] = []
        third = asyncio.Event()

        async def read() -> None:
            async for seq, _line in watching.watch_async("k" * 64, check=False):
                got.append(seq)
                if seq == 3:
                    third.set()

        from tether import _aio

        task = _aio.spawn(read())
        await asyncio.wait_for(third.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen["stopped"]
        assert got == [1, 2, 3]

    asyncio.run(main())
