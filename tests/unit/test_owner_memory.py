"""The owner gives a burst's memory back once idle, and never while busy."""

from __future__ import annotations

import asyncio

import pytest

from tether.owner import memory


def test_trims_once_after_settling_and_only_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "SETTLE_S", 0.01)
    busy = [True]
    shrunk: list[int] = []

    async def main() -> memory.MemoryTrim:
        trim = memory.MemoryTrim(lambda: not busy[0], shrink=lambda: shrunk.append(1))
        trim.soon()
        await asyncio.sleep(0.05)
        assert trim.trims == 0  # busy again when it fired: nothing done
        busy[0] = False
        trim.soon()
        trim.soon()  # a second idle moment before settling replaces the first
        await asyncio.sleep(0.05)
        trim.soon()
        trim.cancel()  # shutting down: no trim after it
        await asyncio.sleep(0.05)
        return trim

    trim = asyncio.run(main())
    assert trim.trims == 1
    assert shrunk == [1]


def test_the_journal_ring_keeps_only_unstored_entries_after_shrink(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    from tether import paths
    from tether.state.journal import store
    from tether.state.journal.writer import JournalWriter
    from tether.state.registry import Registry

    with Registry() as reg:
        reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")
    disk = threading.Event()
    real = store.write_batch

    def slow_disk(*args: object) -> None:
        disk.wait(10)
        real(*args)  # type: ignore[arg-type]  # the real signature, passed through

    monkeypatch.setattr(store, "write_batch", slow_disk)
    journal = JournalWriter(paths.state_db(), "k")
    for i in range(100):
        journal.append("turn_ended", {"i": i})
    journal.shrink()
    assert len(journal.ring) == 100  # nothing stored yet: a watcher needs them all
    disk.set()
    assert journal.close()
    journal.shrink()
    assert not journal.ring  # all stored: the database serves them


def test_only_the_owners_first_trim_freezes_what_survives_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its long-lived state is frozen once; later trims collect only what came since."""
    from tether import _memory

    monkeypatch.setattr(memory, "SETTLE_S", 0.001)
    calls: list[bool] = []
    monkeypatch.setattr(_memory, "give_back", lambda *, freeze=False: calls.append(freeze))

    async def main(freeze: bool) -> None:
        trim = memory.MemoryTrim(lambda: True, shrink=lambda: None, freeze=freeze)
        for n in range(1, 4):
            trim.soon()
            for _ in range(400):  # bounded: each trim lands within a few passes
                await asyncio.sleep(0.005)
                if trim.trims == n:
                    break
        trim.cancel()

    asyncio.run(main(freeze=True))
    assert calls == [True, False, False]
    calls.clear()
    asyncio.run(main(freeze=False))  # not the owner's process (a test, a library): never
    assert calls == [False, False, False]


def test_a_freezing_give_back_leaves_later_collections_only_what_came_since() -> None:
    """After it, what was alive is frozen; a plain give_back freezes nothing more."""
    import subprocess
    import sys

    code = (
        "import gc\n"
        "from tether import _memory\n"
        "_memory.give_back()\n"
        "assert gc.get_freeze_count() == 0\n"
        "_memory.give_back(freeze=True)\n"
        "frozen = gc.get_freeze_count()\n"
        "assert frozen > 1000, frozen\n"
        "keep = [[i] for i in range(100)]\n"
        "_memory.give_back()\n"
        "assert gc.get_freeze_count() == frozen\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()


def test_a_host_s_owners_share_one_trim_of_the_young_generations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three owners of a session host going idle one after another trim once, once all
    are idle, collecting only the young generations and freezing nothing; an owner still
    busy holds it off; an owner that ended is no longer waited for."""
    from tether import _memory

    monkeypatch.setattr(memory, "SETTLE_S", 0.01)
    calls: list[tuple[bool, int]] = []

    def give_back(*, freeze: bool = False, generation: int = 2) -> None:
        calls.append((freeze, generation))

    monkeypatch.setattr(_memory, "give_back", give_back)
    busy = {"a": False, "b": False, "c": True}
    shrunk: list[str] = []

    async def main() -> memory.HostTrim:
        host = memory.HostTrim()
        trims = {
            k: memory.MemoryTrim(
                lambda k=k: not busy[k],
                shrink=lambda k=k: shrunk.append(k),
                host=host,
            )
            for k in busy
        }
        for trim in trims.values():
            trim.soon()
        await asyncio.sleep(0.05)
        assert host.trims == 0  # c is busy
        trims["c"].cancel()  # c ended: it no longer holds the others' trim
        trims["a"].soon()
        await asyncio.sleep(0.05)
        return host

    host = asyncio.run(main())
    assert host.trims == 1
    assert calls == [(False, 1)]
    assert sorted(shrunk) == ["a", "b"]
