"""Blocking HTTP/1.1 to a remote Tether, with the standard library only.

One keep-alive connection for calls, and a connection of its own per event stream.
This is the boundary where foreign errors become Tether's, in one place
(:func:`_translated`):

* nothing reached the server (refused, no such socket, no route, DNS, a connect that
  timed out), or a read lost its answer: :class:`~tether.errors.ServerUnreachable`
  (retryable, exit 7);
* a change (POST, DELETE) whose answer was lost: :class:`~tether.errors.BrokenResourceError`
  -- whether it happened is unknown, so it is not retried here;
* a TLS failure (a certificate that does not verify): :class:`~tether.errors.TetherError`
  naming it -- trying again will not help.

A call on a kept-alive connection the server has closed meanwhile (its idle timeout) is
sent again once on a new connection: the server closed it before reading the request.
"""

from __future__ import annotations

import contextlib
import http.client
import socket

from tether.errors import BrokenResourceError, ServerUnreachable, TetherError
from tether.remote.core import RESPONSE_MAX_BYTES

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Iterator

    from tether.remote.core import Request, Target

CONNECT_TIMEOUT_S = 10.0
CALL_TIMEOUT_S = 300.0  # a call's answer: creating a session may start an agent
READ_CHUNK = 64 * 1024


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (``unix:/path.sock``); the Host header says ``localhost``."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _connection(target: Target, timeout: float) -> http.client.HTTPConnection:
    if target.scheme == "unix":
        return _UnixConnection(target.socket_path, timeout)
    if target.scheme == "https":
        import ssl  # only here: ~10 ms of imports nobody else on this path needs

        context = ssl.create_default_context()  # honours SSL_CERT_FILE / SSL_CERT_DIR
        return http.client.HTTPSConnection(
            target.host, target.port, timeout=timeout, context=context
        )
    return http.client.HTTPConnection(target.host, target.port, timeout=timeout)


def _where(target: Target) -> str:
    return target.socket_path if target.scheme == "unix" else f"{target.host}:{target.port}"


@contextlib.contextmanager
def _translated(target: Target, req: Request, sent: list[bool]) -> Iterator[None]:
    """OS, TLS and HTTP errors as Tether's (see the module docstring)."""
    try:
        yield
    except TetherError:
        raise
    except (OSError, http.client.HTTPException) as exc:
        reason = _reason(exc)
        if _is_tls(exc):
            raise TetherError(
                f"TLS with the Tether server at {target.url} failed: {reason}", url=target.url
            ) from exc
        if sent[0] and not req.is_read:
            raise BrokenResourceError(
                f"the connection to the Tether server at {target.url} broke before it"
                f" answered {req.method} {req.path}: {reason}; whether it was done is unknown",
                url=target.url,
            ) from exc
        raise ServerUnreachable(
            f"cannot reach the Tether server ({_where(target)}): {reason}",
            url=target.url,
        ) from exc


def _is_tls(exc: BaseException) -> bool:
    return type(exc).__module__ == "ssl" and not isinstance(exc, TimeoutError)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is `tether serve` running there?)"
    if isinstance(exc, FileNotFoundError):
        return "no such socket (is `tether serve --unix` running?)"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


class Transport:
    """Calls over one kept-alive connection; streams over their own.

    Not thread-safe: one caller at a time (the CLI's one command).
    """

    def __init__(self, target: Target, *, timeout: float = CALL_TIMEOUT_S) -> None:
        self.target = target
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self._used = False  # the kept connection has carried a call already

    def send(self, req: Request) -> tuple[int, str, bytes]:
        """``(status, content type, body)`` of ``req``.

        Raises:
            ServerUnreachable: nothing reached the server, or a read lost its answer.
            BrokenResourceError: a change whose answer was lost.
            RemoteProtocolError: an answer over ``RESPONSE_MAX_BYTES``.
        """
        for attempt in (0, 1):
            reused = self._used and self._conn is not None
            sent = [False]
            try:
                with _translated(self.target, req, sent):
                    return self._exchange(req, sent)
            except (ServerUnreachable, BrokenResourceError) as exc:
                self.close()
                stale = isinstance(
                    exc.__cause__,
                    http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError,
                )
                if not (reused and stale and attempt == 0):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _exchange(self, req: Request, sent: list[bool]) -> tuple[int, str, bytes]:
        if self._conn is None:
            self._conn = _connection(self.target, CONNECT_TIMEOUT_S)
            self._conn.connect()
            if self._conn.sock is not None:
                self._conn.sock.settimeout(self.timeout)
            self._used = False
        conn = self._conn
        conn.request(req.method, req.path, body=req.body, headers=req.headers)
        sent[0] = True
        resp = conn.getresponse()
        body = resp.read(RESPONSE_MAX_BYTES + 1)
        if len(body) > RESPONSE_MAX_BYTES:
            from tether.errors import RemoteProtocolError

            self.close()
            raise RemoteProtocolError(
                "the server's answer is over the limit", limit=RESPONSE_MAX_BYTES
            )
        self._used = True
        if resp.will_close:
            self.close()
        return resp.status, resp.getheader("content-type") or "", body

    def open_stream(self, req: Request, read_timeout: float) -> Stream:
        """An event stream's response, on a connection of its own.

        Raises:
            ServerUnreachable: the stream could not be opened.
        """
        sent = [False]
        conn = _connection(self.target, CONNECT_TIMEOUT_S)
        try:
            with _translated(self.target, req, sent):
                conn.connect()
                if conn.sock is not None:
                    conn.sock.settimeout(read_timeout)
                conn.request(req.method, req.path, body=req.body, headers=req.headers)
                sent[0] = True
                resp = conn.getresponse()
        except BaseException:
            conn.close()
            raise
        return Stream(self.target, req, conn, resp)

    def close(self) -> None:
        """Close the kept connection (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class Stream:
    """One open streaming response: its status, then its body's bytes as they come."""

    def __init__(
        self,
        target: Target,
        req: Request,
        conn: http.client.HTTPConnection,
        resp: http.client.HTTPResponse,
    ) -> None:
        self.target = target
        self.req = req
        self.status = resp.status
        self.content_type = resp.getheader("content-type") or ""
        self._conn = conn
        self._resp = resp

    def read_all(self) -> bytes:
        """The whole body (an error's problem document), bounded."""
        with _translated(self.target, self.req, [True]):
            return self._resp.read(RESPONSE_MAX_BYTES)

    def chunks(self) -> Iterator[bytes]:
        """The body's bytes as they arrive; ends when the server ends it.

        Raises:
            ServerUnreachable: the connection broke or went silent past the read timeout.
        """
        while True:
            with _translated(self.target, self.req, [True]):
                data = self._resp.read1(READ_CHUNK)
            if not data:
                return
            yield data

    def close(self) -> None:
        self._conn.close()
