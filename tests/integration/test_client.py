"""The library API (`tether.Client`) on the same owners and IPC as the CLI."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.errors import PromptTimeout

pytestmark = pytest.mark.integration


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_prompt_streams_typed_events_and_close_proves_extinction(
    tether_home: Path, project_dir: Path
) -> None:
    """A turn yields typed events ending with TurnEnded; close reports no survivors."""

    async def main() -> None:
        async with tether.Client(home=tether_home) as client:
            session = await client.ensure_session("mock", cwd=project_dir, name="lib")
            try:
                events = [e async for e in session.prompt("stream 3 x ; tool read ; plan")]
                chunks = [e.text for e in events if isinstance(e, tether.AgentMessageChunk)]
                assert chunks[:3] == ["x 0\n", "x 1\n", "x 2\n"]
                assert any(isinstance(e, tether.ToolCall) for e in events)
                assert any(isinstance(e, tether.Plan) for e in events)
                assert isinstance(events[-1], tether.TurnEnded)
                assert events[-1].stop_reason == "end_turn"
                text, stop = await session.run("echo again")
                assert (text, stop) == ("again", "end_turn")
                status = await session.status()
                assert status["status"] == "idle"
                assert status["agentPid"] is not None
                assert [s["name"] for s in await client.sessions()] == ["lib"]
            finally:
                report = await session.close()
            assert report["survivors"] == []

    run(main())


def test_cancel_from_another_task_keeps_session(tether_home: Path, project_dir: Path) -> None:
    """session.cancel() ends the running turn `cancelled`; the next turn uses the same agent."""

    async def main() -> None:
        async with tether.Client(home=tether_home) as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:
                first = await session.status()

                async def turn() -> str:
                    stop = ""
                    async for event in session.prompt("sleep 20000"):
                        if isinstance(event, tether.TurnEnded):
                            stop = event.stop_reason
                    return stop

                task = asyncio.ensure_future(turn())
                for _ in range(500):
                    if (await session.status())["status"] == "running":
                        break
                    await asyncio.sleep(0.01)
                assert await session.cancel() is True
                assert await task == "cancelled"
                again = await session.status()
                assert again["ownerPid"] == first["ownerPid"]
            finally:
                await session.close()

    run(main())


def test_abandoning_the_iterator_cancels_the_turn(tether_home: Path, project_dir: Path) -> None:
    """Cancelling the consuming task cancels the turn in the owner; the session stays usable."""

    async def main() -> None:
        async with tether.Client(home=tether_home) as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:

                async def consume() -> None:
                    async for _event in session.prompt("sleep 20000"):
                        pass

                task = asyncio.ensure_future(consume())
                for _ in range(500):
                    if (await session.status())["status"] == "running":
                        break
                    await asyncio.sleep(0.01)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                for _ in range(500):
                    if (await session.status())["status"] == "idle":
                        break
                    await asyncio.sleep(0.01)
                assert (await session.status())["status"] == "idle"
                assert await session.run("echo alive") == ("alive", "end_turn")
            finally:
                await session.close()

    run(main())


def test_timeout_raises_typed_error(tether_home: Path, project_dir: Path) -> None:
    """A prompt timeout raises PromptTimeout (exit code 3 class) and the session survives."""

    async def main() -> None:
        async with tether.Client(home=tether_home) as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:
                with pytest.raises(PromptTimeout) as info:
                    await session.run("sleep 20000", timeout=0.3)
                assert info.value.exit_code == 3
                assert await session.run("echo after") == ("after", "end_turn")
            finally:
                await session.close()

    run(main())


def test_public_api_is_pinned() -> None:
    """The public names of `tether` are exactly these (a change is an API decision)."""
    assert set(tether.__all__) == {
        "AgentMessageChunk",
        "AgentNotification",
        "AgentThoughtChunk",
        "Client",
        "ElicitationRequested",
        "Event",
        "JournalRecord",
        "PermissionRequested",
        "Plan",
        "Question",
        "QuestionResolved",
        "Session",
        "SessionEnded",
        "SessionInfoUpdate",
        "SessionUpdate",
        "TetherError",
        "ToolCall",
        "ToolCallUpdate",
        "TurnEnded",
        "UsageUpdate",
        "__version__",
    }
    for name in tether.__all__:
        assert getattr(tether, name) is not None


def test_a_consumer_that_falls_behind_still_gets_every_event_and_the_end(
    tether_home: Path, project_dir: Path
) -> None:
    """The owner lets a connection that falls 8 MiB behind go (``lagged``); the turn
    goes on, and the library reads the rest of it from the journal: every chunk once, in
    order, then TurnEnded (the iteration just stopped, events missing, no TurnEnded)."""
    from tether.state.journal import store
    from tether.state.registry import Registry

    def turn_ended(key: str) -> bool:
        with Registry() as registry:
            return any('"turn_ended"' in line for _, line in store.iter_lines(registry._db, key))

    async def main() -> None:
        async with tether.Client(home=tether_home) as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:
                chunks: list[str] = []
                events = []
                async for event in session.prompt("stream 200000"):
                    if not events:  # stop reading until the whole turn is over
                        for _ in range(600):
                            if await asyncio.to_thread(turn_ended, session.key):
                                break
                            await asyncio.sleep(0.1)
                    events.append(event)
                    if isinstance(event, tether.AgentMessageChunk):
                        chunks.append(event.text)
                assert chunks == [f"chunk {i}\n" for i in range(200000)]
                assert isinstance(events[-1], tether.TurnEnded)
                assert events[-1].stop_reason == "end_turn"
            finally:
                await session.close()

    run(main())
