"""One suite, two clients: ``tether.Client`` on a local home, and ``tether.Client(url=…)``
on a real ``tether serve`` of that home (issue 25 item 4). Every test runs both ways and
asserts the same events, results and exception classes."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.integration._serve import mock_with_modes_config, spawn_gateway

import tether
from tether.errors import (
    AgentRequestError,
    AlreadyAnswered,
    NoSession,
    PermissionDenied,
    PromptTimeout,
    ResourceError,
)

pytestmark = pytest.mark.integration
pytest.importorskip("starlette", reason="tether serve needs the serve extra")

MakeClient = Callable[..., tether.Client]
UNKNOWN = "f" * 64  # a well-formed session id nobody has


@pytest.fixture(params=["local", "remote"])
def make_client(request: pytest.FixtureRequest, tether_home: Path) -> Iterator[MakeClient]:
    """``Client`` of the test's home: in-process (local), or through a gateway (remote)."""
    if request.param == "local":
        yield lambda **kw: tether.Client(home=tether_home, **kw)
        return
    gw = spawn_gateway(tether_home)
    try:
        yield lambda **kw: tether.Client(url=gw.url, token=gw.token, **kw)
    finally:
        try:
            gw.close_all()
        finally:
            gw.stop()


def chunks(events: list[tether.Event]) -> list[str]:
    return [e.text for e in events if isinstance(e, tether.AgentMessageChunk)]


async def until_status(session: tether.Session, wanted: str) -> None:
    """Poll the session's status until it is ``wanted`` (bounded in count)."""
    for _ in range(1500):
        if (await session.status())["status"] == wanted:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the session never became {wanted}")


def test_prompt_streams_typed_events_and_close_proves_extinction(
    make_client: MakeClient, project_dir: Path
) -> None:
    """A turn yields typed events in order, ending with TurnEnded; status, the session
    list and close's report (no survivors) are the same both ways."""

    async def main() -> None:
        async with make_client() as client:
            session = await client.ensure_session("mock", cwd=project_dir, name="lib")
            try:
                events = [e async for e in session.prompt("stream 3 x ; tool read ; plan")]
                assert chunks(events)[:3] == ["x 0\n", "x 1\n", "x 2\n"]
                assert any(isinstance(e, tether.ToolCall) for e in events)
                assert any(isinstance(e, tether.Plan) for e in events)
                assert isinstance(events[-1], tether.TurnEnded)
                assert events[-1].stop_reason == "end_turn"
                assert await session.run("echo again") == ("again", "end_turn")
                status = await session.status()
                assert status["status"] == "idle"
                assert status["agentPid"] is not None
                listed = await client.sessions()
                assert [(s["key"], s["name"]) for s in listed] == [(session.key, "lib")]
            finally:
                report = await session.close()
            assert report["survivors"] == []

    asyncio.run(main())


def test_watch_history_and_read(make_client: MakeClient, project_dir: Path) -> None:
    """A follower sees every entry once, in seq order, with typed events, until the
    session's end; history and the transcript say the same both ways."""

    async def main() -> None:
        async with make_client() as client:
            session = await client.ensure_session("mock", cwd=project_dir, name="w")
            assert await session.run("echo first") == ("first", "end_turn")
            events: list[tether.Event] = []

            async def follow() -> None:
                async for event in session.watch(from_seq=1):
                    events.append(event)

            watcher = asyncio.ensure_future(follow())
            assert await session.run("stream 3 two") == ("two 0\ntwo 1\ntwo 2\n", "end_turn")
            stored = [e async for e in session.watch(from_seq=1, follow=False)]
            assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
            last_two = [e.seq async for e in session.watch(tail=2, follow=False)]
            assert len(last_two) == 2
            assert last_two[1] == last_two[0] + 1
            history = await session.history()
            assert [t["preview"] for t in history] == ["echo first", "stream 3 two"]
            assert [t["stopReason"] for t in await session.history(limit=1)] == ["end_turn"]
            transcript = await session.read(tail=1)
            assert [(t["prompt"], t["text"]) for t in transcript] == [
                ("stream 3 two", "two 0\ntwo 1\ntwo 2\n")
            ]
            assert (await session.close())["survivors"] == []
            await asyncio.wait_for(watcher, 60)
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert isinstance(events[-1], tether.SessionEnded)
            assert chunks(events) == ["first", "two 0\n", "two 1\n", "two 2\n"]
            turns = [e.stop_reason for e in events if isinstance(e, tether.TurnEnded)]
            assert turns == ["end_turn", "end_turn"]

    asyncio.run(main())


