"""A fleet host's gate in front of its gateway (ASGI): the probes ``/livez`` and
``/readyz`` answered without credentials, and ``503 HOST_DRAINING`` for new work while
the host drains (:class:`tether.fleet.drain.HostDrainer` decides; this module only
presents it over HTTP)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tether.errors import HostDraining
from tether.serve import problems

__all__ = ["DrainGate"]

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from tether.fleet.drain import HostDrainer


_PASSING = ("/cancel", "/terminate")  # requests that end work, never start it


def _admits_work(method: str, path: str) -> bool:
    """Whether a request may start a session, a turn or an owner (refused while draining)."""
    if method != "POST":
        return False
    return not path.endswith(_PASSING) and "/questions/" not in path


class DrainGate:
    """ASGI middleware of a fleet host: ``/livez`` and ``/readyz`` without credentials,
    and ``503 HOST_DRAINING`` for new work once the host drains."""

    def __init__(self, app: ASGIApp, drainer: HostDrainer) -> None:
        self.app = app
        self.drainer = drainer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        if path == "/livez":
            state = self.drainer.machine.state
            await _json(send, 200, {"live": True, "state": state.value})
            return
        if path == "/readyz":
            ready = self.drainer.readiness()
            await _json(send, 200 if ready["ready"] else 503, ready)
            return
        if not _admits_work(scope.get("method", ""), path):
            await self.app(scope, receive, send)
            return
        if not self.drainer.machine.admits:
            await _refuse(send, self.drainer)
            return
        self.drainer.inflight += 1  # (the loop's thread only)
        try:
            await self.app(scope, receive, send)
        finally:
            self.drainer.inflight -= 1


async def _json(
    send: Send, status: int, doc: dict[str, Any], media: str = "application/json"
) -> None:
    body = json.dumps(doc, separators=(",", ":")).encode()
    headers = [(b"content-type", media.encode()), (b"content-length", str(len(body)).encode())]
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _refuse(send: Send, drainer: HostDrainer) -> None:
    exc = HostDraining(
        f"host {drainer.host.host_id} is draining: it admits no new session or prompt",
        hostId=drainer.host.host_id,
    )
    status, doc = problems.problem(exc)
    await _json(send, status, doc, problems.PROBLEM_JSON)
