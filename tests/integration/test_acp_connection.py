"""The async ACP connection against the real mock agent: request hygiene and turn rules."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.acp_schema import schema_errors

from tether.acp.connection import ClientOptions
from tether.acp.policy import PermissionMode
from tether.errors import AgentExited, PromptTimeout
from tether.live_agent import AgentConfig, LiveAgent
from tether.state.registry import Registry

pytestmark = pytest.mark.integration

MOCK = [sys.executable, "-m", "tether.testing.mock_agent"]


class Recorder:
    """Collects every frame in both directions, and checks what we send against the schema."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, dict[str, Any]]] = []
        self.methods: dict[int, str] = {}

    def __call__(self, direction: str, frame: dict[str, Any]) -> None:
        self.frames.append((direction, frame))
        if direction == "out":
            if "method" in frame and "id" in frame:
                self.methods[frame["id"]] = frame["method"]
            assert schema_errors(frame, "client") == [], frame

    def sent(self, method: str) -> list[dict[str, Any]]:
        return [f for d, f in self.frames if d == "out" and f.get("method") == method]


@asynccontextmanager
async def live_agent(
    cwd: Path, *flags: str, **client: Any
) -> AsyncIterator[tuple[LiveAgent, Recorder]]:
    rec = Recorder()
    registry = Registry()
    cfg = AgentConfig(
        argv=[*MOCK, *flags], cwd=str(cwd), client=ClientOptions(on_frame=rec, **client), grace=0.5
    )
    live = await LiveAgent.start(cfg, registry)
    try:
        yield live, rec
    finally:
        report = await live.aclose(close_session=True)
        registry.close()
        assert report.survivors == ()


def texts(updates: list[dict[str, Any]]) -> str:
    out = []
    for frame in updates:
        update = frame.get("params", {}).get("update", {})
        if update.get("sessionUpdate") == "agent_message_chunk":
            out.append(update["content"]["text"])
    return "".join(out)


def run(coro: Callable[[], Any]) -> Any:
    return asyncio.run(coro())


def test_stale_id_cascade(project_dir: Path) -> None:
    """A prompt abandoned at its ceiling is answered late; the next prompt gets its own answer."""

    async def main() -> None:
        async with live_agent(project_dir) as (live, rec):
            first: list[dict[str, Any]] = []
            with pytest.raises(PromptTimeout):
                await live.prompt(
                    [{"type": "text", "text": "late 600 stale answer"}], first.append, ceiling=0.2
                )
            assert live.conn.rpc.pending == {}
            assert len(rec.sent("session/cancel")) == 1
            second: list[dict[str, Any]] = []
            result = await live.prompt([{"type": "text", "text": "echo fresh"}], second.append)
            assert result.stop_reason == "end_turn"
            assert texts(second) == "fresh"  # never "stale answer", never empty
            assert live.conn.rpc.pending == {}
            assert live.conn.rpc.stats.stale_responses == 1
            # Still exactly one cancel: the second turn did not re-send it.
            assert len(rec.sent("session/cancel")) == 1

    run(main)


def test_cancellation_abandons_once_and_connection_stays_usable(project_dir: Path) -> None:
    """Cancelling the awaiting task sends session/cancel once; the next turn works."""

    async def main() -> None:
        async with live_agent(project_dir) as (live, rec):
            task = asyncio.ensure_future(
                live.prompt([{"type": "text", "text": "sleep 10000"}], lambda f: None)
            )
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert live.conn.rpc.pending == {}
            assert len(rec.sent("session/cancel")) == 1
            updates: list[dict[str, Any]] = []
            result = await live.prompt([{"type": "text", "text": "echo next"}], updates.append)
            assert (result.stop_reason, texts(updates)) == ("end_turn", "next")

    run(main)


def test_cancel_keeps_session_and_ends_turn_cancelled(project_dir: Path) -> None:
    """`cancel()` sends session/cancel; the turn ends with stopReason `cancelled`; nothing dies."""

    async def main() -> None:
        async with live_agent(project_dir) as (live, rec):
            pid = live.proc.pid
            task = asyncio.ensure_future(
                live.prompt([{"type": "text", "text": "sleep 10000"}], lambda f: None)
            )
            await asyncio.sleep(0.2)
            assert live.cancel() is True
            assert live.cancel() is True  # idempotent: still exactly one notification
            result = await task
            assert result.stop_reason == "cancelled"
            assert len(rec.sent("session/cancel")) == 1
            assert live.alive
            assert live.proc.pid == pid

    run(main)


