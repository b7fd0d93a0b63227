"""TLS and credentials between the parts, without processes: which files serve HTTPS,
where a host's advertised URL says to connect, what a failed handshake tells the client,
and that no kind of request passes the gateway without its token."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests._certs import CertificateAuthority

from tether.errors import UsageError
from tether.fleet.relay import Endpoint, HostConnections, HostUntrusted
from tether.serve import tls

TOKEN = "the-gateway-token-0123456789"


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path)


def _inv(**given: Any) -> SimpleNamespace:
    return SimpleNamespace(**{"tls_cert": None, "tls_key": None, "fleet_ca": None, "unix": None,
                              **given})  # fmt: skip


def test_the_flags_win_over_the_config_and_the_pair_is_loaded(ca: CertificateAuthority) -> None:
    """--tls-cert/--tls-key before ``serve.tlsCert``/``tlsKey``; none of either: plain."""
    one, two = ca.issue("one"), ca.issue("two")
    config = {"serve": {"tlsCert": str(two.cert), "tlsKey": str(two.key)}}
    assert tls.server_files(_inv(), {}) is None
    assert tls.server_files(_inv(), config) == tls.ServerFiles(str(two.cert), str(two.key))
    given = _inv(tls_cert=str(one.cert), tls_key=str(one.key))
    assert tls.server_files(given, config) == tls.ServerFiles(str(one.cert), str(one.key))
    with pytest.raises(UsageError, match="cannot load them"):
        tls.server_files(_inv(tls_cert=str(one.cert), tls_key=str(two.key)), {})


def test_the_fleet_ca_comes_from_the_flag_or_the_config(ca: CertificateAuthority) -> None:
    """``--fleet-ca`` or ``serve.fleetCa``; a context built from it verifies names."""
    assert tls.fleet_ca_file(_inv(), {}) is None
    assert tls.fleet_ca_file(_inv(), {"serve": {"fleetCa": "c.pem"}}) == "c.pem"
    assert tls.fleet_ca_file(_inv(fleet_ca="f.pem"), {"serve": {"fleetCa": "c.pem"}}) == "f.pem"
    ctx = tls.fleet_client_context(str(ca.path))
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.check_hostname
    with pytest.raises(UsageError, match="no such file"):
        tls.fleet_client_context(str(ca.path) + ".missing")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        pytest.param("http://10.0.0.1:8787", Endpoint("10.0.0.1", 8787, False, b"10.0.0.1:8787")),
        pytest.param("https://h.example", Endpoint("h.example", 443, True, b"h.example")),
        pytest.param("http://[::1]:9", Endpoint("::1", 9, False, b"[::1]:9")),
        pytest.param("https://a.b:1", Endpoint("a.b", 1, True, b"a.b:1")),
    ],
)
def test_an_advertised_url_says_where_and_whether_over_tls(url: str, expected: Endpoint) -> None:
    """https:// means TLS (port 443 by default); the Host header keeps the URL's form."""
    assert Endpoint.of(url) == expected


def test_a_handshake_with_an_untrusted_host_fails_at_once_naming_the_flag(
    ca: CertificateAuthority,
) -> None:
    """A pooled connection to a TLS host whose CA the router does not hold raises
    HostUntrusted (nothing sent) naming --fleet-ca; with the CA it opens."""
    leaf = ca.issue("host")

    async def main() -> tuple[str, bool]:
        server_ctx = tls.server_context(tls.ServerFiles(str(leaf.cert), str(leaf.key)))

        async def on_client(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.close()

        server = await asyncio.start_server(on_client, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(HostUntrusted) as refused:
                await HostConnections(5.0).get("127.0.0.1", port, tls=True)
            trusted = HostConnections(5.0, tls.fleet_client_context(str(ca.path)))
            _reader, writer = await trusted.get("127.0.0.1", port, tls=True)
            opened = writer.get_extra_info("ssl_object") is not None
            writer.close()
            return str(refused.value), opened
        finally:
            server.close()
            await server.wait_closed()

    said, opened = asyncio.run(main())
    assert "certificate is not trusted" in said
    assert "--fleet-ca" in said
    assert opened


def test_a_websocket_without_the_token_is_closed_before_it_is_accepted() -> None:
    """No route takes a WebSocket, and none could without the token: the middleware
    closes it (1008) before the application sees it; with the token it passes."""
    pytest.importorskip("starlette", reason="the gateway needs the serve extra")
    from tether.serve.app import AuthMiddleware, Gateway

    seen: list[str] = []

    async def app(scope: Any, _receive: Any, _send: Any) -> None:
        seen.append(scope["type"])

    gateway = Gateway(token=TOKEN, config={}, heartbeat=15.0, ring_entries=16)
    middleware = AuthMiddleware(app, gateway)

    async def call(headers: list[tuple[bytes, bytes]]) -> list[Any]:
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        async def receive() -> Any:
            return {"type": "websocket.connect"}

        await middleware({"type": "websocket", "path": "/v1/x", "headers": headers},
                         receive, send)  # fmt: skip
        return sent

    for headers in ([], [(b"authorization", b"Bearer someone-elses-token-000")]):
        assert asyncio.run(call(headers)) == [{"type": "websocket.close", "code": 1008}]
    assert seen == []
    assert asyncio.run(call([(b"authorization", f"Bearer {TOKEN}".encode())])) == []
    assert seen == ["websocket"]
