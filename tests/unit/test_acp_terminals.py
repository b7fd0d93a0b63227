"""The ``terminal/*`` protocol half over the in-memory transport, with a fake host.

No processes: :class:`FakeHost` records what it was asked to run and lets the test
play the command (output, exit). The process half is in
``tests/integration/test_terminals.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.acp_schema import schema_errors

from tether.acp import terminals
from tether.acp.connection import AgentConnection, ClientOptions
from tether.acp.in_memory import FakeAgent
from tether.acp.terminals import OutputBuffer, TerminalCommand

Frame = dict[str, Any]


# --- OutputBuffer (no I/O) ------------------------------------------------------------


def test_output_under_the_limit_is_kept_whole() -> None:
    """Output within the limit is returned as written, not truncated."""
    buf = OutputBuffer(10)
    buf.feed(b"hello ")
    buf.feed(b"you")
    assert (buf.text(final=True), buf.truncated, buf.total) == ("hello you", False, 9)


def test_output_over_the_limit_keeps_the_newest_bytes() -> None:
    """Past the limit the oldest bytes go, and truncated says so."""
    buf = OutputBuffer(4)
    buf.feed(b"abcdef")
    buf.feed(b"gh")
    assert (buf.text(final=True), buf.truncated, buf.total) == ("efgh", True, 8)


def test_truncation_cuts_at_a_character_boundary() -> None:
    """A cut through a multi-byte character drops its remains: the text stays valid."""
    buf = OutputBuffer(5)
    buf.feed("aé€b".encode())  # a(1) é(2) €(3) b(1) = 7 bytes; the cut lands inside é
    assert buf.text(final=True) == "€b"
    assert buf.truncated


def test_an_incomplete_character_at_the_end_waits_for_its_other_bytes() -> None:
    """While the command runs, half a character at the end is held back, not mangled."""
    euro = "€".encode()
    buf = OutputBuffer(100)
    buf.feed(b"x" + euro[:2])
    assert buf.text(final=False) == "x"
    buf.feed(euro[2:])
    assert buf.text(final=False) == "x€"


def test_a_zero_limit_keeps_nothing_and_says_truncated() -> None:
    """outputByteLimit 0: nothing kept; any output makes it truncated."""
    buf = OutputBuffer(0)
    assert not buf.truncated
    buf.feed(b"x")
    assert (buf.text(final=True), buf.truncated) == ("", True)


@given(chunks=st.lists(st.binary(max_size=40), max_size=20), limit=st.integers(0, 64))
def test_output_buffer_bounds_and_keeps_a_suffix(chunks: list[bytes], limit: int) -> None:
    """Whatever is fed: at most ``limit`` bytes, a suffix of the stream, truncated iff cut."""
    buf = OutputBuffer(limit)
    for chunk in chunks:
        buf.feed(chunk)
    stream = b"".join(chunks)
    kept = bytes(buf._buf)
    assert len(kept) <= limit
    assert stream.endswith(kept)
    assert buf.truncated == (len(kept) < len(stream))
    buf.text(final=True)
    buf.text(final=False)  # never raises, whatever the bytes


# --- the protocol, with a fake host -------------------------------------------------------


class FakeRun:
    """A terminal command the test plays."""

    def __init__(self, run_id: str, on_output: Callable[[bytes], None]) -> None:
        self._id = run_id
        self.on_output = on_output
        self.status: tuple[int | None, int | None] | None = None
        self.exited = asyncio.Event()
        self.ends = 0

    @property
    def id(self) -> str:
        return self._id

    def exit_status(self) -> tuple[int | None, int | None] | None:
        return self.status

    async def wait_exited(self) -> tuple[int | None, int | None]:
        await self.exited.wait()
        assert self.status is not None
        return self.status

    def exit(self, code: int | None, sig: int | None = None) -> None:
        self.status = (code, sig)
        self.exited.set()

    async def end(self) -> None:
        self.ends += 1
        if self.status is None:
            self.exit(None, 15)


class FakeHost:
    def __init__(self, output_limit: int = 1024) -> None:
        self.output_limit = output_limit
        self.commands: list[TerminalCommand] = []
        self.runs: list[FakeRun] = []

    async def start(self, command: TerminalCommand, on_output: Callable[[bytes], None]) -> FakeRun:
        self.commands.append(command)
        run = FakeRun(f"term-{len(self.runs) + 1}", on_output)
        self.runs.append(run)
        return run


async def connect(agent: FakeAgent, cwd: Path, host: FakeHost | None) -> AgentConnection:
    conn = AgentConnection(agent.transport, str(cwd), ClientOptions(terminal_host=host))
    await conn.initialize()
    await conn.new_session(str(cwd))
    return conn


async def call(agent: FakeAgent, method: str, **params: Any) -> Frame:
    """One agent request; the answer checked against the schema when it is a result."""
    rid = agent.request(method, {"sessionId": agent.session_id, **params})
    answer = await agent.answer_to(rid)
    if "result" in answer:
        assert schema_errors(answer, "client", answered_method=method) == [], answer
    return answer


def capabilities(agent: FakeAgent) -> Frame:
    init = next(f for f in agent.frames if f.get("method") == "initialize")
    assert schema_errors(init, "client") == []
    caps: Frame = init["params"]["clientCapabilities"]
    return caps


def test_without_a_host_terminals_are_not_offered(tmp_path: Path) -> None:
    """No host: terminal false in initialize, and every terminal/* method is -32601."""

    async def main() -> None:
        agent = FakeAgent()
        await connect(agent, tmp_path, None)
        assert capabilities(agent)["terminal"] is False
        for method in sorted(terminals.METHODS):
            answer = await call(agent, method, command="true", terminalId="x")
            assert answer["error"]["code"] == -32601, method

    asyncio.run(main())


def test_create_output_wait_release(tmp_path: Path) -> None:
    """The whole life of a terminal: its id, its output so far, its exit, then it is gone."""

    async def main() -> None:
        agent, host = FakeAgent(), FakeHost()
        await connect(agent, tmp_path, host)
        assert capabilities(agent)["terminal"] is True
        created = await call(agent, "terminal/create", command="make", args=["-j", "2"])
        term = created["result"]["terminalId"]
        assert host.commands[0].argv == ["make", "-j", "2"]
        assert host.commands[0].cwd == str(tmp_path)
        run = host.runs[0]
        run.on_output(b"building\n")
        out = await call(agent, "terminal/output", terminalId=term)
        assert out["result"] == {"output": "building\n", "truncated": False}
        waiting = asyncio.ensure_future(call(agent, "terminal/wait_for_exit", terminalId=term))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        run.exit(2)
        assert (await waiting)["result"] == {"exitCode": 2, "signal": None}
        out = await call(agent, "terminal/output", terminalId=term)
        assert out["result"]["exitStatus"] == {"exitCode": 2, "signal": None}
        assert (await call(agent, "terminal/release", terminalId=term))["result"] == {}
        assert run.ends == 1
        gone = await call(agent, "terminal/output", terminalId=term)
        assert gone["error"]["code"] == -32602

    asyncio.run(main())


def test_kill_ends_the_command_and_keeps_the_terminal(tmp_path: Path) -> None:
    """terminal/kill: the command ends (by signal), its output and status stay readable."""

    async def main() -> None:
        agent, host = FakeAgent(), FakeHost()
        await connect(agent, tmp_path, host)
        term = (await call(agent, "terminal/create", command="sleep", args=["9"]))["result"]
        host.runs[0].on_output(b"zzz")
        assert (await call(agent, "terminal/kill", **term))["result"] == {}
        assert (await call(agent, "terminal/wait_for_exit", **term))["result"] == {
            "exitCode": None,
            "signal": "SIGTERM",
        }
        out = (await call(agent, "terminal/output", **term))["result"]
        assert out["output"] == "zzz"
        assert out["exitStatus"]["signal"] == "SIGTERM"

    asyncio.run(main())


def test_the_agents_limit_applies_under_the_configured_one(tmp_path: Path) -> None:
    """outputByteLimit is honoured, but never above the host's limit (terminalOutputLimit)."""

    async def main() -> None:
        agent, host = FakeAgent(), FakeHost(output_limit=8)
        await connect(agent, tmp_path, host)
        small = (await call(agent, "terminal/create", command="a", outputByteLimit=3))["result"]
        large = (await call(agent, "terminal/create", command="b", outputByteLimit=10**9))["result"]
        for run in host.runs:
            run.on_output(b"0123456789")
        assert (await call(agent, "terminal/output", **small))["result"] == {
            "output": "789",
            "truncated": True,
        }
        assert (await call(agent, "terminal/output", **large))["result"] == {
            "output": "23456789",
            "truncated": True,
        }

    asyncio.run(main())


def test_a_terminal_belongs_to_its_session(tmp_path: Path) -> None:
    """Another session's terminal id is unknown (-32602), and so is a made-up one."""

    async def main() -> None:
        agent, host = FakeAgent(), FakeHost()
        await connect(agent, tmp_path, host)
        term = (await call(agent, "terminal/create", command="x"))["result"]["terminalId"]
        rid = agent.request("terminal/output", {"sessionId": "other", "terminalId": term})
        assert (await agent.answer_to(rid))["error"]["code"] == -32602
        made_up = await call(agent, "terminal/kill", terminalId="term-99")
        assert made_up["error"]["code"] == -32602
        assert host.runs[0].ends == 0

    asyncio.run(main())


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({"command": ""}, "command"),
        ({"command": "x", "args": "not a list"}, "args"),
        ({"command": "x", "env": [{"name": "A"}]}, "env"),
        ({"command": "x", "env": [{"name": "A=B", "value": "c"}]}, "env"),
        ({"command": "x", "cwd": "relative"}, "absolute"),
        ({"command": "x", "cwd": "/"}, "outside"),
        ({"command": "x", "outputByteLimit": -1}, "outputByteLimit"),
        ({"command": "x", "outputByteLimit": True}, "outputByteLimit"),
    ],
)
def test_bad_create_requests_are_refused_and_nothing_runs(
    tmp_path: Path, params: Frame, why: str
) -> None:
    """A malformed create, or a cwd outside the workspace, is -32602 and starts nothing."""

    async def main() -> None:
        agent, host = FakeAgent(), FakeHost()
        await connect(agent, tmp_path, host)
        answer = await call(agent, "terminal/create", **params)
        assert answer["error"]["code"] == -32602
        assert why in answer["error"]["message"]
        assert host.commands == []

    asyncio.run(main())


def test_cwd_env_and_command_lines(tmp_path: Path) -> None:
    """cwd inside the workspace is used; env is passed; a command line goes to /bin/sh -c."""

    async def main() -> None:
        sub = tmp_path / "sub"
        sub.mkdir()
        agent, host = FakeAgent(), FakeHost()
        await connect(agent, tmp_path, host)
        env = [{"name": "FOO", "value": "bar"}]
        await call(agent, "terminal/create", command="npm test | tail", cwd=str(sub), env=env)
        await call(agent, "terminal/create", command="ls")
        first, second = host.commands
        assert (first.argv, first.cwd, first.env) == (
            ["/bin/sh", "-c", "npm test | tail"],
            str(sub),
            {"FOO": "bar"},
        )
        assert second.argv == ["ls"]

    asyncio.run(main())


def test_too_many_terminals_are_refused(tmp_path: Path) -> None:
    """Past MAX_TERMINALS unreleased terminals a create is refused; a release makes room."""

    async def main() -> None:
        agent, host = FakeAgent(), FakeHost()
        await connect(agent, tmp_path, host)
        ids = []
        for _ in range(terminals.MAX_TERMINALS):
            ids.append((await call(agent, "terminal/create", command="x"))["result"])
        refused = await call(agent, "terminal/create", command="x")
        assert "too many" in refused["error"]["message"]
        await call(agent, "terminal/release", **ids[0])
        assert "result" in await call(agent, "terminal/create", command="x")

    asyncio.run(main())


def test_a_host_that_cannot_start_answers_an_error(tmp_path: Path) -> None:
    """A spawn failure (command not found) is a -32603 with the reason."""
    from tether.errors import SpawnError

    class Failing(FakeHost):
        async def start(
            self, command: TerminalCommand, on_output: Callable[[bytes], None]
        ) -> FakeRun:
            raise SpawnError("cannot run 'nope': No such file or directory")

    async def main() -> None:
        agent = FakeAgent()
        await connect(agent, tmp_path, Failing())
        answer = await call(agent, "terminal/create", command="nope")
        assert answer["error"]["code"] == -32603
        assert "nope" in answer["error"]["message"]

    asyncio.run(main())
