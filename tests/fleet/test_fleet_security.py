"""Security between the parts of a fleet (issue 25, item 5), every part a real process.

Hosts serve HTTPS with a certificate signed by a throwaway CA made here (the
``cryptography`` package); a router given that CA (``--fleet-ca``) creates, prompts,
streams and closes sessions on them; a router without it gets a retryable problem that
names the reason, without hanging. A host answers nothing to a user's token -- on any of
its routes -- and everything to the fleet credential.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from tests._certs import CertificateAuthority, Leaf
from tests.fleet import test_fleet_e2e
from tests.fleet.test_fleet_e2e import (
    FLEET_TOKEN,
    USER_TOKEN,
    Processes,
    create,
    turn_text,
)
from tests.integration._serve import Gateway, spawn_gateway

pytestmark = [
    pytest.mark.fleet,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(240),
]

procs = test_fleet_e2e.procs  # the fixture: every process a test started is stopped


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    d = tmp_path / "pki"
    d.mkdir()
    return CertificateAuthority(d)


def trusting(ca: CertificateAuthority, *, check_name: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca.path))
    ctx.check_hostname = check_name
    return ctx


def tls_host(
    procs: Processes, host_id: str, leaf: Leaf, ca: CertificateAuthority, *, check_name: bool = True
) -> Gateway:
    """A host serving HTTPS with ``leaf``; the test's own client of it trusts ``ca``."""
    home = procs.base / host_id
    home.mkdir()
    tls = ("--tls-cert", str(leaf.cert), "--tls-key", str(leaf.key))
    gw = spawn_gateway(home, "--host-id", host_id, *tls, env=procs.env)
    gw.http.close()
    gw.token = FLEET_TOKEN
    gw.http = httpx.Client(
        base_url=gw.url,
        headers={"Authorization": f"Bearer {FLEET_TOKEN}"},
        verify=trusting(ca, check_name=check_name),
        timeout=30.0,
    )
    procs.hosts[host_id] = gw
    return gw


def router(procs: Processes, *args: str, verify: ssl.SSLContext | None = None) -> Gateway:
    """A router; ``verify``: it serves HTTPS, and the test's client trusts it so."""
    home = procs.base / f"router{len(procs.routers)}"
    home.mkdir()
    gw = spawn_gateway(home, "--router", "--token", USER_TOKEN, *args, env=procs.env)
    gw.token = USER_TOKEN
    if verify is not None:
        gw.http.close()
        gw.http = httpx.Client(base_url=gw.url, verify=verify, timeout=30.0)
    gw.http.headers["Authorization"] = f"Bearer {USER_TOKEN}"
    procs.routers.append(gw)
    return gw


def test_sessions_route_over_tls_to_hosts_a_router_trusts_by_the_fleet_ca(
    procs: Processes, project_dir: Path, ca: CertificateAuthority
) -> None:
    """A TLS host advertises https://; a router with --fleet-ca (itself serving HTTPS to
    users) creates, prompts, streams, reads and closes its sessions through it."""
    host = tls_host(procs, "h1", ca.issue("h1"), ca)
    assert host.url.startswith("https://127.0.0.1:")
    assert host.http.get("/v1/health").status_code == 200  # the fleet credential, over TLS
    own = ca.issue("router")
    tls = ("--tls-cert", str(own.cert), "--tls-key", str(own.key))
    r = router(procs, "--fleet-ca", str(ca.path), *tls, verify=trusting(ca))
    assert r.url.startswith("https://127.0.0.1:")
    listed = r.http.get("/v1/fleet/hosts").json()["hosts"]
    assert [(h["hostId"], h["url"], h["available"]) for h in listed] == [("h1", host.url, True)]
    s = create(r, project_dir, "secure")
    assert s["created"]
    assert turn_text(r, s["id"], "hello over tls") == "hello over tls"
    assert turn_text(r, s["id"], "again") == "again"  # a warm prompt on pooled TLS
    history = r.http.get(f"/v1/sessions/{s['id']}/history")
    assert history.status_code == 200
    assert len(history.json()["turns"]) == 2
    assert r.http.delete(f"/v1/sessions/{s['id']}").status_code == 200


def test_a_router_without_the_fleet_ca_gets_a_retryable_problem_naming_tls(
    procs: Processes, project_dir: Path, ca: CertificateAuthority
) -> None:
    """A router that does not trust the hosts' CA answers 503 HOST_UNAVAILABLE,
    retryable, naming the untrusted certificate and --fleet-ca; a router that trusts it
    serves the same session meanwhile."""
    tls_host(procs, "h1", ca.issue("h1"), ca)
    trusted = router(procs, "--fleet-ca", str(ca.path))
    blind = router(procs)
    s = create(trusted, project_dir, "seen")

    for answer in (
        blind.http.post("/v1/sessions", json={"agent": "mock", "cwd": str(project_dir)}),
        blind.http.post(f"/v1/sessions/{s['id']}/prompt", json={"prompt": "x"}),
        blind.http.post(f"/v1/sessions/{s['id']}/prompt", json={"prompt": "x"}),  # remembered
    ):
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        doc = answer.json()
        assert (doc["code"], doc["retryable"]) == ("HOST_UNAVAILABLE", True)
        assert "certificate is not trusted" in doc["detail"]
        assert "--fleet-ca" in doc["detail"]
        assert "Traceback" not in answer.text

    assert turn_text(trusted, s["id"], "still here") == "still here"
    assert "Traceback" not in blind.stderr()
    assert "Traceback" not in procs.hosts["h1"].stderr()


def test_a_host_with_a_certificate_for_another_name_is_refused_saying_so(
    procs: Processes, project_dir: Path, ca: CertificateAuthority
) -> None:
    """Trusting the CA is not enough: the certificate must name the advertised host."""
    tls_host(procs, "h1", ca.issue("h1", dns=("elsewhere.test",), ips=()), ca, check_name=False)
    r = router(procs, "--fleet-ca", str(ca.path))
    answer = r.http.post("/v1/sessions", json={"agent": "mock", "cwd": str(project_dir)})
    assert answer.status_code == 503, answer.text
    assert answer.json()["retryable"] is True
    assert "does not name it" in answer.json()["detail"]


def test_a_host_answers_no_route_to_a_users_token_and_every_one_to_the_fleet_credential(
    procs: Processes, project_dir: Path
) -> None:
    """A user request that did not come through a router is refused on every route the
    host describes (401, no detail); the fleet credential the router sends is accepted."""
    host = procs.host("h1")
    r = procs.router()
    s = create(r, project_dir, "direct")
    spec = host.http.get("/v1/openapi.json")
    assert spec.status_code == 200  # the fleet credential
    paths = spec.json()["paths"]
    assert len(paths) >= 10
    tried = 0
    with httpx.Client(base_url=host.url, timeout=30.0) as user:
        for template, operations in paths.items():
            path = template.replace("{id}", s["id"])
            path = path.replace("{sessionId}", s["id"])
            for method in operations:
                for headers in ({"Authorization": f"Bearer {USER_TOKEN}"}, {}):
                    answer = user.request(method.upper(), path, headers=headers, json={})
                    assert answer.status_code == 401, (method, path, answer.text)
                    assert answer.json()["title"] == "Unauthorized"
                    tried += 1
    assert tried >= 2 * len(paths)
    # The same session, through the router, with the user's token: the router's own
    # credential reaches the host.
    assert r.http.get(f"/v1/sessions/{s['id']}").status_code == 200