def test_a_callback_answers_the_agents_questions(
    make_client: MakeClient, project_dir: Path
) -> None:
    """A prompt's ``on_question`` sees each permission request; its answer reaches the
    agent, and the turn yields the questions and their resolutions."""
    asked: list[tether.PermissionRequested] = []

    async def decide(question: tether.Question) -> str:
        assert isinstance(question, tether.PermissionRequested)
        asked.append(question)
        return "allow" if question.title == "safe" else "deny"

    async def main() -> None:
        async with make_client() as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:
                prompt = session.prompt("tool edit safe ; tool edit risky", on_question=decide)
                events = [e async for e in prompt]
            finally:
                await session.close()
        assert [q.title for q in asked] == ["safe", "risky"]
        assert [q.tool_kind for q in asked] == ["edit", "edit"]
        assert [o["kind"] for o in asked[0].options] == [
            "allow_once",
            "allow_always",
            "reject_once",
        ]
        assert chunks(events) == ["permission: allowed", "permission: denied"]
        resolved = [e for e in events if isinstance(e, tether.QuestionResolved)]
        assert [r.answer for r in resolved] == ["allow", "deny"]

    asyncio.run(main())


def test_a_question_answered_from_its_event(make_client: MakeClient, project_dir: Path) -> None:
    """With ``control=True`` the question is an event answered with ``answer()``; a
    second answer raises AlreadyAnswered, both ways."""

    async def main() -> None:
        async with make_client() as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:
                events: list[tether.Event] = []
                async for event in session.prompt("tool edit x", control=True):
                    events.append(event)
                    if isinstance(event, tether.PermissionRequested):
                        result = await event.answer("deny")
                        assert result["interaction"]["answer"] == "deny"
                        with pytest.raises(AlreadyAnswered):
                            await event.answer("allow")
                assert chunks(events) == ["permission: denied"]
                nobody = [e async for e in session.prompt("elicit form who?")]
                assert chunks(nobody) == ["elicitation: decline"]  # no controller: policy
            finally:
                await session.close()

    asyncio.run(main())


def test_cancel_from_another_task_keeps_the_session(
    make_client: MakeClient, project_dir: Path
) -> None:
    """``cancel()`` ends the running turn ``cancelled``; the same owner runs the next."""

    async def main() -> None:
        async with make_client() as client:
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
                await until_status(session, "running")
                assert await session.cancel() is True
                assert await task == "cancelled"
                assert (await session.status())["ownerPid"] == first["ownerPid"]
            finally:
                await session.close()

    asyncio.run(main())


def test_leaving_the_loop_cancels_the_turn(make_client: MakeClient, project_dir: Path) -> None:
    """Cancelling the task that iterates a prompt cancels the turn; the session stays."""

    async def main() -> None:
        async with make_client() as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:

                async def consume() -> None:
                    async for _event in session.prompt("sleep 20000"):
                        pass

                task = asyncio.ensure_future(consume())
                await until_status(session, "running")
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await until_status(session, "idle")
                assert await session.run("echo alive") == ("alive", "end_turn")
            finally:
                await session.close()

    asyncio.run(main())


def test_terminate_is_idempotent(make_client: MakeClient, project_dir: Path) -> None:
    """``terminate()`` ends the session at once; again, it reports how it ended."""

    async def main() -> None:
        async with make_client() as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            assert await session.run("echo up") == ("up", "end_turn")
            first = await session.terminate()
            assert first["terminated"] is True
            again = await client.terminate_session(session.key)
            assert again["alreadyEnded"] is True
            assert (await session.status())["status"] == "closed"

    asyncio.run(main())


