"""tether._aio: tasks are held until they end; cleanup finishes before a cancellation
propagates, even a second one."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from tether import _aio


def test_spawn_keeps_the_task_until_it_ends() -> None:
    """A task in a ``keep`` set stays there while it runs and leaves it when done."""

    async def main() -> None:
        keep: set[asyncio.Task[Any]] = set()
        gate = asyncio.Event()

        async def work() -> int:
            await gate.wait()
            return 7

        task = _aio.spawn(work(), keep=keep, name="w")
        assert keep == {task}
        assert task.get_name() == "w"
        gc.collect()
        gate.set()
        assert await task == 7
        await asyncio.sleep(0)  # the done callback runs on the next pass
        assert keep == set()

    asyncio.run(main())


def test_spawn_in_a_group() -> None:
    """With ``group``, the task group holds and awaits the task."""

    async def main() -> list[int]:
        seen: list[int] = []

        async def work() -> None:
            seen.append(1)

        async with asyncio.TaskGroup() as tg:
            _aio.spawn(work(), group=tg)
        return seen

    assert asyncio.run(main()) == [1]


def test_shielded_finishes_the_work_before_a_double_cancellation_propagates() -> None:
    """Cancelled twice while waiting, shielded() still waits for the work to end, then
    the cancellation propagates."""

    async def main() -> None:
        release = asyncio.Event()
        finished: list[str] = []

        async def work() -> str:
            await release.wait()
            finished.append("done")
            return "ok"

        caller = _aio.spawn(_aio.shielded(work()))
        await asyncio.sleep(0)
        caller.cancel()
        await asyncio.sleep(0)
        caller.cancel()
        await asyncio.sleep(0)
        assert not caller.done()  # still waiting for the work
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert finished == ["done"]

    asyncio.run(main())


def test_shielded_returns_and_raises_like_the_work() -> None:
    """Uncancelled, shielded() is the work: its result, or its error."""

    async def fail() -> None:
        raise ValueError("boom")

    async def main() -> str:
        with pytest.raises(ValueError, match="boom"):
            await _aio.shielded(fail())
        return await _aio.shielded(asyncio.sleep(0, "x"))

    assert asyncio.run(main()) == "x"


def test_cleanup_drops_the_error_and_returns_none() -> None:
    """cleanup() logs a failing cleanup and returns None: the caller is already leaving."""

    async def fail() -> int:
        raise OSError("gone")

    async def main() -> tuple[int | None, int | None]:
        return await _aio.cleanup(fail(), what="t"), await _aio.cleanup(asyncio.sleep(0, 3))

    assert asyncio.run(main()) == (None, 3)


def test_settle_is_bounded_and_not_cut_short_by_cancellation() -> None:
    """settle() waits for the task through a cancellation of ours, then re-raises it; a
    task that does not end in time is left running (settle never cancels it)."""

    async def main() -> None:
        release = asyncio.Event()

        async def work() -> None:
            await release.wait()
            raise OSError("its error is dropped")

        task = _aio.spawn(work())
        caller = _aio.spawn(_aio.settle(task, None))
        await asyncio.sleep(0)
        caller.cancel()
        await asyncio.sleep(0)
        assert not caller.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert isinstance(task.exception(), OSError)

        stuck = _aio.spawn(asyncio.Event().wait())
        await _aio.settle(stuck, 0)
        assert not stuck.done()
        stuck.cancel()

    asyncio.run(main())
