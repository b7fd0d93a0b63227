"""ACP's newer methods over the in-memory transport: fork, list, delete, logout, and
``$/cancel_request`` for an abandoned request; every frame Tether sends checked against
the stable v1 schema (``session/fork`` is unstable and absent from it: its params are
checked as ``session/new``'s plus ``sessionId``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.acp_schema import schema_errors, validate_def

from tether.acp.connection import AgentConnection, ClientOptions
from tether.acp.in_memory import FakeAgent

Frame = dict[str, Any]
TEXT = [{"type": "text", "text": "hi"}]


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]  # a coroutine function's result


async def connect(agent: FakeAgent, **options: Any) -> AgentConnection:
    conn = AgentConnection(agent.transport, "/work", ClientOptions(**options))
    await conn.initialize()
    return conn


def check_sent(agent: FakeAgent) -> None:
    """Every frame the client sent validates (session/fork: as session/new + sessionId)."""
    for frame in agent.frames:
        if frame.get("method") == "session/fork":
            params = dict(frame["params"])
            assert isinstance(params.pop("sessionId"), str)
            assert validate_def("NewSessionRequest", params) == []
            continue
        if "method" not in frame:
            continue  # answers to the agent's requests: none in these tests
        assert schema_errors(frame, "client") == [], frame


def test_fork_sends_the_session_to_fork_and_returns_the_new_id() -> None:
    """session/fork carries the parent id, cwd and MCP servers; the new id comes back."""

    async def main() -> None:
        agent = FakeAgent(fork=True)
        conn = await connect(agent)
        assert conn.can_fork
        result = await conn.fork_session("sess-1", "/work")
        assert result["sessionId"].startswith("fork-")
        sent = [f for f in agent.frames if f.get("method") == "session/fork"]
        assert sent[0]["params"] == {"sessionId": "sess-1", "cwd": "/work", "mcpServers": []}
        check_sent(agent)

    run(main)


@pytest.mark.parametrize(
    ("call", "method"),
    [
        pytest.param(lambda c: c.fork_session("s", "/work"), "session/fork", id="fork"),
        pytest.param(lambda c: c.list_sessions(), "session/list", id="list"),
        pytest.param(lambda c: c.delete_session("s"), "session/delete", id="delete"),
        pytest.param(lambda c: c.logout(), "logout", id="logout"),
    ],
)
def test_a_method_the_agent_does_not_advertise_is_refused_without_sending(
    call: Callable[[AgentConnection], Awaitable[Any]], method: str
) -> None:
    """Without the capability nothing is sent: NotAdvertised names the method."""
    from tether.errors import NotAdvertised

    async def main() -> None:
        agent = FakeAgent()
        conn = await connect(agent)
        with pytest.raises(NotAdvertised) as info:
            await call(conn)
        assert info.value.fields["method"] == method
        assert [f.get("method") for f in agent.frames] == ["initialize"]

    run(main)


def test_list_delete_and_logout_when_advertised() -> None:
    """session/list (with cwd and cursor), session/delete and logout are sent as the
    schema has them, and their answers come back."""

    async def main() -> None:
        agent = FakeAgent(list_sessions=True, delete=True, logout=True)
        conn = await connect(agent)
        page = await conn.list_sessions(cwd="/work", cursor="c1")
        assert page["sessions"][0]["sessionId"] == "sess-1"
        await conn.delete_session("sess-1")
        await conn.logout()
        methods = [f.get("method") for f in agent.frames]
        assert methods == ["initialize", "session/list", "session/delete", "logout"]
        assert agent.frames[1]["params"] == {"cwd": "/work", "cursor": "c1"}
        check_sent(agent)

    run(main)


def test_an_abandoned_prompt_gets_session_cancel_then_cancel_request() -> None:
    """A turn abandoned by its caller: session/cancel once, then $/cancel_request for
    that request id; a late answer settles the session for the next turn."""

    async def main() -> None:
        agent = FakeAgent()
        conn = await connect(agent)
        sid = (await conn.new_session("/work"))["sessionId"]
        turn = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda _f: None))
        prompt = await agent.next_prompt()
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(agent.cancels) == 1
        assert [f["params"] for f in agent.cancel_requests] == [{"requestId": prompt["id"]}]
        methods = [f.get("method") for f in agent.frames]
        assert methods.index("session/cancel") < methods.index("$/cancel_request")
        agent.answer(prompt["id"], {"stopReason": "cancelled"})
        assert await conn.settle(sid)
        check_sent(agent)

    run(main)


def test_an_abandoned_handshake_request_gets_cancel_request_only() -> None:
    """A request other than a prompt that times out: no session/cancel (there is no
    turn), only $/cancel_request naming it."""
    from tether.errors import HandshakeTimeout

    async def main() -> None:
        agent = FakeAgent(list_sessions=True)
        conn = await connect(agent, handshake_timeout=0.05)
        agent.list_sessions_hangs = True
        with pytest.raises(HandshakeTimeout):
            await conn.list_sessions()
        await asyncio.sleep(0)
        request = next(f for f in agent.frames if f.get("method") == "session/list")
        assert agent.cancels == []
        assert [f["params"] for f in agent.cancel_requests] == [{"requestId": request["id"]}]
        check_sent(agent)

    run(main)


def test_cancel_requests_can_be_turned_off() -> None:
    """ClientOptions(cancel_requests=False): only session/cancel for an abandoned prompt."""

    async def main() -> None:
        agent = FakeAgent()
        conn = await connect(agent, cancel_requests=False)
        sid = (await conn.new_session("/work"))["sessionId"]
        turn = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda _f: None))
        await agent.next_prompt()
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        await asyncio.sleep(0)
        assert len(agent.cancels) == 1
        assert agent.cancel_requests == []

    run(main)


def test_a_boolean_config_option_is_sent_typed() -> None:
    """A boolean value goes out as ``{"type": "boolean", "value": true}`` (stable v1)."""

    async def main() -> None:
        agent = FakeAgent()
        conn = await connect(agent)
        sid = (await conn.new_session("/work"))["sessionId"]
        await conn.set_config_option(sid, "fast", True)
        sent = next(f for f in agent.frames if f.get("method") == "session/set_config_option")
        assert sent["params"] == {
            "sessionId": sid,
            "configId": "fast",
            "value": True,
            "type": "boolean",
        }
        check_sent(agent)

    run(main)


def test_a_session_id_that_is_not_text_is_a_protocol_error() -> None:
    """An agent naming its session with a lone surrogate (valid JSON, no text) is told
    apart as a protocol error, never stored: the state database refused it as an
    unexpected error before. (session/fork's answer is checked the same way.)"""
    from tether.errors import RemoteProtocolError

    async def main() -> None:
        agent = FakeAgent(session_id="bad-\ud800")
        conn = await connect(agent)
        with pytest.raises(RemoteProtocolError, match="not text"):
            await conn.new_session("/work")

    run(main)
