"""The ACP driver's turn logic over the in-memory transport: no process, no pipe."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tether.acp.connection import AgentConnection, ClientOptions
from tether.acp.in_memory import FakeAgent
from tether.acp.policy import PermissionMode
from tether.acp.turn_state import TurnState
from tether.errors import AgentExited, AgentUnresponsive, ClosedResourceError, PromptTimeout

Frame = dict[str, Any]
TEXT = [{"type": "text", "text": "hi"}]


def texts(frames: list[Frame]) -> list[str]:
    out = []
    for frame in frames:
        update = frame.get("params", {}).get("update", {})
        if update.get("sessionUpdate") == "agent_message_chunk":
            out.append(update["content"]["text"])
    return out


async def connect(agent: FakeAgent, **options: Any) -> tuple[AgentConnection, str, list[Frame]]:
    """A connection through the handshake; returns it, the session id and the out-of-turn log."""
    conn = AgentConnection(agent.transport, "/nonexistent", ClientOptions(**options))
    outside: list[Frame] = []
    conn.set_fallback_listener(outside.append)
    await conn.initialize()
    session_id = (await conn.new_session("/nonexistent"))["sessionId"]
    return conn, session_id, outside


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]  # a coroutine function's result


async def settle_loop() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_turn_streams_updates_in_order_and_returns_stop_reason() -> None:
    """Updates of the turn reach its listener in arrival order; the answer ends the turn."""

    async def main() -> None:
        agent = FakeAgent()
        conn, sid, _ = await connect(agent)
        seen: list[Frame] = []
        turn = asyncio.ensure_future(conn.prompt(sid, TEXT, seen.append))
        prompt = await agent.next_prompt()
        for i in range(5):
            agent.chunk(f"c{i}")
        agent.answer(prompt["id"], {"stopReason": "end_turn"})
        result = await turn
        assert result.stop_reason == "end_turn"
        assert texts(seen) == ["c0", "c1", "c2", "c3", "c4"]
        assert not conn.active_turn(sid)

    run(main)


def test_cancel_sends_one_session_cancel_and_answers_permissions_cancelled() -> None:
    """cancel(): session/cancel exactly once, a pending permission answered `cancelled`,
    and the turn ends with the agent's own `cancelled` answer."""

    async def main() -> None:
        agent = FakeAgent()
        hook_started = asyncio.Event()

        async def hook(_params: Frame) -> Frame | None:
            hook_started.set()
            await asyncio.sleep(3600)
            return None

        conn, sid, _ = await connect(
            agent, permission_hook=hook, permission_mode=PermissionMode.APPROVE_READS
        )
        turn = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda f: None))
        prompt = await agent.next_prompt()
        perm = agent.ask_permission()
        await hook_started.wait()
        assert conn.cancel(sid) is True
        assert conn.cancel(sid) is True  # a second cancel sends nothing more
        answer = await agent.answer_to(perm)
        assert answer["result"] == {"outcome": {"outcome": "cancelled"}}
        agent.answer(prompt["id"], {"stopReason": "cancelled"})
        assert (await turn).stop_reason == "cancelled"
        assert len(agent.cancels) == 1
        assert conn.cancel(sid) is False  # no turn running

    run(main)


def _order(agent: FakeAgent, perm: str) -> list[str]:
    """What the client wrote after the prompt: ``cancel`` and ``answer`` (to ``perm``)."""
    out = []
    for frame in agent.frames:
        if frame.get("method") == "session/cancel":
            out.append("cancel")
        elif "method" not in frame and frame.get("id") == perm:
            out.append("answer")
    return out


@pytest.mark.parametrize("how", ["cancel", "task-cancelled"])
def test_issue21_item12_session_cancel_goes_before_the_cancelled_permission_answer(
    how: str,
) -> None:
    """ACP's order: `session/cancel` first, then the pending permission answered
    `cancelled` -- an agent that heard the answer first could end the turn `end_turn`."""

    async def main() -> None:
        agent = FakeAgent()
        hook_started = asyncio.Event()

        async def hook(_params: Frame) -> Frame | None:
            hook_started.set()
            await asyncio.sleep(3600)
            return None

        conn, sid, _ = await connect(agent, permission_hook=hook)
        turn = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda f: None))
        prompt = await agent.next_prompt()
        perm = agent.ask_permission()
        await hook_started.wait()
        if how == "cancel":
            conn.cancel(sid)
        else:
            turn.cancel()
        await agent.answer_to(perm)
        assert _order(agent, perm) == ["cancel", "answer"]
        agent.answer(prompt["id"], {"stopReason": "cancelled"})
        with contextlib.suppress(asyncio.CancelledError):
            await turn

    run(main)


