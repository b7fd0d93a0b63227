"""HTTP/1.1 one step beside the tested paths, at the router's two ends (its relay to
hosts, :mod:`tether.fleet.relay`, and its serving of clients and agents,
:mod:`tether.fleet.requests`): a host closing a kept-alive connection as a request goes
down it, a host's interim or doubled answer, the answer to a HEAD, ``Expect:
100-continue``, a chunked body, a head without end or without hurry, a body faster
than its reader, and a failure of the router's own -- each request answered once.

Real sockets on loopback: scripted hosts and clients, and a sink standing for the
router's client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("httptools", reason="the router's relay needs the serve extra")

from tether.fleet import http1
from tether.fleet.relay import (
    REPLAY_MAX,
    ClientLink,
    HostConnections,
    HostRefused,
    Outcome,
    exchange,
)
from tether.fleet.requests import Queue, serve_connection

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


class ScriptedHost:
    """A host on loopback that reads whole requests and, per connection and request
    number, answers ``OK`` or closes the connection without a byte (``plan``)."""

    def __init__(self, plan: Callable[[int, int], bool]) -> None:
        self.plan = plan  # (connection no., request no. on it) -> answer it?
        self.connections = 0
        self.bodies: list[bytes] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn, n = self.connections, 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                self.bodies.append(await reader.readexactly(length))
                n += 1
                if not self.plan(conn, n):
                    break
                writer.write(OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _sink() -> tuple[asyncio.StreamWriter, Callable[[], Any], asyncio.Server]:
    """A writer standing for the router's client, and what reached the other end."""
    got = bytearray()

    async def on_client(reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            got.extend(data)
        w.close()
        with contextlib.suppress(ConnectionError):
            await w.wait_closed()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    _r, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    return writer, lambda: bytes(got), server


def _request(port: int, body: bytes) -> bytes:
    head = http1.RequestHead(
        method=b"POST",
        target=b"/v1/sessions/s1/prompt",
        headers=[(b"content-length", str(len(body)).encode())],
        keep_alive=True,
    )
    return http1.encode_request_head(head, f"127.0.0.1:{port}".encode(), [])


async def _body(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


Host = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _exchanges(
    host: Host, requests: Callable[[int], list[tuple[bytes, bytes]]]
) -> tuple[list[Any], bytes]:
    """Each ``(head, body)`` of ``requests(port)`` sent in turn through one pool to the
    scripted ``host`` on loopback; each result is the exchange's :class:`Outcome` or the
    :class:`HostRefused` it raised, then all the router's client was sent."""

    async def main() -> tuple[list[Any], bytes]:
        server = await asyncio.start_server(host, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client, got, sink = await _sink()
        pool = HostConnections(connect_timeout=5.0)
        results: list[Any] = []
        try:
            async with asyncio.timeout(10):
                for head, body in requests(port):
                    try:
                        results.append(await exchange(
                            pool, "127.0.0.1", port, head, _body(body), client,
                            first_byte_timeout=5.0,
                        ))  # fmt: skip
                    except HostRefused as e:
                        results.append(e)
                    # Let the host's side of a connection it closes reach us, as it
                    # would between two requests of a real router.
                    await asyncio.sleep(0)
                await asyncio.sleep(0.05)  # let the sink read
        finally:
            await pool.aclose()
            client.close()
            await client.wait_closed()
            server.close()
            await server.wait_closed()
            sink.close()
            await sink.wait_closed()
        return results, got()

    return asyncio.run(main())


def _run(plan: Callable[[int, int], bool], bodies: list[bytes]) -> tuple[list[Any], ScriptedHost]:
    """Send each body in turn to a :class:`ScriptedHost`; each result is the exchange's
    status or the exception it raised."""
    host = ScriptedHost(plan)
    results, _got = _exchanges(host.serve, lambda port: [(_request(port, b), b) for b in bodies])
    return [r.status if isinstance(r, Outcome) else r for r in results], host


def test_a_request_on_a_kept_connection_the_host_closed_is_sent_again_on_a_fresh_one() -> None:
    # The first connection answers its first request, then closes on its second.
    results, host = _run(lambda conn, n: not (conn == 1 and n == 2), [b"first", b"second"])
    assert results == [200, 200]
    assert host.connections == 2
    # The body went out whole both times: kept while it was sent, replayed as it was.
    assert host.bodies == [b"first", b"second", b"second"]


def test_a_fresh_connection_closed_without_an_answer_is_the_hosts_failure() -> None:
    results, host = _run(lambda conn, n: False, [b"only"])
    assert len(results) == 1
    assert isinstance(results[0], HostRefused)
    assert "closed the connection without answering" in str(results[0])
    assert host.connections == 1  # never tried again


def test_a_retry_that_meets_the_same_end_is_not_tried_a_third_time() -> None:
    # Every connection after the first closes on its first request.
    results, host = _run(lambda conn, n: conn == 1 and n == 1, [b"first", b"second"])
    assert results[0] == 200
    assert isinstance(results[1], HostRefused)
    assert host.connections == 2  # the kept one, and one fresh: no more


def test_a_body_too_long_to_keep_is_not_sent_again() -> None:
    big = b"x" * (REPLAY_MAX + 1)
    results, host = _run(lambda conn, n: not (conn == 1 and n == 2), [b"first", big])
    assert results[0] == 200
    assert isinstance(results[1], HostRefused)
    assert host.connections == 1


def _serve_failing(began: bool) -> bytes:
    """What a client reads when its request's ``serve_one`` raises, having written part
    of an answer (``began``) or none."""

    async def serve_one(
        head: http1.RequestHead, queue: Queue, out: asyncio.StreamWriter, link: ClientLink
    ) -> bool:
        if began:
            out.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\npart")
            link.began = True
        raise RuntimeError("a bug in serving")

    async def main() -> bytes:
        server = await asyncio.start_server(
            lambda r, w: serve_connection(r, w, serve_one), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/anything HTTP/1.1\r\nhost: x\r\n\r\n")
        await writer.drain()
        async with asyncio.timeout(10):
            got = await reader.read()  # to the end: the connection is closed after
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return got

    return asyncio.run(main())


def test_a_request_whose_serving_fails_gets_a_500_and_the_failure_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("ERROR", logger="tether"):
        got = _serve_failing(began=False)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 500 ")
    assert b"connection: close" in head.lower()
    doc = json.loads(body)
    assert doc["code"] == "INTERNAL_ERROR"
    assert doc["retryable"] is False
    assert "RuntimeError: a bug in serving" in doc["detail"]
    assert any("serving GET /v1/anything failed" in r.getMessage() for r in caplog.records)


def test_a_failure_after_part_of_an_answer_cuts_the_connection_adding_nothing() -> None:
    got = _serve_failing(began=True)
    assert got == b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\npart"


def test_the_answer_to_a_head_ends_with_its_head_and_its_connection_serves_on() -> None:
    """A HEAD's answer says how long the body would be, and none comes: the relay
    waited for it (until the host closed the connection), then cut the client."""
    connections = 0

    async def host(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n")
        writer.close()

    def head(port: int) -> bytes:
        asked = http1.RequestHead(b"HEAD", b"/v1/sessions/s1/history", [], keep_alive=True)
        return http1.encode_request_head(asked, f"127.0.0.1:{port}".encode(), [])

    # The second on the kept connection.
    outcomes, got = _exchanges(host, lambda port: [(head(port), b"")] * 2)
    assert [(o.status, o.reusable) for o in outcomes] == [(200, True)] * 2
    assert connections == 1
    assert got.count(b"HTTP/1.1 200 OK") == 2
    assert got.endswith(b"content-length: 5\r\n\r\n")


def test_an_interim_answer_is_relayed_and_the_final_one_follows_on_the_same_exchange() -> None:
    """A host may send ``100 Continue`` (uvicorn does when the app reads a body the
    request said it would wait to send) before its answer. The relay took the interim
    answer for the whole one: the client waited for ever, and the host's real answer
    stayed in the pooled connection -- for the *next* request through it, another
    client's, to be given."""

    async def host(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while await reader.readuntil(b"\r\n\r\n"):
                n += 1
                body = b"first" if n == 1 else b"second"
                if n == 1:
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await writer.drain()
                    await asyncio.sleep(0.01)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        writer.close()

    outcomes, got = _exchanges(host, lambda port: [(_request(port, b""), b"")] * 2)
    assert [o.status for o in outcomes] == [200, 200]
    assert got == (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst"
        b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecond"
    )


def test_a_client_waiting_for_100_continue_is_told_to_send_its_body() -> None:
    """``Expect: 100-continue`` (curl's, for any body over 1 KiB): the router reads every
    body it is sent, so it says ``100 Continue`` at once -- the client would otherwise wait
    (curl one second) before sending it -- and the header is not passed on."""

    seen: list[bytes] = []

    async def serve_one(
        head: http1.RequestHead, queue: Queue, out: asyncio.StreamWriter, link: ClientLink
    ) -> bool:
        from tether.fleet.requests import RequestBody

        body = b"".join([part async for part in RequestBody(queue)])
        seen.append(http1.encode_request_head(head, b"host", []))
        out.write(http1.response(200, body, b"text/plain", []))
        return True

    async def main() -> bytes:
        server = await asyncio.start_server(
            lambda r, w: serve_connection(r, w, serve_one), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/x HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n"
                     b"expect: 100-continue\r\n\r\n")  # fmt: skip
        async with asyncio.timeout(5):
            interim = await reader.readuntil(b"\r\n\r\n")  # before any body byte is sent
            writer.write(b"ping")
            final = await reader.readuntil(b"\r\n\r\n")
            final += await reader.readexactly(4)
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return interim + final

    got = asyncio.run(main())
    assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert got.endswith(b"ping")
    assert b"expect" not in seen[0].lower()


def test_a_host_answering_twice_does_not_leave_its_second_answer_for_the_next_request() -> None:
    """Bytes after the end of an answer (a host out of step with its requests): the
    connection is not pooled, so the next request -- maybe another client's -- is not
    answered with them."""
    connections = 0

    async def host(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        mine = connections
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while await reader.readuntil(b"\r\n\r\n"):
                one = b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n%d" % mine
                writer.write(one + b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale")
        writer.close()

    outcomes, got = _exchanges(host, lambda port: [(_request(port, b""), b"")] * 2)
    assert [(o.status, o.reusable) for o in outcomes] == [(200, False), (200, False)]
    assert connections == 2  # each request on a connection of its own
    assert b"stale" not in got


def _serve_raw(serve_one: Callable[..., Any], send: Callable[[asyncio.StreamWriter], Any]) -> bytes:
    """What a client gets from :func:`serve_connection` for what ``send`` writes."""

    async def main() -> bytes:
        server = await asyncio.start_server(
            lambda r, w: serve_connection(r, w, serve_one), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        async with asyncio.timeout(20):
            sent = asyncio.ensure_future(send(writer))
            got = await reader.read()  # to the end: the router closes
        sent.cancel()  # whatever it still meant to send
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            await sent
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return got

    return asyncio.run(main())


def test_a_head_without_end_is_refused_431_before_anyone_is_asked() -> None:
    """An endless header (a hostile or broken client, unauthenticated) grew the
    router's memory without bound: past HEAD_MAX it is answered 431 and cut."""
    from tether.fleet.requests import HEAD_MAX

    served: list[bytes] = []

    async def serve_one(head: http1.RequestHead, *_: Any) -> bool:
        served.append(head.target)
        return False

    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(b"GET /v1/health HTTP/1.1\r\nhost: x\r\nx-junk: ")
        for _ in range(4 * HEAD_MAX // 65536):
            writer.write(b"a" * 65536)
            await writer.drain()

    got = _serve_raw(serve_one, send)
    assert got.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert b'"code":"HEAD_TOO_LARGE"' in got
    assert served == []


def test_a_body_sent_faster_than_it_is_read_is_held_back_not_buffered() -> None:
    """The client's bytes are read no further ahead of the body's reader than
    QUEUED_MAX parts: a fast upload to a slow host is held back by TCP, not kept in the
    router's memory. The body still arrives whole."""
    from tether.fleet.requests import QUEUED_MAX, RequestBody

    size = 8 * 1024 * 1024
    seen: dict[str, int] = {"max_queued": 0, "bytes": 0}

    async def serve_one(head: http1.RequestHead, queue: Queue, out: Any, link: Any) -> bool:
        async for part in RequestBody(queue):
            seen["max_queued"] = max(seen["max_queued"], queue.qsize())
            seen["bytes"] += len(part)
            await asyncio.sleep(0.001)  # a slow reader
        out.write(http1.response(200, b"ok", b"text/plain", [], keep_alive=False))
        return False

    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(b"POST /v1/x HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % size)
        for _ in range(size // 65536):
            writer.write(b"b" * 65536)
            await writer.drain()

    got = _serve_raw(serve_one, send)
    assert got.startswith(b"HTTP/1.1 200 OK\r\n")
    assert seen["bytes"] == size
    assert seen["max_queued"] <= QUEUED_MAX + 2, seen


@pytest.mark.parametrize("begun", [False, True])
def test_a_connection_waiting_too_long_for_a_head_is_let_go(
    monkeypatch: pytest.MonkeyPatch, begun: bool
) -> None:
    """A connection idle past WAIT_FOR_HEAD_S is closed; one whose head began and never
    ended (a slowloris client) is answered 408 and closed. Before, both were held for
    ever: a task and a socket each, and no one authenticated."""
    from tether.fleet import requests

    monkeypatch.setattr(requests, "WAIT_FOR_HEAD_S", 0.3)

    async def serve_one(head: http1.RequestHead, *_: Any) -> bool:
        raise AssertionError("no request was whole")

    async def send(writer: asyncio.StreamWriter) -> None:
        if begun:
            writer.write(b"GET /v1/health HTTP/1.1\r\nhost: x\r\nx-slow: a")
        await asyncio.sleep(30)  # never more: the router must end it

    got = _serve_raw(serve_one, send)
    if begun:
        assert got.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert b'"code":"HEAD_TIMEOUT"' in got
    else:
        assert got == b""
