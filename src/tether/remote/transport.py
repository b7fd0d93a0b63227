"""Blocking HTTP/1.1 to a remote Tether over a socket: TCP, TLS (``https``) or Unix.

The framing is :mod:`tether.remote.http11` (no I/O); this module only moves its bytes,
with the standard library's ``socket`` (and ``ssl`` for ``https`` alone, imported
then). One keep-alive connection carries the calls; each event stream gets its own.

This is the boundary where foreign errors become Tether's, in one place
(:func:`_translated`):

* nothing reached the server (refused, no such socket, no route, DNS, a connect that
  timed out), or a read lost its answer: :class:`~tether.errors.ServerUnreachable`
  (retryable, exit 7);
* a change (POST, DELETE) whose answer was lost: :class:`~tether.errors.BrokenResourceError`
  -- whether it happened is unknown, so it is not retried here;
* a TLS failure (a certificate that does not verify): :class:`~tether.errors.TetherError`
  naming it -- trying again will not help.

A kept-alive connection the server may have closed meanwhile (its idle timeout, 5 s for
uvicorn) is not trusted with a change: one idle for ``REUSE_IDLE_S`` is replaced before
a POST or DELETE. A read on a kept connection that ends (or is reset) before a byte of
the answer is sent again once, on a new connection: the server let it go unread.
"""

from __future__ import annotations

import contextlib
import socket
import time

from tether.errors import (
    BrokenResourceError,
    RemoteProtocolError,
    ServerUnreachable,
    TetherError,
)
from tether.remote.core import RESPONSE_MAX_BYTES
from tether.remote.http11 import ResponseReader, request_bytes

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Iterator

    from tether.remote.core import Request, Target

CONNECT_TIMEOUT_S = 10.0
CALL_TIMEOUT_S = 300.0  # a call's answer: creating a session may start an agent
READ_CHUNK = 64 * 1024
REUSE_IDLE_S = 1.0  # a kept connection idle longer is not trusted with a change


class _Stale(Exception):
    """A kept-alive connection closed before a byte of the answer (internal)."""


