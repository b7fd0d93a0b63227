"""``tether acp`` and terminate through clients no one here wrote, and the other doors.

The official ACP Python SDK's client connection drives ``tether acp`` (its pydantic
models parse every answer); ``tether sessions terminate`` and the library's
``Session.terminate`` / ``Client.terminate_session`` reach the same operation.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tests._cli import run_tether
from tests.integration._acp_peer import sdk_door

import tether
from tether import operations

pytestmark = pytest.mark.integration
T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture(autouse=True)
def _close_everything() -> Iterator[None]:
    yield
    for record in operations.list_sessions():
        operations.close_session(record["key"])


class _Recorder:
    """An SDK ``Client`` that records what the agent (the door) tells it."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.ext: list[tuple[str, dict[str, Any]]] = []
        self.got_ext = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.ext.append((method, params))
        self.got_ext.set()

    async def request_permission(self, *_: Any, **__: Any) -> Any:  # pragma: no cover
        raise AssertionError("the owner's policy decides permissions")

    def on_connect(self, conn: Any) -> None:
        pass


def test_the_official_python_sdk_drives_tether_acp(project_dir: Path) -> None:
    """The SDK's ClientSideConnection: initialize, new, prompt, list, load, the
    terminate extension and the ended notification."""
    import acp

    async def main() -> None:
        recorder = _Recorder()
        async with sdk_door(recorder, project_dir) as (conn, _proc):
            init = await conn.initialize(protocol_version=1)
            assert init.agent_capabilities is not None
            assert init.agent_capabilities.load_session is True
            new = await conn.new_session(cwd=str(project_dir), mcp_servers=[])
            answer = await conn.prompt(
                session_id=new.session_id, prompt=[acp.text_block("echo from the sdk")]
            )
            assert answer.stop_reason == "end_turn"
            chunks = [
                u.content.text
                for u in recorder.updates
                if u.session_update == "agent_message_chunk"
            ]
            assert chunks == ["from the sdk"]
            listed = await conn.list_sessions()
            assert [s.session_id for s in listed.sessions] == [new.session_id]
            recorder.updates.clear()
            await conn.load_session(cwd=str(project_dir), session_id=new.session_id)
            kinds = [u.session_update for u in recorder.updates]
            assert "user_message_chunk" in kinds
            result = await conn.ext_method(
                "tether/session/terminate", {"sessionId": new.session_id}
            )
            assert result["terminated"] is True
            async with asyncio.timeout(30):
                await recorder.got_ext.wait()
            method, params = recorder.ext[0]
            assert method == "tether/session/ended"
            assert params["reason"] == "terminated"

    _run(main())


def test_sessions_terminate_twice_from_the_cli(project_dir: Path) -> None:
    """`sessions terminate`: ends the session at once; again: a no-op saying how it ended."""
    assert run_tether("mock", "sessions", "new", cwd=project_dir).returncode == 0
    assert run_tether("mock", "prompt", "echo hi", cwd=project_dir).returncode == 0
    first = run_tether("--format", "json", "mock", "sessions", "terminate", cwd=project_dir)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout.strip().splitlines()[-1])
    assert report["terminated"] is True
    assert report["alreadyEnded"] is False
    assert report["survivors"] == []
    second = run_tether("mock", "sessions", "terminate", cwd=project_dir)
    assert second.returncode == 0
    assert "already ended (terminated)" in second.stdout
    missing = run_tether("mock", "sessions", "terminate", "-s", "nope", cwd=project_dir)
    assert missing.returncode == 4


def test_terminate_with_no_owner_running_records_the_end_once(project_dir: Path) -> None:
    """No owner serves (it retired): terminate takes the session's lock, reaps by proof
    and records session_ended once; the second call reports it."""

    async def main() -> None:
        async with tether.Client(ttl=0.2) as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            await session.run("echo hi")
            while (await session.status())["ownerPid"] is not None:  # noqa: ASYNC110 -- polling the owner's status is what we observe; it retires after its idle TTL
                await asyncio.sleep(0.05)
            first = await session.terminate()
            assert first["terminated"] is True
            assert first["alreadyEnded"] is False
            assert "reconciled" in first
            second = await client.terminate_session(session.key)
            assert second["alreadyEnded"] is True
            assert second["reason"] == "terminated"
            ended = [e async for e in session.watch(from_seq=1, follow=False)]
            assert sum(isinstance(e, tether.SessionEnded) for e in ended) == 1

    _run(main())


def test_library_terminate_ends_a_warm_session(project_dir: Path) -> None:
    """Session.terminate(): the warm owner ends the tree at once and reports it."""

    async def main() -> None:
        async with tether.Client() as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            await session.run("echo warm")
            result = await session.terminate()
            assert result["terminated"] is True
            assert result["agentWasRunning"] is True
            assert result["survivors"] == []
            assert (await session.status())["status"] == "closed"

    _run(main())


def test_two_terminates_at_once_end_the_session_once(project_dir: Path) -> None:
    """Two operators terminate together: one ends it, the other reports that end; the
    journal holds one session_ended."""
    from concurrent.futures import ThreadPoolExecutor

    async def make() -> str:
        async with tether.Client() as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            await session.run("echo warm")
            return session.key

    key = _run(make())
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: operations.terminate(key), range(2)))
    assert sorted(r["alreadyEnded"] for r in results) == [False, True]
    assert {r["reason"] for r in results} == {"terminated"}

    from tether.state.journal import store
    from tether.state.registry import Registry

    with Registry() as registry:
        lines = [line for _, line in store.iter_lines(registry._db, key)]
    assert sum('"kind":"session_ended"' in line for line in lines) == 1
