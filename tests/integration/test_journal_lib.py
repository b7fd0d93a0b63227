"""The journal from the library: Session.watch / history / read, with real owners."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import tether
from tether.events import AgentMessageChunk, JournalRecord, SessionEnded, TurnEnded

pytestmark = pytest.mark.integration


def test_watch_history_and_read_from_the_library(tether_home: Path, project_dir: Path) -> None:
    """A follower sees the turn as typed events with seqs, then the session's end."""

    async def main() -> None:
        async with tether.Client(home=tether_home) as client:
            session = await client.ensure_session("mock", cwd=project_dir, name="lib")
            assert await session.run("echo first") == ("first", "end_turn")
            events = []

            async def follow() -> None:
                async for event in session.watch(from_seq=1):
                    events.append(event)

            watcher = asyncio.ensure_future(follow())
            assert await session.run("stream 3 two") == ("two 0\ntwo 1\ntwo 2\n", "end_turn")
            report = await session.close()
            assert report["survivors"] == []
            await asyncio.wait_for(watcher, 30)
            seqs = [e.seq for e in events]
            assert seqs == list(range(1, len(events) + 1))
            assert isinstance(events[-1], SessionEnded)
            texts = [e.text for e in events if isinstance(e, AgentMessageChunk)]
            assert texts == ["first", "two 0\n", "two 1\n", "two 2\n"]
            assert [e.stop_reason for e in events if isinstance(e, TurnEnded)] == [
                "end_turn",
                "end_turn",
            ]
            kinds = {e.kind for e in events if isinstance(e, JournalRecord)}
            assert {"owner_started", "prompt_queued", "agent_run_started"} <= kinds
            history = await session.history()
            assert [t["preview"] for t in history] == ["echo first", "stream 3 two"]
            assert history[0]["by"]["client"] == "library"
            transcript = await session.read(tail=1)
            assert [(t["prompt"], t["text"]) for t in transcript] == [
                ("stream 3 two", "two 0\ntwo 1\ntwo 2\n")
            ]

            # Leaving the loop early stops the follower (no thread, no owner kept).
            async for _event in session.watch(from_seq=1):
                break

    asyncio.run(main())
