"""``tether serve --tls-cert FILE --tls-key FILE``: a single gateway serving HTTPS with
uvicorn's own TLS, the same from the config's ``[serve]`` table, and every wrong
combination refused as a usage error before anything listens."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from tests._certs import CertificateAuthority
from tests.conftest import python_env
from tests.integration._serve import spawn_gateway

pytest.importorskip("starlette", reason="tether serve needs the serve extra")


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    d = tmp_path / "pki"
    d.mkdir()
    return CertificateAuthority(d, "local")


def _health(url: str, token: str, ca: CertificateAuthority) -> httpx.Response:
    verify = ssl.create_default_context(cafile=str(ca.path))
    with httpx.Client(verify=verify, timeout=30.0) as client:
        return client.get(f"{url}/v1/health", headers={"Authorization": f"Bearer {token}"})


def test_a_gateway_serves_https_with_the_files_given_by_flag_or_config(
    tether_home: Path, ca: CertificateAuthority
) -> None:
    """The announced URL and dashboard are https://, the certificate is the one given,
    the token is still required; ``tlsCert``/``tlsKey`` in ``[serve]`` do the same."""
    leaf = ca.issue("gateway")
    gw = spawn_gateway(tether_home, "--tls-cert", str(leaf.cert), "--tls-key", str(leaf.key))
    try:
        assert gw.url.startswith("https://127.0.0.1:")
        assert _health(gw.url, gw.token, ca).status_code == 200
        assert _health(gw.url, "not-the-token-0123456789", ca).status_code == 401
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the CA
            httpx.get(f"{gw.url}/v1/health", timeout=30.0)
    finally:
        gw.stop()
    config = f'[serve]\ntlsCert = "{leaf.cert}"\ntlsKey = "{leaf.key}"\n'
    (tether_home / "config.toml").write_text(config)
    os.chmod(tether_home / "config.toml", 0o600)
    gw = spawn_gateway(tether_home)
    try:
        assert gw.url.startswith("https://")
        assert _health(gw.url, gw.token, ca).status_code == 200
    finally:
        gw.stop()


def _serve(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**python_env(), "TETHER_HOME": str(home), "TETHER_FLEET_INDEX": "", **env},
    )


def test_wrong_tls_flags_are_usage_errors_before_anything_listens(
    tether_home: Path, ca: CertificateAuthority, tmp_path: Path
) -> None:
    """A certificate without its key, a key that does not match, a missing file, TLS on
    a Unix socket, --fleet-ca on anything but a router, a TLS host advertising http://:
    exit 2, said plainly (the last before the fleet index is ever reached)."""
    leaf, other = ca.issue("one"), ca.issue("two")
    missing = str(tmp_path / "missing.pem")
    cases = [
        (("--tls-cert", str(leaf.cert)), "--tls-cert and --tls-key go together"),
        (("--tls-cert", str(leaf.cert), "--tls-key", str(other.key)), "cannot load them"),
        (("--tls-cert", missing, "--tls-key", str(leaf.key)), f"no such file {missing}"),
        (
            ("--unix", str(tmp_path / "s"), "--tls-cert", str(leaf.cert), "--tls-key", "k"),
            "--unix",
        ),
        (("--fleet-ca", str(ca.path)), "--fleet-ca is a router's flag"),
    ]
    for args, said in cases:
        done = _serve(tether_home, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    tls = ("--tls-cert", str(leaf.cert), "--tls-key", str(leaf.key))
    fleet = {"TETHER_FLEET_INDEX": "postgresql://nobody@127.0.0.1:1/none",
             "TETHER_FLEET_TOKEN": "f" * 32}  # fmt: skip
    done = _serve(tether_home, "--advertise", "http://127.0.0.1:1", *tls, **fleet)
    assert done.returncode == 2, done.stderr
    assert "this host serves HTTPS" in done.stderr
