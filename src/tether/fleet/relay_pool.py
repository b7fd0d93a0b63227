"""The router's connections to hosts: where a host's URL says to connect
(:class:`Endpoint`), idle keep-alive connections reused across requests
(:class:`HostConnections`), and how opening one fails (:class:`HostRefused`,
:class:`HostUntrusted`; :class:`HostSilent` once a request was sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import defaultdict, deque
from typing import NamedTuple
from urllib.parse import urlsplit

DEFAULT_CONNECT_TIMEOUT_S = 1.0
POOL_PER_HOST = 64
READ_SIZE = 256 * 1024


class Endpoint(NamedTuple):
    """Where a host's advertised URL says to connect, and whether over TLS."""

    host: str
    port: int
    tls: bool
    netloc: bytes  # what the request's Host header says

    @classmethod
    def of(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        return cls(parts.hostname or "127.0.0.1", port, tls, parts.netloc.encode())


class HostRefused(Exception):
    """Nothing was sent: the host could not be reached."""


class HostUntrusted(HostRefused):
    """Nothing was sent: the TLS handshake with an ``https://`` host failed (its
    certificate is not one the router trusts, or it does not speak TLS)."""


class HostSilent(Exception):
    """The request was sent; no answer began in time."""


class HostConnections:
    """Idle keep-alive connections to each host, reused across requests.

    A connection to an ``https://`` host (``tls=True``) is opened with ``tls_context``
    (:func:`tether.serve.tls.fleet_client_context`: the host's certificate verified and
    its name checked); the handshake is part of the connect timeout, so a host that
    accepts and then says nothing cannot hold a request.
    """

    def __init__(
        self,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.tls_context = tls_context
        self._idle: dict[tuple[str, int], deque[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
        self._idle = defaultdict(deque)

    async def get(
        self, host: str, port: int, *, tls: bool = False
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """An idle connection to ``host:port`` if one is open, else a new one."""
        return self.take_idle(host, port) or await self.open(host, port, tls=tls)

    def take_idle(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """An idle kept-alive connection to ``host:port`` that has not seen its end yet
        (the host may still be closing it: see :func:`tether.fleet.relay.exchange`)."""
        idle = self._idle[(host, port)]
        while idle:
            reader, writer = idle.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer
            writer.close()
        return None

    async def open(
        self, host: str, port: int, *, tls: bool = False
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A new connection to ``host:port``; :class:`HostRefused` (or
        :class:`HostUntrusted`) if it cannot be opened within the connect timeout."""
        context = None
        if tls:
            if self.tls_context is None:  # the system's trust store, loaded once
                self.tls_context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
            context = self.tls_context
        try:
            async with asyncio.timeout(self.connect_timeout):
                return await asyncio.open_connection(host, port, limit=READ_SIZE, ssl=context)
        except ssl.SSLError as e:
            raise HostUntrusted(_tls_failure(host, port, e)) from e
        except (OSError, TimeoutError) as e:
            raise HostRefused(f"{host}:{port}: {str(e) or 'connect timed out'}") from e

    def put(
        self, host: str, port: int, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    ) -> None:
        idle = self._idle[(host, port)]
        if len(idle) < POOL_PER_HOST and not conn[1].is_closing():
            idle.append(conn)
        else:
            conn[1].close()

    def forget(self, host: str, port: int) -> None:
        """Drop every idle connection to a host (it was found down)."""
        for _reader, writer in self._idle.pop((host, port), deque()):
            writer.close()

    async def aclose(self) -> None:
        writers = [w for idle in self._idle.values() for _r, w in idle]
        self._idle.clear()
        for writer in writers:
            writer.close()
        for writer in writers:
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()


def _tls_failure(host: str, port: int, e: ssl.SSLError) -> str:
    """What a failed handshake tells the client: the reason OpenSSL gave, and for an
    unverified certificate the flag that makes the router trust it."""
    reason = getattr(e, "verify_message", None) or e.reason or str(e)
    if isinstance(e, ssl.SSLCertVerificationError) and "mismatch" in str(reason).lower():
        return (
            f"{host}:{port}: TLS: the host's certificate does not name it ({reason});"
            " a host's certificate must name the host of the URL it advertises"
        )
    if isinstance(e, ssl.SSLCertVerificationError):
        return (
            f"{host}:{port}: TLS: the host's certificate is not trusted ({reason});"
            " a router trusts hosts' certificates signed by the CA given with --fleet-ca"
        )
    return f"{host}:{port}: TLS handshake failed ({reason}); does the host serve HTTPS?"