def test_issue21_item8_a_cancel_ignored_past_the_grace_ends_the_turn_and_retires() -> None:
    """An agent that ignores session/cancel: after `cancel_grace` the turn ends
    `cancelled` (cancel_honoured False), the request is given up and the connection
    retired (AgentUnresponsive on every later use)."""

    async def main() -> None:
        agent = FakeAgent()
        conn, sid, _ = await connect(agent, cancel_grace=0.05)
        turn = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda f: None))
        await agent.next_prompt()
        assert conn.cancel(sid) is True
        result = await turn  # the agent never answers
        assert result.stop_reason == "cancelled"
        assert result.cancel_honoured is False
        assert len(agent.cancels) == 1
        assert agent.cancel_requests  # given up: $/cancel_request too
        assert conn.is_broken
        assert conn.turn_state(sid) is TurnState.RETIRED
        with pytest.raises(AgentUnresponsive):
            await conn.prompt(sid, TEXT, lambda f: None)

    run(main)


def test_issue21_item8_a_cancel_honoured_within_the_grace_says_so() -> None:
    """An agent that ends the cancelled turn in time: cancel_honoured True, the
    connection stays usable; a turn with no cancel says None."""

    async def main() -> None:
        agent = FakeAgent()
        conn, sid, _ = await connect(agent, cancel_grace=30.0)
        turn = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda f: None))
        prompt = await agent.next_prompt()
        conn.cancel(sid)
        agent.answer(prompt["id"], {"stopReason": "cancelled"})
        assert (await turn).cancel_honoured is True
        assert not conn.is_broken
        turn = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda f: None))
        agent.answer((await agent.next_prompt())["id"], {"stopReason": "end_turn"})
        assert (await turn).cancel_honoured is None

    run(main)


def test_permission_requested_after_cancel_is_answered_cancelled() -> None:
    """A permission request that arrives after the turn was cancelled is answered `cancelled`."""

    async def main() -> None:
        agent = FakeAgent()
        conn, sid, _ = await connect(agent, permission_mode=PermissionMode.APPROVE_ALL)
        turn = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda f: None))
        prompt = await agent.next_prompt()
        conn.cancel(sid)
        perm = agent.ask_permission()
        assert (await agent.answer_to(perm))["result"]["outcome"]["outcome"] == "cancelled"
        agent.answer(prompt["id"], {"stopReason": "cancelled"})
        await turn

    run(main)


def test_ceiling_abandons_and_late_answer_and_trailing_updates_reach_no_turn() -> None:
    """A turn past its ceiling is abandoned (one session/cancel); its trailing updates and
    late answer never reach the next turn, which starts only after the late answer."""

    async def main() -> None:
        agent = FakeAgent()
        conn, sid, outside = await connect(agent)
        first: list[Frame] = []
        task = asyncio.ensure_future(conn.prompt(sid, TEXT, first.append, ceiling=0.05))
        old = await agent.next_prompt()
        with pytest.raises(PromptTimeout):
            await task
        assert len(agent.cancels) == 1
        assert conn.has_abandoned_turn(sid)
        assert conn.turn_state(sid) is TurnState.ABANDONED

        second: list[Frame] = []
        turn2 = asyncio.ensure_future(conn.prompt(sid, TEXT, second.append))
        await settle_loop()
        # The next prompt is held back while the abandoned one is unanswered.
        assert [f for f in agent.frames if f.get("method") == "session/prompt"] == [old]
        agent.chunk("OLD")
        agent.answer(old["id"], {"stopReason": "end_turn"})  # late: dropped by id
        new = await agent.next_prompt()
        agent.chunk("NEW")
        agent.answer(new["id"], {"stopReason": "end_turn"})
        result = await turn2
        assert result.stop_reason == "end_turn"
        assert texts(second) == ["NEW"]
        assert texts(first) == []
        assert texts(outside) == ["OLD"]
        assert conn.rpc.stats.stale_responses == 1
        assert conn.turn_state(sid) is TurnState.IDLE

    run(main)


def test_abandoned_turn_never_answered_retires_the_connection() -> None:
    """If the agent never answers an abandoned turn within the grace, the connection is
    retired: the next prompt raises AgentUnresponsive and nothing is sent."""

    async def main() -> None:
        agent = FakeAgent()
        conn, sid, _ = await connect(agent, abandoned_turn_grace=0.05)
        task = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda f: None, ceiling=0.05))
        await agent.next_prompt()
        with pytest.raises(PromptTimeout):
            await task
        with pytest.raises(AgentUnresponsive):
            await conn.prompt(sid, TEXT, lambda f: None)
        assert conn.is_broken
        assert conn.turn_state(sid) is TurnState.RETIRED
        assert len([f for f in agent.frames if f.get("method") == "session/prompt"]) == 1
        assert await conn.settle(sid) is False

    run(main)


def test_settle_returns_true_once_the_late_answer_came() -> None:
    """settle() is True at once with no abandoned turn, and after the late answer."""

    async def main() -> None:
        agent = FakeAgent()
        conn, sid, _ = await connect(agent, abandoned_turn_grace=3600)
        assert await conn.settle(sid) is True
        task = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda f: None))
        old = await agent.next_prompt()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(agent.cancels) == 1
        waiting = asyncio.ensure_future(conn.settle(sid))
        await settle_loop()
        assert not waiting.done()
        agent.answer(old["id"], {"stopReason": "cancelled"})
        assert await waiting is True
        assert not conn.has_abandoned_turn(sid)
        assert conn.turn_state(sid) is TurnState.IDLE

    run(main)


