"""What only the remote library client has: its event streams resumed across a cut
connection (``Last-Event-ID``: no gap, no duplicate), its URL forms, its transport
errors, and httpx imported only when ``url=`` is given."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import python_env
from tests.integration._serve import Gateway, running_gateway, spawn_gateway

import tether
from tether.errors import HostUnavailable, UsageError

pytestmark = pytest.mark.integration
pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytest.importorskip("httpx", reason="the remote client needs the remote extra")

CUT_AFTER = 64 * 1024  # bytes of an event stream relayed before the proxy cuts it


class CuttingProxy:
    """A loopback TCP proxy in front of a gateway that cuts event streams mid-way.

    Each of the first ``cuts`` event-stream connections (``GET …/events``) is aborted
    (both sides reset) once ``CUT_AFTER`` bytes of its response went through; every
    other connection is relayed untouched.
    """

    def __init__(self, target_port: int, cuts: int) -> None:
        self.target_port = target_port
        self.cuts_left = cuts
        self.streams = 0  # event-stream connections seen
        self.cut = 0  # of them, cut
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Future[object]] = set()

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        state = {"stream": False}

        async def upstream() -> None:
            while data := await reader.read(65536):
                if not state["stream"] and b"GET /v1/sessions/" in data and b"/events" in data:
                    state["stream"] = True
                    self.streams += 1
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def downstream() -> None:
            relayed = 0
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
                relayed += len(data) if state["stream"] else 0
                if relayed >= CUT_AFTER and self.cuts_left > 0:
                    self.cuts_left -= 1
                    self.cut += 1
                    writer.transport.abort()
                    up_writer.transport.abort()
                    return
            writer.close()

        pair = asyncio.gather(upstream(), downstream(), return_exceptions=True)
        self._tasks.add(pair)
        try:
            await pair
        finally:
            self._tasks.discard(pair)
            for w in (writer, up_writer):
                w.close()


@pytest.fixture
def open_gateway(tether_home: Path) -> Iterator[Gateway]:
    """A gateway answering any Host (the proxy's port is not its own)."""
    with running_gateway(tether_home, "--allowed-host", "*") as gw:
        yield gw


def test_a_cut_event_stream_resumes_without_gap_or_duplicate(
    open_gateway: Gateway, project_dir: Path
) -> None:
    """A turn's stream cut twice mid-way still yields every chunk once, in order, then
    TurnEnded; a watcher cut mid-way sees every seq once, then the session's end."""
    port = int(open_gateway.url.rsplit(":", 1)[1])

    async def main() -> None:
        async with CuttingProxy(port, cuts=2) as proxy:
            url = f"http://127.0.0.1:{proxy.port}"
            async with tether.Client(url=url, token=open_gateway.token) as client:
                session = await client.ensure_session("mock", cwd=project_dir)
                events = [e async for e in session.prompt("stream 3000")]
                texts = [e.text for e in events if isinstance(e, tether.AgentMessageChunk)]
                assert texts == [f"chunk {i}\n" for i in range(3000)]
                assert isinstance(events[-1], tether.TurnEnded)
                assert events[-1].stop_reason == "end_turn"
                assert proxy.cut == 2
                assert proxy.streams >= 3  # the first, and one resume per cut

                proxy.cuts_left = 1
                seen: list[tether.Event] = []

                async def follow() -> None:
                    async for event in session.watch(from_seq=1):
                        seen.append(event)

                watcher = asyncio.ensure_future(follow())
                for _ in range(1500):  # until the watcher passed the cut (bounded)
                    if proxy.cut == 3:
                        break
                    await asyncio.sleep(0.02)
                assert (await session.close())["survivors"] == []
                await asyncio.wait_for(watcher, 60)
                assert proxy.cut == 3
                assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
                assert isinstance(seen[-1], tether.SessionEnded)
                watched = [e.text for e in seen if isinstance(e, tether.AgentMessageChunk)]
                assert watched == texts

    asyncio.run(main())


def test_a_reader_that_falls_behind_the_gateway_still_gets_every_event(
    open_gateway: Gateway, project_dir: Path
) -> None:
    """A prompt's reader that stops until the whole turn is over falls behind the
    gateway's ring (``lagged``); the stream resumes from the journal: every chunk once,
    in order, then TurnEnded."""

    async def main() -> None:
        async with tether.Client(url=open_gateway.url, token=open_gateway.token) as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:
                events: list[tether.Event] = []
                async for event in session.prompt("stream 30000"):
                    if not events:  # stop reading until the turn is over
                        for _ in range(1500):
                            history = await session.history()
                            if history and history[-1].get("stopReason"):
                                break
                            await asyncio.sleep(0.05)
                    events.append(event)
                texts = [e.text for e in events if isinstance(e, tether.AgentMessageChunk)]
                assert texts == [f"chunk {i}\n" for i in range(30000)]
                assert isinstance(events[-1], tether.TurnEnded)
                metrics = open_gateway.http.get("/metrics").text
                assert "tether_serve_sse_lagged_total 0" not in metrics  # it did lag
            finally:
                await session.close()

    asyncio.run(main())


def test_a_unix_socket_url(tether_home: Path, project_dir: Path) -> None:
    """``unix:/abs/path.sock`` reaches a gateway listening on that socket."""
    with tempfile.TemporaryDirectory(prefix="tt-", dir="/tmp") as short:
        sock = f"{short}/gw.sock"  # a short path: AF_UNIX allows ~108 bytes
        gw = spawn_gateway(tether_home, "--unix", sock)
        try:
            assert gw.url == f"unix:{sock}"

            async def main() -> None:
                async with tether.Client(url=gw.url, token=gw.token) as client:
                    session = await client.ensure_session("mock", cwd=project_dir)
                    try:
                        assert await session.run("echo over unix") == ("over unix", "end_turn")
                    finally:
                        assert (await session.close())["survivors"] == []

            asyncio.run(main())
        finally:
            gw.stop()


def test_nothing_listening_is_host_unavailable() -> None:
    """A URL where nothing listens raises HostUnavailable (retryable), not httpx's error."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused

        async def main() -> None:
            async with tether.Client(url=f"http://127.0.0.1:{port}", token="x" * 20) as client:
                with pytest.raises(HostUnavailable) as info:
                    await client.sessions()
            assert info.value.retryable

        asyncio.run(main())


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"url": "ftp://example.invalid"}, id="scheme"),
        pytest.param({"url": "unix:relative.sock"}, id="relative-socket"),
        pytest.param({"url": "http://127.0.0.1:1", "env": {"A": "1"}}, id="env"),
        pytest.param({"url": "http://127.0.0.1:1", "home": "/tmp/x"}, id="home"),
        pytest.param({"token": "a" * 20}, id="token-without-url"),
    ],
)
def test_arguments_that_do_not_fit_are_usage_errors(kwargs: dict[str, object]) -> None:
    """URL forms other than http(s) and unix:/abs, and local-only arguments with url=,
    are refused when the Client is made."""
    with pytest.raises(UsageError):
        tether.Client(**kwargs)  # type: ignore[arg-type]


def test_local_only_calls_say_so(open_gateway: Gateway, project_dir: Path) -> None:
    """What a remote Tether does not serve (fork, discard, argv agents) is a UsageError."""

    async def main() -> None:
        async with tether.Client(url=open_gateway.url, token=open_gateway.token) as client:
            with pytest.raises(UsageError):
                await client.ensure_session([sys.executable, "-c", "pass"], cwd=project_dir)
            session = await client.ensure_session("mock", cwd=project_dir)
            with pytest.raises(UsageError):
                await session.fork("b")
            with pytest.raises(UsageError):
                await session.close(discard=True)
            assert (await session.close())["survivors"] == []

    asyncio.run(main())


def test_httpx_is_imported_only_for_a_remote_client() -> None:
    """``import tether`` and a local Client load no HTTP stack; ``url=`` loads httpx."""
    code = (
        "import sys, tether\n"
        "c = tether.Client()\n"
        "import tether.client\n"
        "assert 'httpx' not in sys.modules, 'local'\n"
        "r = tether.Client(url='http://127.0.0.1:1')\n"
        "assert 'httpx' in sys.modules\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, env=python_env(), timeout=60, capture_output=True
    )
