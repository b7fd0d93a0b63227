"""The gateway's system routes: processes, agents, health, metrics, the OpenAPI document."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from tether import operations
from tether._version import __version__
from tether.errors import NoSession
from tether.serve import bodies
from tether.serve.app import Gateway, endpoint
from tether.serve.json_response import JSONResponse
from tether.serve.sessions_api import HOST, session_key

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def _processes(key: str) -> dict[str, Any]:
    from tether.serve.procs import process_tree
    from tether.state.registry import Registry

    with Registry() as registry:
        if registry.session(key) is None:
            raise NoSession("no such session", session_key=key)
        leases = registry.leases(session_key=key)
    status = operations.status(key)
    return {"sessionKey": key, **process_tree(status, leases[-1] if leases else None)}


@endpoint
async def processes(request: Request) -> Response:
    """The session's process tree as Tether owns it (read from /proc; nothing signalled)."""
    key = session_key(request)
    bodies.check_query(request.query_params, ())
    return JSONResponse(await asyncio.to_thread(_processes, key))


def _agents(gateway: Gateway) -> list[dict[str, Any]]:
    from tether import agents

    configured = gateway.config.get("agents") or {}
    out = []
    for name in sorted({*agents.builtin_names(), *configured}):
        argv = agents.resolve(name, configured)
        out.append({"name": name, "argv": argv, "configured": name in configured})
    return out


@endpoint
async def list_agents(request: Request) -> Response:
    """The agents a session may be created with: built-in names and the config's."""
    bodies.check_query(request.query_params, ())
    return JSONResponse({"agents": await asyncio.to_thread(_agents, request.app.state.gateway)})


@endpoint
async def health(request: Request) -> Response:
    """The gateway is up; what it serves and since when."""
    from tether import paths

    gateway: Gateway = request.app.state.gateway
    doc = {
        "status": "ok",
        "version": __version__,
        "pid": os.getpid(),
        "host": HOST,
        "home": paths.home_path(),
        "uptimeS": round(_uptime(gateway), 3),
        "sseClients": gateway.hubs.clients(),
    }
    if gateway.fork_server is not None:  # owners forked, not exec'd (tether.forkserver)
        doc["forkServer"] = gateway.fork_server.status()
    if gateway.session_hosts is not None:  # owners in shared hosts (tether.sessionhost)
        doc["sessionHosts"] = gateway.session_hosts.status()
    if gateway.fleet_host is not None:
        # A fleet host: its membership (hostId, epoch, indexUp, ...) and shipping.
        doc["fleet"] = gateway.fleet_host.status()
    return JSONResponse(doc)


def _uptime(gateway: Gateway) -> float:
    import time

    return time.time() - gateway.started_at


def _labels(text: str) -> str:
    if not text:
        return ""
    pairs = [p.partition("=") for p in text.split(",") if p]
    inner = ",".join(f'{k}="{_escape(v)}"' for k, _, v in pairs)
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _registry_text() -> str:
    """The registry's counters as Prometheus text: tether.metrics' renderer where it
    exists, else counters only (``tether_<name>``)."""
    from tether import metrics
    from tether.state.registry import Registry

    with Registry() as registry:
        read = getattr(metrics, "read", None)
        render = getattr(metrics, "render_prometheus", None)
        if read is not None and render is not None:
            text: str = render(read(registry))
            return text
        counters = registry.counters()
    out: list[str] = []
    seen: set[str] = set()
    for series, value in sorted(counters.items()):
        name, _, rest = series.partition("{")
        metric = "tether_" + name
        if metric not in seen:
            seen.add(metric)
            out.append(f"# TYPE {metric} counter")
        out.append(f"{metric}{_labels(rest.rstrip('}'))} {value}")
    return "\n".join(out) + ("\n" if out else "")


def _gateway_text(gateway: Gateway) -> str:
    lines = [
        "# HELP tether_serve_requests_total HTTP requests received by this gateway",
        "# TYPE tether_serve_requests_total counter",
        f"tether_serve_requests_total {gateway.requests_total}",
        "# HELP tether_serve_problems_total problem responses sent, by status",
        "# TYPE tether_serve_problems_total counter",
        *(
            f'tether_serve_problems_total{{status="{s}"}} {n}'
            for s, n in sorted(gateway.problems_total.items())
        ),
        "# HELP tether_serve_sse_clients event-stream clients connected now",
        "# TYPE tether_serve_sse_clients gauge",
        f"tether_serve_sse_clients {gateway.hubs.clients()}",
        "# HELP tether_serve_sse_sessions sessions followed for event streams now",
        "# TYPE tether_serve_sse_sessions gauge",
        f"tether_serve_sse_sessions {len(gateway.hubs.by_key)}",
        "# HELP tether_serve_sse_lagged_total clients dropped for falling behind",
        "# TYPE tether_serve_sse_lagged_total counter",
        f"tether_serve_sse_lagged_total {gateway.hubs.lagged_total}",
        "# HELP tether_serve_prompts_total prompts submitted, by path (loop: to a live owner"
        " from the event loop; thread: the full connect-or-start path)",
        "# TYPE tether_serve_prompts_total counter",
        *(
            f'tether_serve_prompts_total{{path="{p}"}} {n}'
            for p, n in sorted(gateway.prompts_total.items())
        ),
    ]
    return "\n".join(lines) + "\n"


@endpoint
async def prometheus(request: Request) -> Response:
    """Counters in the Prometheus text format: the registry's, then the gateway's."""
    gateway: Gateway = request.app.state.gateway
    text = await asyncio.to_thread(_registry_text)
    return PlainTextResponse(text + _gateway_text(gateway), media_type=PROMETHEUS_TEXT)


@endpoint
async def openapi(request: Request) -> Response:
    """This API described (OpenAPI 3.1)."""
    from tether.serve.openapi import document

    return JSONResponse(document())


def system_routes() -> list[BaseRoute]:
    return [
        Route("/v1/sessions/{id}/processes", processes, methods=["GET"]),
        Route("/v1/agents", list_agents, methods=["GET"]),
        Route("/v1/health", health, methods=["GET"]),
        Route("/v1/openapi.json", openapi, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ]