def test_task_cancellation_abandons_and_answers_pending_permissions_cancelled() -> None:
    """Cancelling the prompt's task abandons the turn and answers its permission request
    `cancelled` before the cancellation propagates."""

    async def main() -> None:
        agent = FakeAgent()

        async def hook(_params: Frame) -> Frame | None:
            await asyncio.sleep(3600)
            return None

        conn, sid, _ = await connect(agent, permission_hook=hook)
        task = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda f: None))
        await agent.next_prompt()
        perm = agent.ask_permission()
        await settle_loop()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await agent.answer_to(perm))["result"]["outcome"]["outcome"] == "cancelled"
        assert len(agent.cancels) == 1

    run(main)


def test_cancel_request_answers_minus_32800_and_stops_the_hook() -> None:
    """$/cancel_request for a pending permission request answers it -32800, once."""

    async def main() -> None:
        agent = FakeAgent()
        hook_cancelled = asyncio.Event()

        async def hook(_params: Frame) -> Frame | None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                hook_cancelled.set()
                raise
            return None

        conn, sid, _ = await connect(agent, permission_hook=hook)
        turn = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda f: None))
        prompt = await agent.next_prompt()
        perm = agent.ask_permission()
        await settle_loop()
        agent.notify("$/cancel_request", {"requestId": perm})
        answer = await agent.answer_to(perm)
        assert answer["error"]["code"] == -32800
        await hook_cancelled.wait()
        agent.notify("$/cancel_request", {"requestId": perm})  # already answered: ignored
        agent.answer(prompt["id"], {"stopReason": "end_turn"})
        await turn
        assert [f.get("id") for f in agent.frames].count(perm) == 1

    run(main)


def test_listener_exception_fails_the_turn_not_the_reader() -> None:
    """A listener that raises ends its turn with that exception (abandoned, one
    session/cancel); the reader goes on and the connection serves the next turn."""

    class Boom(Exception):
        pass

    def bad(_frame: Frame) -> None:
        raise Boom

    async def main() -> None:
        agent = FakeAgent()
        conn, sid, outside = await connect(agent)
        task = asyncio.ensure_future(conn.prompt(sid, TEXT, bad))
        old = await agent.next_prompt()
        agent.chunk("x")
        with pytest.raises(Boom):
            await task
        assert len(agent.cancels) == 1
        agent.chunk("trailing")
        agent.answer(old["id"], {"stopReason": "cancelled"})
        seen: list[Frame] = []
        turn = asyncio.ensure_future(conn.prompt(sid, TEXT, seen.append))
        new = await agent.next_prompt()
        agent.chunk("fine")
        agent.answer(new["id"], {"stopReason": "end_turn"})
        assert (await turn).stop_reason == "end_turn"
        assert texts(seen) == ["fine"]
        assert texts(outside) == ["trailing"]
        assert conn.observer_errors == 1

    run(main)


def test_frame_observer_exception_fails_the_turn() -> None:
    """An on_frame observer that raises (a closed stdout) fails the running turn."""

    async def main() -> None:
        agent = FakeAgent()
        broken = False

        def observe(direction: str, frame: Frame) -> None:
            if broken and direction == "in":
                raise BrokenPipeError

        conn, sid, _ = await connect(agent, on_frame=observe)
        task = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda f: None))
        await agent.next_prompt()
        broken = True
        agent.chunk("x")
        with pytest.raises(BrokenPipeError):
            await task
        assert len(agent.cancels) == 1
        assert not conn.is_broken

    run(main)


def test_eof_fails_the_turn_at_once_with_the_exit_status() -> None:
    """The agent exiting mid-turn fails it with AgentExited carrying the exit code."""

    async def main() -> None:
        agent = FakeAgent()
        conn, sid, _ = await connect(agent, liveness_interval=3600)
        agent.transport.stderr = "boom"
        task = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda f: None))
        await agent.next_prompt()
        agent.transport.exit(9)
        with pytest.raises(AgentExited) as info:
            await task
        assert info.value.fields["exit_code"] == 9
        assert info.value.fields["stderr_tail"] == "boom"
        assert conn.is_broken

    run(main)


def test_closed_connection_ignores_the_agent() -> None:
    """After aclose nothing the agent says reaches a listener; requests are refused."""

    async def main() -> None:
        agent = FakeAgent()
        conn, sid, outside = await connect(agent)
        await conn.aclose()
        assert agent.transport.stdin_closed
        agent.chunk("late")
        await settle_loop()
        assert outside == []
        with pytest.raises(ClosedResourceError):
            await conn.prompt(sid, TEXT, lambda f: None)

    run(main)