def test_pending_permission_answered_cancelled_on_cancel(project_dir: Path) -> None:
    """When a turn is cancelled, a permission request still waiting is answered `cancelled`."""

    async def main() -> None:
        asked = asyncio.Event()

        async def never_decides(_params: dict[str, Any]) -> dict[str, Any] | None:
            asked.set()
            await asyncio.Event().wait()
            return None

        async with live_agent(project_dir, permission_hook=never_decides) as (live, rec):
            task = asyncio.ensure_future(
                live.prompt([{"type": "text", "text": "tool execute"}], lambda f: None)
            )
            await asyncio.wait_for(asked.wait(), 10)
            live.cancel()
            result = await task
            assert result.stop_reason == "cancelled"
            answers = [
                f
                for d, f in rec.frames
                if d == "out"
                and "result" in f
                and isinstance(f["result"], dict)
                and "outcome" in f["result"]
            ]
            assert answers[-1]["result"] == {"outcome": {"outcome": "cancelled"}}

    run(main)


def test_cancel_request_for_pending_permission_answered_32800(project_dir: Path) -> None:
    """An agent's `$/cancel_request` for its still-undecided request is answered -32800."""

    async def main() -> None:
        async def never_decides(_params: dict[str, Any]) -> dict[str, Any] | None:
            await asyncio.Event().wait()
            return None

        async with live_agent(project_dir, permission_hook=never_decides) as (live, _rec):
            updates: list[dict[str, Any]] = []
            result = await live.prompt([{"type": "text", "text": "cancel-request"}], updates.append)
            assert result.stop_reason == "end_turn"
            assert "cancel_request: answered -32800" in texts(updates)
            assert live.conn.rpc.incoming_pending() == {}

    run(main)


def test_permission_hook_decides_undecided_requests(project_dir: Path) -> None:
    """Under approve-reads, a hook decides what the mode does not; its answer is used."""

    async def main() -> None:
        async def allow(params: dict[str, Any]) -> dict[str, Any]:
            option = next(o for o in params["options"] if o["kind"] == "allow_once")
            return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}

        async with live_agent(
            project_dir, permission_mode=PermissionMode.APPROVE_READS, permission_hook=allow
        ) as (live, _rec):
            updates: list[dict[str, Any]] = []
            await live.prompt([{"type": "text", "text": "tool execute"}], updates.append)
            assert "permission: allowed" in texts(updates)

    run(main)


def test_dead_agent_ends_turn_at_once(project_dir: Path) -> None:
    """An agent dying mid-turn fails the turn promptly with its exit code, not after a timeout."""

    async def main() -> None:
        async with live_agent(project_dir, liveness_interval=30.0) as (live, _rec):
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(AgentExited) as info:
                await live.prompt([{"type": "text", "text": "crash 9"}], lambda f: None)
            assert info.value.fields["exit_code"] == 9
            assert loop.time() - started < 5
            assert live.conn.rpc.pending == {}

    run(main)


def test_updates_arrive_in_order(project_dir: Path) -> None:
    """10,000 streamed chunks reach the listener complete and in arrival order."""

    async def main() -> None:
        async with live_agent(project_dir) as (live, _rec):
            updates: list[dict[str, Any]] = []
            await live.prompt([{"type": "text", "text": "stream 10000 c"}], updates.append)
            assert texts(updates) == "".join(f"c {i}\n" for i in range(10000))

    run(main)


def test_modes_config_and_close(project_dir: Path) -> None:
    """set_mode, set_config_option and session/close are sent where advertised."""

    async def main() -> None:
        async with live_agent(project_dir, "--modes", "--config-options", "--close-session") as (
            live,
            rec,
        ):
            assert live.session_result["modes"]["currentModeId"] == "default"
            await live.conn.set_mode(live.session_id, "plan")
            answer = await live.conn.set_config_option(live.session_id, "fast", True)
            assert any(o["id"] == "fast" for o in answer["configOptions"])
            assert live.conn.can_close
        assert len(rec.sent("session/close")) == 1

    run(main)


def test_resume_after_restart(project_dir: Path) -> None:
    """A second agent run resumes the ACP session when the agent advertises load."""

    async def main() -> None:
        registry = Registry()
        cfg = AgentConfig(argv=[*MOCK, "--load-session"], cwd=str(project_dir), grace=0.5)
        first = await LiveAgent.start(cfg, registry)
        session_id = first.session_id
        await first.aclose(close_session=False)
        second = await LiveAgent.start(cfg, registry, resume_session_id=session_id)
        try:
            assert second.resumed
            assert second.session_id == session_id
        finally:
            await second.aclose(close_session=True)
            registry.close()

    run(main)