def _open(target: Target) -> socket.socket:
    if target.scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(CONNECT_TIMEOUT_S)
            sock.connect(target.socket_path)
        except BaseException:
            sock.close()
            raise
        return sock
    sock = socket.create_connection((target.host, target.port), CONNECT_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if target.scheme == "https":
        import ssl  # only here: ~10 ms of imports nobody else on this path needs

        context = ssl.create_default_context()  # honours SSL_CERT_FILE / SSL_CERT_DIR
        try:
            return context.wrap_socket(sock, server_hostname=target.host)
        except BaseException:
            sock.close()
            raise
    return sock


def _host_header(target: Target) -> str:
    if target.scheme == "unix":
        return "localhost"
    host = f"[{target.host}]" if ":" in target.host else target.host
    default = 443 if target.scheme == "https" else 80
    return host if target.port == default else f"{host}:{target.port}"


def _where(target: Target) -> str:
    return target.socket_path if target.scheme == "unix" else f"{target.host}:{target.port}"


@contextlib.contextmanager
def _translated(target: Target, req: Request, sent: list[bool]) -> Iterator[None]:
    """OS and TLS errors as Tether's (see the module docstring)."""
    try:
        yield
    except (TetherError, _Stale):
        raise
    except OSError as exc:
        reason = _reason(exc)
        if type(exc).__module__ == "ssl" and not isinstance(exc, TimeoutError):
            raise TetherError(
                f"TLS with the Tether server at {target.url} failed: {reason}", url=target.url
            ) from exc
        if sent[0] and not req.is_read:
            raise BrokenResourceError(
                f"the connection to the Tether server broke before it answered"
                f" {req.method} {req.path}: {reason}; whether it was done is unknown",
                url=target.url,
            ) from exc
        raise ServerUnreachable(
            f"cannot reach the Tether server ({_where(target)}): {reason}", url=target.url
        ) from exc


def _reason(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is `tether serve` running there?)"
    if isinstance(exc, FileNotFoundError):
        return "no such socket (is `tether serve --unix` running?)"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host name ({exc.strerror})"
    return exc.strerror or str(exc) or type(exc).__name__


class Transport:
    """Calls over one kept-alive connection; streams over their own.

    Not thread-safe: one caller at a time (the CLI's one command).
    """

    def __init__(self, target: Target, *, timeout: float = CALL_TIMEOUT_S) -> None:
        self.target = target
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._idle_since = 0.0  # monotonic: when the kept connection's last answer ended
        self._host = _host_header(target)

    def send(self, req: Request) -> tuple[int, str, bytes]:
        """``(status, content type, body)`` of ``req``.

        Raises:
            ServerUnreachable: nothing reached the server, or a read lost its answer.
            BrokenResourceError: a change whose answer was lost.
            RemoteProtocolError: a malformed answer, or one over ``RESPONSE_MAX_BYTES``.
        """
        if not req.is_read and time.monotonic() - self._idle_since > REUSE_IDLE_S:
            self.close()  # it may have been closed by now: a change goes on a new one
        for _attempt in (0, 1):
            reused = self._sock is not None
            sent = [False]
            try:
                with _translated(self.target, req, sent):
                    return self._exchange(req, sent, reused)
            except _Stale:
                self.close()  # the server let the idle connection go: once more, anew
            except BaseException:
                self.close()
                raise
        raise ServerUnreachable(
            f"the Tether server ({_where(self.target)}) closed two connections unanswered",
            url=self.target.url,
        )

    def _exchange(self, req: Request, sent: list[bool], reused: bool) -> tuple[int, str, bytes]:
        if self._sock is None:
            self._sock = _open(self.target)
            self._sock.settimeout(self.timeout)
        sock = self._sock
        data = request_bytes(req.method, req.path, self._host, req.headers, req.body)
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            if reused:
                raise _Stale from None
            raise
        sent[0] = True
        reader = ResponseReader(req.method)
        body = bytearray()
        first = True
        while not reader.done:
            try:
                chunk = sock.recv(READ_CHUNK)
            except ConnectionResetError:
                if first and reused and req.is_read:
                    raise _Stale from None
                raise
            if not chunk and first and reused and req.is_read:
                raise _Stale
            first = False
            reader.receive_data(chunk)
            body += reader.take_body()
            if len(body) > RESPONSE_MAX_BYTES:
                raise RemoteProtocolError(
                    "the server's answer is over the limit", limit=RESPONSE_MAX_BYTES
                )
            if reader.closed_early:
                raise ConnectionResetError("the server closed the connection mid-answer")
        if not reader.keep_alive:
            self.close()
        self._idle_since = time.monotonic()
        assert reader.status is not None
        return reader.status, reader.headers.get("content-type", ""), bytes(body)

    def open_stream(self, req: Request, read_timeout: float) -> Stream:
        """A streamed response (an event stream), on a connection of its own.

        Raises:
            ServerUnreachable: the stream could not be opened.
        """
        sent = [False]
        with _translated(self.target, req, sent):
            sock = _open(self.target)
            try:
                sock.settimeout(read_timeout)
                sock.sendall(request_bytes(req.method, req.path, self._host, req.headers, req.body))
                sent[0] = True
                reader = ResponseReader(req.method)
                while reader.status is None:
                    chunk = sock.recv(READ_CHUNK)
                    reader.receive_data(chunk)
                    if not chunk:
                        raise ConnectionResetError("the server closed the connection unanswered")
            except BaseException:
                sock.close()
                raise
        return Stream(self.target, req, sock, reader)

    def close(self) -> None:
        """Close the kept connection (idempotent)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


class Stream:
    """One open streamed response: its status, then its body's bytes as they come."""

    def __init__(
        self, target: Target, req: Request, sock: socket.socket, reader: ResponseReader
    ) -> None:
        self.target = target
        self.req = req
        assert reader.status is not None
        self.status = reader.status
        self.content_type = reader.headers.get("content-type", "")
        self._sock = sock
        self._reader = reader

    def read_all(self) -> bytes:
        """The whole body (an error's problem document), bounded."""
        return b"".join(self.chunks(limit=RESPONSE_MAX_BYTES))

    def chunks(self, limit: int | None = None) -> Iterator[bytes]:
        """The body's bytes as they arrive; ends when the response is whole.

        Raises:
            ServerUnreachable: the connection broke or went silent past the read timeout.
        """
        reader = self._reader
        taken = 0
        while True:
            data = reader.take_body()
            if data:
                taken += len(data)
                if limit is not None and taken > limit:
                    raise RemoteProtocolError("the server's answer is over the limit")
                yield data
            if reader.done:
                return
            with _translated(self.target, self.req, [True]):
                chunk = self._sock.recv(READ_CHUNK)
                reader.receive_data(chunk)
                if reader.closed_early:
                    raise ConnectionResetError("the server closed the stream")

    def close(self) -> None:
        self._sock.close()