def test_errors_are_the_same_classes(make_client: MakeClient, project_dir: Path) -> None:
    """An unknown session is NoSession (exit 4), a turn past its timeout PromptTimeout
    (exit 3) and an agent dying mid-turn a ResourceError, whichever way the client reaches
    Tether."""

    async def main() -> None:
        async with make_client() as client:
            with pytest.raises(NoSession) as info:
                await client.terminate_session(UNKNOWN)
            assert info.value.exit_code == 4
            ghost = tether.Session(client, UNKNOWN, "", "mock", str(project_dir))
            with pytest.raises(NoSession):
                await ghost.history()
            session = await client.ensure_session("mock", cwd=project_dir)
            try:
                with pytest.raises(PromptTimeout) as timed:
                    await session.run("sleep 20000", timeout=0.5)
                assert timed.value.exit_code == 3
                assert await session.run("echo after") == ("after", "end_turn")
                with pytest.raises(ResourceError):  # the agent's connection, gone
                    await session.run("crash 3")
            finally:
                await session.close()

    asyncio.run(main())


def test_a_wrong_token_is_permission_denied(tether_home: Path) -> None:
    """A remote Tether refusing the token raises PermissionDenied (``UNAUTHORIZED``,
    exit 5). Remote only: a local client has no token to get wrong."""
    gw = spawn_gateway(tether_home)

    async def main() -> None:
        async with tether.Client(url=gw.url, token="not-the-token-at-all") as bad:
            with pytest.raises(PermissionDenied) as info:
                await bad.sessions()
        assert info.value.detail_code == "UNAUTHORIZED"
        assert info.value.exit_code == 5

    try:
        asyncio.run(main())
    finally:
        gw.stop()


def test_session_records_have_the_same_shape(make_client: MakeClient, project_dir: Path) -> None:
    """``sessions()`` lists the same keys both ways, the cwd resolved."""
    cwd = os.path.realpath(project_dir)

    async def main() -> None:
        async with make_client() as client:
            session = await client.ensure_session("mock", cwd=project_dir, name="k")
            try:
                (item,) = await client.sessions()
                assert set(item) == {"key", "name", "agent", "cwd", "state"}
                assert item["cwd"] == session.cwd == cwd
            finally:
                await session.close()

    asyncio.run(main())


def test_modes_and_config_options(
    make_client: MakeClient, tether_home: Path, project_dir: Path
) -> None:
    """``set_mode`` and ``set_config_option`` reach the agent; a mode it refuses is
    AgentRequestError, both ways."""
    mock_with_modes_config(tether_home)  # the config agent ``mockx``, for the gateway
    argv = [sys.executable, "-m", "tether.testing.mock_agent", "--modes", "--config-options"]

    async def main() -> None:
        async with make_client() as client:
            agent = "mockx" if client.url else argv  # a gateway starts named agents only
            session = await client.ensure_session(agent, cwd=project_dir)
            try:
                await session.set_mode("plan")
                result = await session.set_config_option("model", "mock-large")
                options = result.get("configOptions", [])
                assert any(o.get("currentValue") == "mock-large" for o in options)
                with pytest.raises(AgentRequestError):
                    await session.set_mode("no-such-mode")
            finally:
                await session.close()

    asyncio.run(main())


@pytest.mark.parametrize("control", [False, True], ids=["plain", "control"])
def test_a_closed_session_is_not_prompted(
    make_client: MakeClient, project_dir: Path, control: bool
) -> None:
    """Prompting a session that was closed raises NoSession both ways, controlling or
    not, and does not bring it back."""

    async def main() -> None:
        async with make_client() as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            assert (await session.close())["survivors"] == []
            with pytest.raises(NoSession):
                async for _event in session.prompt("echo no", control=control):
                    pass
            assert (await session.status())["status"] == "closed"

    asyncio.run(main())


def test_a_controlling_prompt_after_the_idle_owner_left(
    make_client: MakeClient, project_dir: Path
) -> None:
    """Once the session's owner retired on its idle TTL, a controlling prompt starts a
    new one and still gets the agent's question to answer (it is not decided by the
    policy before the controller attached)."""

    async def main() -> None:
        async with make_client(ttl=0.3) as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:
                for _ in range(1500):  # until the owner left (bounded)
                    if (await session.status())["ownerPid"] is None:
                        break
                    await asyncio.sleep(0.02)
                assert (await session.status())["ownerPid"] is None
                events: list[tether.Event] = []
                async for event in session.prompt("tool edit x", control=True):
                    events.append(event)
                    if isinstance(event, tether.PermissionRequested):
                        await event.answer("allow")
                assert chunks(events) == ["permission: allowed"]
            finally:
                await session.close()

    asyncio.run(main())
