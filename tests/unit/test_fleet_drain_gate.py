"""A fleet host's front door while it drains: probes without credentials, new work
refused retryably, everything else passed on (no processes, no index)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("starlette", reason="the gate is ASGI middleware (the serve extra)")

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from tether.fleet.drain import HostDrainer
from tether.fleet.membership import MembershipStatus
from tether.serve.drain_gate import DrainGate


class FakeMembership:
    def status(self) -> MembershipStatus:
        return MembershipStatus("h1", 3, True, False, False, 0.1)


class FakeHost:
    host_id = "h1"
    membership = FakeMembership()


def _client() -> tuple[TestClient, HostDrainer, list[str]]:
    seen: list[str] = []

    async def any_route(request: Request) -> JSONResponse:
        seen.append(f"{request.method} {request.url.path}")
        return JSONResponse({"ok": True})

    paths = ["/v1/sessions", "/v1/sessions/{id}/prompt", "/v1/sessions/{id}/cancel",
             "/v1/sessions/{id}/questions/{q}", "/v1/sessions/{id}/history"]  # fmt: skip
    app = Starlette(routes=[Route(p, any_route, methods=["GET", "POST"]) for p in paths])
    drainer = HostDrainer(FakeHost(), 30.0)  # type: ignore[arg-type]
    return TestClient(DrainGate(app, drainer)), drainer, seen


def test_probes_answer_without_credentials_and_readiness_drops_while_draining() -> None:
    client, drainer, seen = _client()
    assert client.get("/livez").json() == {"live": True, "state": "serving"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["ready"] is True
    drainer.machine.request(0.0)  # (the machine alone: no drain thread)
    ready = client.get("/readyz")
    assert (ready.status_code, ready.json()["why"]) == (503, "draining")
    assert client.get("/livez").status_code == 200  # alive while draining
    assert seen == []  # probes never reach the application


@pytest.mark.parametrize(
    ("method", "path", "refused"),
    [
        pytest.param("POST", "/v1/sessions", True, id="new-session"),
        pytest.param("POST", "/v1/sessions/s1/prompt", True, id="new-prompt"),
        pytest.param("POST", "/v1/sessions/s1/cancel", False, id="cancel"),
        pytest.param("POST", "/v1/sessions/s1/questions/q1", False, id="answer"),
        pytest.param("GET", "/v1/sessions/s1/history", False, id="read"),
    ],
)
def test_while_draining_new_work_is_refused_retryably(
    method: str, path: str, refused: bool
) -> None:
    client, drainer, seen = _client()
    assert client.request(method, path).status_code == 200  # serving: everything passes
    drainer.machine.request(0.0)
    r = client.request(method, path)
    if refused:
        doc: dict[str, Any] = r.json()
        assert r.status_code == 503
        assert (doc["code"], doc["detailCode"], doc["retryable"]) == (
            "HOST_DRAINING", "HOST_DRAINING", True,
        )  # fmt: skip
        assert r.headers["retry-after"] == "1"
        assert r.headers["content-type"] == "application/problem+json"
        assert seen == [f"{method} {path}"]
    else:
        assert r.status_code == 200
        assert seen == [f"{method} {path}"] * 2
    assert drainer.inflight == 0
