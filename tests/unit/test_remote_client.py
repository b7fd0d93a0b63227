"""The blocking remote client against a scripted loopback HTTP server (a thread, no
processes): an event stream that drops is resumed with Last-Event-ID, a ``lagged`` event
resumes from its ``lastSeq``, and nothing listening is ServerUnreachable."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from tether import errors as e
from tether.remote import client as client_mod
from tether.remote.client import RemoteClient
from tether.remote.sse import Event

SID = "ab" * 32


def _event(seq: int, kind: str = "acp") -> bytes:
    entry = {"seq": seq, "kind": kind, "requestId": "r-1"}
    return f"id: {seq}\ndata: {json.dumps(entry)}\n\n".encode()


class _Script(http.server.BaseHTTPRequestHandler):
    """Answers each events request with the next scripted body, then closes."""

    bodies: ClassVar[list[bytes]] = []
    seen: ClassVar[list[dict[str, str | None]]] = []

    def do_GET(self) -> None:
        type(self).seen.append(
            {
                "path": self.path,
                "last": self.headers.get("Last-Event-ID"),
                "auth": self.headers.get("Authorization"),
            }
        )
        body = type(self).bodies.pop(0) if type(self).bodies else b""
        self.send_response(200 if body else 204)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def script() -> Iterator[tuple[str, type[_Script]]]:
    class Handler(_Script):
        bodies: ClassVar[list[bytes]] = []
        seen: ClassVar[list[dict[str, str | None]]] = []

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", Handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _until_turn_end(got: list[int]) -> Any:
    def on_event(event: Event) -> bool:
        entry = event.json()
        got.append(entry["seq"])
        return bool(entry["kind"] == "turn_ended")

    return on_event


def test_a_dropped_stream_resumes_after_the_last_event(
    script: tuple[str, type[_Script]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection ends mid-turn: the next one sends Last-Event-ID, and every entry
    is delivered once, in order."""
    monkeypatch.setattr(client_mod, "RECONNECT_DELAY_S", (0.0,))
    url, handler = script
    handler.bodies[:] = [_event(5) + _event(6), _event(7) + _event(8, "turn_ended")]
    got: list[int] = []
    with RemoteClient(url, "tok") as client:
        assert client.follow(SID, _until_turn_end(got), from_seq=5) is True
    assert got == [5, 6, 7, 8]
    assert [s["last"] for s in handler.seen] == [None, "6"]
    assert "from=5" in str(handler.seen[0]["path"])
    assert "from=" not in str(handler.seen[1]["path"])
    assert handler.seen[0]["auth"] == "Bearer tok"


def test_lagged_resumes_from_its_last_seq(
    script: tuple[str, type[_Script]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`event: lagged` (the gateway dropped a slow reader) resumes after its lastSeq."""
    monkeypatch.setattr(client_mod, "RECONNECT_DELAY_S", (0.0,))
    url, handler = script
    lagged = b'event: lagged\ndata: {"lastSeq": 9}\n\n'
    handler.bodies[:] = [_event(9) + lagged + _event(99), _event(10, "turn_ended")]
    got: list[int] = []
    with RemoteClient(url, None) as client:
        assert client.follow(SID, _until_turn_end(got)) is True
    assert got == [9, 10]  # nothing after the lagged event was taken from that stream
    assert [s["last"] for s in handler.seen] == [None, "9"]


def test_a_stream_that_ends_for_good_returns_false(script: tuple[str, type[_Script]]) -> None:
    """204 (a closed session, nothing past the cursor) ends the follow: False."""
    url, handler = script
    handler.bodies[:] = []
    with RemoteClient(url, None) as client:
        assert client.follow(SID, _until_turn_end([])) is False


def test_a_stream_that_keeps_breaking_gives_up(
    script: tuple[str, type[_Script]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reconnections without progress are bounded: ServerUnreachable (retryable)."""
    monkeypatch.setattr(client_mod, "RECONNECT_DELAY_S", (0.0,))
    url, handler = script
    handler.bodies[:] = [b": heartbeat\n\n"] * (client_mod.RECONNECTS + 2)
    with RemoteClient(url, None) as client, pytest.raises(e.ServerUnreachable) as raised:
        client.follow(SID, _until_turn_end([]))
    assert raised.value.retryable
    assert len(handler.seen) == client_mod.RECONNECTS


def test_nothing_listening_is_server_unreachable() -> None:
    """A refused connection: ServerUnreachable, exit 7, naming where."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with RemoteClient(url, None) as client, pytest.raises(e.ServerUnreachable) as raised:
        client.call(("GET", "/v1/health", None))
    assert raised.value.exit_code == 7
    assert f"127.0.0.1:{port}" in str(raised.value)
    assert "refused" in str(raised.value)


def test_a_missing_unix_socket_is_server_unreachable(tmp_path: Any) -> None:
    """unix:/path with no socket there: ServerUnreachable saying so."""
    url = f"unix:{tmp_path}/none.sock"
    with RemoteClient(url, None) as client, pytest.raises(e.ServerUnreachable, match="socket"):
        client.call(("GET", "/v1/health", None))


class _Health(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, Content-Length framing

    def do_GET(self) -> None:
        body = b'{"status":"ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


def _certificate(where: Any) -> tuple[str, str]:
    """A self-signed certificate for localhost and 127.0.0.1 (openssl)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl to make a test certificate")
    cert, key = str(where / "cert.pem"), str(where / "key.pem")
    args = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    args += ["-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost"]
    args += ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
    subprocess.run(
        [openssl, *args],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_https_verifies_the_servers_certificate(tmp_path: Any, monkeypatch: Any) -> None:
    """https:// talks TLS, trusting what SSL_CERT_FILE names; a certificate that does not
    verify is a TLS error saying so (not retryable), never a silent plain connection."""
    cert, key = _certificate(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"https://localhost:{server.server_address[1]}"
    try:
        monkeypatch.setenv("SSL_CERT_FILE", cert)
        with RemoteClient(url, "tok") as client:
            assert client.call(("GET", "/v1/health", None)) == {"status": "ok"}
            assert client.call(("GET", "/v1/health", None)) == {"status": "ok"}  # kept alive
        monkeypatch.delenv("SSL_CERT_FILE")
        with RemoteClient(url, "tok") as client, pytest.raises(e.TetherError) as raised:
            client.call(("GET", "/v1/health", None))
        assert "TLS" in str(raised.value)
        assert not raised.value.retryable
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _Forgetful(_Health):
    """Answers as keep-alive, then closes the connection anyway (an idle timeout)."""

    connections: ClassVar[int] = 0

    def setup(self) -> None:
        super().setup()
        type(self).connections += 1

    def do_GET(self) -> None:
        super().do_GET()
        self.close_connection = True


def test_a_kept_connection_the_server_closed_is_replaced_once() -> None:
    """A call on a kept-alive connection the server has closed meanwhile is sent again on
    a new connection (it never reached the server), not reported as a failure."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Forgetful)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with RemoteClient(f"http://127.0.0.1:{server.server_address[1]}", None) as client:
            for _ in range(3):
                assert client.call(("GET", "/v1/health", None)) == {"status": "ok"}
        assert _Forgetful.connections == 3
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
