"""The gateway's ASGI application: authentication, problem documents, the route table.

Structure, for the doors still to come:

* every route lives in a ``*_routes(gateway)`` function of its own module and is listed
  in :func:`routes` below;
* the ACP-over-HTTP door (issue 12, ``/v1/acp/{serverId}``) mounts its routes there;
* questions (issue 11: pending interactions listed and answered) are
  :mod:`tether.serve.questions_api`, with the dashboard's panel (``renderQuestions``).

Every response that is not a success is ``application/problem+json``
(:mod:`tether.serve.problems`); a handler raises Tether's own errors and never builds
an error response by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from tether.errors import TetherError, UsageError
from tether.serve import problems
from tether.serve.acp_binding import AcpBinding
from tether.serve.auth import authorized
from tether.serve.hosts import HostRule
from tether.serve.json_response import JSONResponse
from tether.serve.stream import Hubs
from tether.serve.submit import Prompter

logger = logging.getLogger("tether.serve")

PUBLIC_PREFIXES = ("/ui",)  # the dashboard's files hold no data: the page asks for the token
THREADS = 64  # blocking operations (IPC, sqlite) run in threads; prompts wait on acks there


class Gateway:
    """What the application needs: the token, the config, the SSE hubs. No session state."""

    def __init__(
        self,
        *,
        token: str,
        config: dict[str, Any],
        heartbeat: float,
        ring_entries: int,
        hosts: HostRule | None = None,
        acp: AcpBinding | None = None,
    ) -> None:
        self.token = token
        self.acp = acp  # the ACP door, for ACP over HTTP (tether.serve.acp_binding); None: none
        self.hosts = hosts  # the Host headers answered (tether.serve.hosts); None: any
        self.config = config
        self.heartbeat = heartbeat
        self.hubs = Hubs(ring_entries)
        self.prompter = Prompter(self.hubs)
        self.started_at = time.time()
        self.stopping: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.requests_total = 0
        self.problems_total: dict[int, int] = {}
        self.prompts_total = {"loop": 0, "thread": 0}
        # The fleet host beside this gateway (tether.fleet.host.FleetHost), or None.
        self.fleet_host: Any = None
        # The owner fork server (tether.forkserver.client.ForkServer), or None (off).
        self.fork_server: Any = None
        # The session hosts' pool (tether.sessionhost.client.HostPool), or None (off).
        self.session_hosts: Any = None

    def stop(self) -> None:
        """End every stream (from the loop): the server is shutting down."""
        if self.stopping is not None:
            self.stopping.set()
        self.hubs.close_all()
        self.prompter.close_all()


def problem_response(
    status: int, doc: dict[str, Any], headers: dict[str, str] | None = None
) -> Response:
    return JSONResponse(doc, status_code=status, media_type=problems.PROBLEM_JSON, headers=headers)


def error_response(gateway: Gateway, exc: TetherError) -> Response:
    status, doc = problems.problem(exc)
    gateway.problems_total[status] = gateway.problems_total.get(status, 0) + 1
    return problem_response(status, doc)


Handler = Callable[[Request], Awaitable[Response]]


def endpoint(fn: Handler) -> Handler:
    """A route handler whose Tether errors become problem documents (and bugs a 500)."""

    async def wrapped(request: Request) -> Response:
        gateway: Gateway = request.app.state.gateway
        try:
            return await fn(request)
        except TetherError as exc:
            return error_response(gateway, exc)
        except Exception:
            logger.exception("unexpected failure in %s %s", request.method, request.url.path)
            gateway.problems_total[500] = gateway.problems_total.get(500, 0) + 1
            return problem_response(
                500, problems.plain(500, "Internal Server Error", "an unexpected failure")
            )

    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


class AuthMiddleware:
    """Every request needs a ``Host:`` the gateway serves (:mod:`tether.serve.hosts`),
    and every route but the dashboard's files ``Authorization: Bearer <token>``.

    A refused Host is a 400 ``HOST_NOT_ALLOWED`` before anything else is looked at.
    A 401 says only "Unauthorized": no hint whether a token was missing or wrong.
    A WebSocket (no route takes one today) gets the same check, refused by closing
    before it is accepted: no kind of request reaches a route without the token.
    """

    def __init__(self, app: ASGIApp, gateway: Gateway) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            host_ok = self.gateway.hosts is None or self.gateway.hosts.allows(
                _header(scope, b"host")
            )
            if host_ok and authorized(_header(scope, b"authorization"), self.gateway.token):
                await self.app(scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1008})  # policy violation
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.gateway.requests_total += 1
        hosts = self.gateway.hosts
        if hosts is not None:
            host = _header(scope, b"host")
            if not hosts.allows(host):
                refused = UsageError(
                    f"Host {host!r} is not a name this gateway serves (DNS rebinding is"
                    " refused); allow it with --allowed-host or serve.allowedHosts",
                    detail_code="HOST_NOT_ALLOWED",
                )
                await error_response(self.gateway, refused)(scope, receive, send)
                return
        path: str = scope.get("path", "")
        if path == "/" or path.startswith(PUBLIC_PREFIXES):
            await self.app(scope, receive, send)
            return
        if not authorized(_header(scope, b"authorization"), self.gateway.token):
            self.gateway.problems_total[401] = self.gateway.problems_total.get(401, 0) + 1
            response = problem_response(
                401, problems.plain(401, "Unauthorized"), {"WWW-Authenticate": "Bearer"}
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == wanted:
            return str(value.decode("latin-1"))
    return None


async def _http_problem(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    title = {404: "Not Found", 405: "Method Not Allowed"}.get(status, "Error")
    detail = exc.detail if isinstance(exc, HTTPException) else None
    return problem_response(status, problems.plain(status, title, detail))


def _ui_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "ui")


def routes(gateway: Gateway) -> list[BaseRoute]:
    """The route table. New doors add their group here (see the module docstring)."""
    from tether.serve import acp_api, events_api, questions_api, sessions_api, system_api

    return [
        *sessions_api.session_routes(),
        *events_api.event_routes(),
        *system_api.system_routes(),
        *questions_api.question_routes(),
        # issue 12: ACP over HTTP, when the program handed the gateway the ACP door
        *(acp_api.acp_routes() if gateway.acp is not None else []),
        Route("/", lambda _r: RedirectResponse("/ui/"), include_in_schema=False),
        Mount("/ui", app=StaticFiles(directory=_ui_dir(), html=True), name="ui"),
    ]


def build_app(gateway: Gateway, extra_routes: Sequence[BaseRoute] = ()) -> ASGIApp:
    """The gateway's ASGI app (``extra_routes`` come before the built-in ones)."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="tether-op")
        loop.set_default_executor(executor)
        gateway.stopping = asyncio.Event()
        gateway.loop = loop
        try:
            yield
        finally:
            gateway.stop()
            executor.shutdown(wait=False, cancel_futures=True)

    app = Starlette(
        routes=[*extra_routes, *routes(gateway)],
        exception_handlers={HTTPException: _http_problem},
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    return AuthMiddleware(app, gateway)
