"""StoredWaits: a turn's answer goes once its end is stored, never before, never stuck."""

from __future__ import annotations

import asyncio
import threading

from tether.state.journal.stored_waits import StoredWaits


def test_a_wait_runs_once_its_seq_is_reached_and_not_before() -> None:
    waits = StoredWaits(None, stored=4)
    ran: list[str] = []
    waits.add(4, lambda: ran.append("stored already"))
    waits.add(6, lambda: ran.append("six"))
    waits.add(5, lambda: ran.append("five"))
    assert ran == ["stored already"]
    waits.reached(5)
    assert ran == ["stored already", "five"]
    waits.reached(7)
    assert ran == ["stored already", "five", "six"]


def test_a_failing_disk_releases_every_wait_and_lets_new_ones_through() -> None:
    waits = StoredWaits(None, stored=0)
    ran: list[int] = []
    waits.add(3, lambda: ran.append(3))
    waits.failing()
    assert ran == [3]
    waits.add(9, lambda: ran.append(9))  # nothing waits on a failing disk
    assert ran == [3, 9]
    waits.reached(10)  # stored again: waits wait again
    waits.add(12, lambda: ran.append(12))
    assert ran == [3, 9]
    waits.reached(12)
    assert ran == [3, 9, 12]


def test_callbacks_run_on_the_loop_when_the_thread_says_so() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        waits = StoredWaits(loop, stored=0)
        ran: list[str] = []
        done = asyncio.Event()

        def answer() -> None:
            assert threading.current_thread() is threading.main_thread()
            ran.append("answered")
            done.set()

        waits.add(1, answer)
        await asyncio.sleep(0)
        assert ran == []
        thread = threading.Thread(target=waits.reached, args=(1,))
        thread.start()
        thread.join()
        await asyncio.wait_for(done.wait(), 5)
        return ran

    assert asyncio.run(main()) == ["answered"]


def test_a_wait_added_while_the_thread_reaches_it_is_never_stranded() -> None:
    """The loop's check and the thread's release are one lock: a seq the thread reached
    between them runs at once instead of waiting for a commit that may never come."""
    for _ in range(200):
        waits = StoredWaits(None, stored=0)
        ran = threading.Event()
        thread = threading.Thread(target=waits.reached, args=(1,))
        thread.start()
        waits.add(1, ran.set)
        thread.join()
        assert ran.is_set()
