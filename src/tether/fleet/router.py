"""The router: ``tether serve --router``. Stateless; any number of replicas.

Each request for a session (``/v1/sessions/{id}/...``) goes to the host that owns the
session, found in a cached host table (and each ACP-over-HTTP request, ``/v1/acp/{id}``,
to the host that serves its server: :mod:`tether.fleet.router_acp`), and the host's
answer comes back byte for byte
(:mod:`tether.fleet.relay`; the relay of one request and the answers for sessions it
cannot relay to are :mod:`tether.fleet.router_forward`). The router never signals
anything and holds nothing a replica would need: its cache is rebuilt from the index.

The host table is refreshed from the index by a thread every ``refresh_s``; a session's
host is looked up once and cached. Routing itself reads only memory, so while
PostgreSQL is down, existing sessions keep routing from the cache.

A host is unavailable to the router when the index says it is down, when its heartbeat
is older than ``ttl_s`` (by the index's clock, aged locally since the last refresh), or
when a connection to it is refused. Requests for its sessions then get ``503
HOST_UNAVAILABLE`` (retryable) without anything being sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ssl
from dataclasses import dataclass, field
from typing import Any

from tether.errors import FleetError
from tether.fleet import http1, router_access, router_forward
from tether.fleet.delegation import ASSERTION_HEADER
from tether.fleet.host_table import HostTable
from tether.fleet.index import FleetIndex
from tether.fleet.relay import ClientLink, Endpoint, HostConnections
from tether.fleet.requests import RequestBody as _RequestBody
from tether.fleet.requests import RequestQueue, serve_connection, serve_listener
from tether.fleet.rows import HostRow
from tether.policy.visibility import A2APolicy, Visibility

DEFAULT_REFRESH_S = 0.25
DEFAULT_TTL_S = 5.0
SESSION_CACHE_S = 5.0
# Routes every host answers alike, relayed to any available host.
ANY_HOST_ROUTES = ("/v1/openapi.json", "/v1/agents")


@dataclass(slots=True)
class RouterSettings:
    dsn: str
    token: str | None  # users' bearer token (None: no check, loopback only)
    fleet_token: str | None  # the credential the router presents to hosts
    ttl_s: float = DEFAULT_TTL_S
    refresh_s: float = DEFAULT_REFRESH_S
    connect_timeout_s: float = 1.0
    first_byte_timeout_s: float = DEFAULT_TTL_S + 1.0
    # What requesters asserted by hosts may reach ([sessions] visibility, [agentToAgent]).
    visibility: Visibility = Visibility.TREE
    a2a: A2APolicy = field(default_factory=A2APolicy)


class Router:
    def __init__(self, settings: RouterSettings, host_tls: ssl.SSLContext | None = None) -> None:
        self.settings = settings
        self.table = HostTable(lambda: FleetIndex.connect(settings.dsn), settings.refresh_s)
        self.table.refused_ttl_s = settings.ttl_s
        # https:// hosts are reached with host_tls (tether.serve.tls.fleet_client_context)
        self.pool = HostConnections(settings.connect_timeout_s, host_tls)
        self.fleet_auth = (
            b"Bearer " + settings.fleet_token.encode() if settings.fleet_token else None
        )
        self.requests_total = 0
        self.routed_total = 0

    def start(self) -> None:
        self.table.start()

    def stop(self) -> None:
        """Stop refreshing the host table (after :func:`serve_router` has returned)."""
        self.table.stop()

    # --- connections -------------------------------------------------------------------

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def counted() -> None:
            self.requests_total += 1

        await serve_connection(reader, writer, self._serve_one, counted)

    async def _drain_body(self, queue: RequestQueue) -> None:
        await _RequestBody(queue).drain()

    # --- one request -------------------------------------------------------------------

    def _caller(self, head: http1.RequestHead) -> str | None:
        """``"fleet"`` (a host, with the fleet credential), ``"user"`` or None (refused)."""
        got = head.header(b"authorization") or b""
        fleet = self.fleet_auth is not None and hmac.compare_digest(got, self.fleet_auth)
        if fleet and head.header(ASSERTION_HEADER) is not None:
            return "fleet"
        token = self.settings.token
        if token is None or hmac.compare_digest(got, b"Bearer " + token.encode()):
            return "user"
        return "fleet" if fleet else None  # the fleet's, asserting no one: refused

    async def _serve_one(
        self,
        head: http1.RequestHead,
        queue: RequestQueue,
        out: asyncio.StreamWriter,
        link: ClientLink,
    ) -> bool:
        path = head.path
        if path == "/v1/health":
            await self._drain_body(queue)
            out.write(http1.json_response(200, self.health()))
            return True
        if path == "/" or path.startswith("/ui"):
            # The dashboard's files hold no data (the page asks for the token): any host
            # serves them, and the page then talks to this router.
            return await self._any_host(head, queue, out, link)
        caller = self._caller(head)
        if caller is None:
            await self._drain_body(queue)
            out.write(http1.problem(401, "Unauthorized", "a bearer token is needed",
                                    code="UNAUTHORIZED", retryable=False))  # fmt: skip
            return True
        # Who the request speaks for: the operator (a user's token), or an agent's
        # session a host proved and asserts (tether.fleet.router_access).
        who, refused = await router_access.requester(self, head, caller == "fleet")
        if refused is not None:
            await self._drain_body(queue)
            out.write(refused)
            return True
        if path == "/v1/fleet/hosts" and head.method == b"GET":
            await self._drain_body(queue)
            hosts = [
                {**h.to_dict(), "available": self.unavailable_reason(h) is None}
                for h in self.table.hosts()
            ]
            out.write(http1.json_response(200, {"hosts": hosts}))
            return True
        if path in ANY_HOST_ROUTES and head.method == b"GET":
            return await self._any_host(head, queue, out, link)
        if path.startswith("/v1/acp/"):
            from tether.fleet import router_acp

            return await router_acp.route(self, head, _RequestBody(queue), out, link)
        if path == "/v1/sessions":
            from tether.fleet import router_sessions

            if head.method == b"GET":
                await self._drain_body(queue)
                out.write(await router_sessions.list_sessions(self, head, who))
                return True
            if head.method == b"POST":
                return await router_sessions.create_session(
                    self, head, _RequestBody(queue), out, link, who
                )
        sid = http1.session_id_of(path)
        if who is not None and sid is not None:
            refused = await router_access.target_refused(self, who, sid, head)
            if refused is not None:
                await self._drain_body(queue)
                out.write(refused)
                return True
        if sid is not None and head.method == b"POST" and path.endswith("/rehome"):
            from tether.fleet import router_rehome

            return await router_rehome.rehome(self, sid, _RequestBody(queue), out)
        if sid is not None and head.method == b"DELETE" and path == f"/v1/sessions/{sid}":
            from tether.fleet import router_sessions

            await router_sessions.close_children(self, sid)  # children first, any host
        if sid is None:
            await self._drain_body(queue)
            out.write(http1.problem(404, "Not Found", f"the router does not serve {path}",
                                    code="NOT_FOUND", retryable=False))  # fmt: skip
            return True
        return await self._route(sid, head, queue, out, link)

    def least_loaded(self) -> HostRow | None:
        from tether.fleet.placement import load

        up = [h for h in self.table.hosts() if self.unavailable_reason(h) is None]
        return min(up, key=lambda h: (load(h), h.host_id), default=None)

    async def _any_host(
        self,
        head: http1.RequestHead,
        queue: RequestQueue,
        out: asyncio.StreamWriter,
        link: ClientLink,
    ) -> bool:
        """A route every host answers alike (the dashboard, the API description, the
        agents): relayed to the least loaded available host."""
        host = self.least_loaded()
        if host is None:
            await self._drain_body(queue)
            out.write(http1.problem(503, "Service Unavailable", "no host is available",
                                    code="HOST_UNAVAILABLE", retryable=True))  # fmt: skip
            return True
        keep, _status = await router_forward.forward(
            self, host, head, _RequestBody(queue), out, link
        )
        return keep

    async def probe(self, host: HostRow) -> str | None:
        """Whether a host that looks alive in the index accepts a connection; a refusal
        is remembered (:meth:`HostTable.mark_refused`) and said."""
        at = Endpoint.of(host.url)
        try:
            async with asyncio.timeout(self.settings.connect_timeout_s):
                _reader, writer = await asyncio.open_connection(at.host, at.port)
        except (OSError, TimeoutError) as e:
            why = f"host {host.host_id} refuses connections ({str(e) or 'timed out'})"
            self.table.mark_refused(host, why)
            return why
        writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await writer.wait_closed()
        return None

    def unavailable_reason(self, host: HostRow) -> str | None:
        refused = self.table.refused(host.host_id)
        if refused is not None:
            why = self.table.refused_why(host.host_id)
            return f"host {host.host_id} refused a connection {refused:.1f} s ago" + (
                f" ({why})" if why else ""
            )
        if host.state == "down":
            return f"host {host.host_id} is down ({host.down_reason or 'fenced'})"
        age = self.table.age(host)
        if age > self.settings.ttl_s:
            return f"host {host.host_id} has not been heard from for {age:.1f} s"
        return None

    async def _route(
        self,
        sid: str,
        head: http1.RequestHead,
        queue: RequestQueue,
        out: asyncio.StreamWriter,
        link: ClientLink,
    ) -> bool:
        cached = host_id = self.table.cached_session_host(sid)
        if host_id is None:
            try:
                host_id = await asyncio.to_thread(self.table.lookup_session, sid)
            except FleetError as e:
                # Lost just now: a session this router has routed before routes on from
                # its entry, however old (the table uses them while the index is down).
                cached = host_id = self.table.cached_session_host(sid)
                if host_id is None:
                    await self._drain_body(queue)
                    out.write(http1.problem(503, "Service Unavailable", str(e),
                                            code="INDEX_UNAVAILABLE", retryable=True))  # fmt: skip
                    return True
        if host_id is None:
            await self._drain_body(queue)
            out.write(await router_forward.not_open(self, sid))
            return True
        host = self.table.host(host_id)
        if host is None:
            await self._drain_body(queue)
            out.write(http1.problem(404, "Not Found", f"no open session {sid} in the fleet",
                                    code="NO_SESSION", retryable=False))  # fmt: skip
            return True
        why = self.unavailable_reason(host)
        if why is not None:
            await self._drain_body(queue)
            out.write(
                await router_forward.offline(self, sid, head, host, why, recheck=cached is not None)
            )
            return True
        # A host's 404 for a session found in the cache is held back: the entry may be
        # stale (the session closed or re-homed since), and the index, read once more,
        # says so with 410 and ``rehomedTo``. Only a 404 costs the re-read.
        keep, status = await router_forward.forward(
            self, host, head, _RequestBody(queue), out, link, sid=sid, recheck=cached is not None
        )
        if head.method == b"DELETE" or head.path.endswith("/terminate") or status == 404:
            # Ended (or about to be, or its host no longer has it): the next request
            # looks the session up again, and finds it closed in the index once its host
            # has said so.
            self.table.forget_session(sid)
        return keep

    def unavailable(self, host: HostRow, why: str) -> bytes:
        return http1.problem(
            503,
            "Service Unavailable",
            f"the session's host is unavailable: {why}",
            code="HOST_UNAVAILABLE",
            retryable=True,
            hostId=host.host_id,
        )

    def health(self) -> dict[str, Any]:
        hosts = self.table.hosts()
        up = sum(1 for h in hosts if self.unavailable_reason(h) is None)
        return {"ok": True, "role": "router", "indexUp": self.table.index_up,
                "hosts": len(hosts), "hostsAvailable": up}  # fmt: skip


async def serve_router(
    router: Router, sock: Any, stop: asyncio.Event, *, tls: ssl.SSLContext | None = None
) -> None:
    """Serve on an already bound listening socket (HTTPS with ``tls``) until ``stop`` is
    set; then end every open connection (relayed streams included) and close the pooled
    host connections."""
    try:
        await serve_listener(router.handle, sock, stop, tls=tls)
    finally:
        await router.pool.aclose()
