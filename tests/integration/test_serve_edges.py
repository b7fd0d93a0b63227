"""The gateway's edges, against a real gateway: it answers only the Host names it serves
(DNS rebinding), configurable; and ``--unix`` leaves no socket file behind after a
signal."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
from tests.conftest import python_env
from tests.integration._serve import Gateway, gateway, spawn_gateway

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = pytest.mark.integration
__all__ = ["gateway"]


def _status(gw: Gateway, host: str, path: str = "/v1/health") -> httpx.Response:
    return gw.http.get(path, headers={"Host": host})


def test_a_request_for_a_host_it_does_not_serve_is_refused(gateway: Gateway) -> None:
    """A page that rebinds its own name to 127.0.0.1 sends its name as Host: refused
    with a 400 problem, token or not, on every route; the loopback names are answered."""
    port = gateway.url.rsplit(":", 1)[1]
    for host in (f"attacker.example:{port}", "attacker.example", f"localhost:{int(port) + 1}"):
        for path in ("/v1/health", "/v1/sessions", "/ui/"):
            r = _status(gateway, host, path)
            assert r.status_code == 400, (host, path, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            doc = r.json()
            assert doc["detailCode"] == "HOST_NOT_ALLOWED"
            assert "--allowed-host" in doc["detail"]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
        assert _status(gateway, host).status_code == 200, host
    metrics = gateway.http.get("/metrics").text
    assert 'tether_serve_problems_total{status="400"}' in metrics


def test_more_hosts_are_allowed_by_flag_and_config(tether_home: Path) -> None:
    (tether_home / "config.toml").write_text('[serve]\nallowedHosts = ["other.example:9"]\n')
    os.chmod(tether_home / "config.toml", 0o600)
    gw = spawn_gateway(tether_home, "--allowed-host", "proxy.example")
    try:
        port = gw.url.rsplit(":", 1)[1]
        assert _status(gw, f"proxy.example:{port}").status_code == 200
        assert _status(gw, "proxy.example").status_code == 200
        assert _status(gw, "other.example:9").status_code == 200
        assert _status(gw, f"other.example:{port}").status_code == 400
        assert _status(gw, f"attacker.example:{port}").status_code == 400
    finally:
        gw.stop()
    gw = spawn_gateway(tether_home, "--allowed-host", "*")
    try:
        assert _status(gw, "anything.example:1").status_code == 200
    finally:
        gw.stop()
    done = subprocess.run(
        [sys.executable, "-m", "tether", "serve", "--port", "0", "--allowed-host", "a/b"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**python_env(), "TETHER_HOME": str(tether_home)},
    )
    assert done.returncode == 2, done.stderr
    assert "allowed host 'a/b'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_unix_socket_is_removed_when_a_signal_stops_the_gateway(
    tether_home: Path, sig: signal.Signals
) -> None:
    short = tempfile.mkdtemp(prefix="tg-", dir="/tmp")  # a socket path is at most 107 bytes
    path = os.path.join(short, "gw.sock")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--unix", path, "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**python_env(), "TETHER_HOME": str(tether_home)},
        # what the child does with the signal must not depend on what we inherited
        preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        announced = json.loads(proc.stdout.readline())
        assert announced["url"] == f"unix:{path}"
        token = (tether_home / "serve-token").read_text().strip()
        transport = httpx.HTTPTransport(uds=path)
        with httpx.Client(transport=transport, base_url="http://gateway") as http:
            r = http.get("/v1/health", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200  # any Host over a Unix socket (no browser gets there)
        assert os.path.exists(path)
        proc.send_signal(sig)
        proc.wait(timeout=30)
        assert not os.path.exists(path), "the socket file was left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        shutil.rmtree(short, ignore_errors=True)
