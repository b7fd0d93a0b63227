"""ACP over HTTP through the router: ``/v1/acp/{serverId}`` (issue 12's routes).

A host serves ACP over HTTP itself (:mod:`tether.serve.acp_api`): ``POST`` a JSON-RPC
message, ``GET`` the server's event stream, ``DELETE`` it. Through a router, every one of
those requests reaches the host that serves the server id, byte for byte, by the same
relay as session routes (:func:`tether.fleet.router_forward.forward`): an unavailable
host answers ``503 HOST_UNAVAILABLE``, a silent one ``504 HOST_TIMEOUT``, and an event
stream whose host goes away ends with ``event: host_lost``.

**Which host serves a server id.** The client names the id (sandbox-agent's client
picks its path; two clients may pick the same), so the router cannot make it
host-qualified and parse the host back out of it. The mapping is a row of the index
(``acp_servers``, schema v3): the first request for an id through any router places the
server -- the same placement as a new session: least loaded, up and beating -- and
inserts the row; the primary key decides between routers racing for one id, and the
losers read the winner's row. A row never changes afterwards, so a router caches it for
good and routes every later request from memory (while PostgreSQL is down too). Any
method places: sandbox-agent's client opens its stream together with its first POST, and
whichever reaches a router first must send both to the same host. A server whose host
is gone for good stays unavailable; a client opens a new server id (ACP servers are
connections, not sessions: their agent sessions are the host's own).

A ``POST`` that is a request is answered when it is done -- a ``session/prompt`` when
its turn ends -- so it is relayed with no flat first-byte timeout: its host is watched
instead (:mod:`tether.fleet.relay`), and ``504`` comes once it is known unavailable.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tether.errors import FleetError, HostSuperseded, HostUnavailable
from tether.fleet import http1, router_forward
from tether.fleet.placement import PlacementRequest

if TYPE_CHECKING:
    from tether.fleet.relay import ClientLink
    from tether.fleet.requests import RequestBody as _RequestBody
    from tether.fleet.router import Router

PREFIX = "/v1/acp/"


def server_id_of(path: str) -> str | None:
    """The server id of a ``/v1/acp/{serverId}`` path (None for anything else)."""
    rest = path[len(PREFIX) :] if path.startswith(PREFIX) else ""
    return rest if rest and "/" not in rest else None


def _find_or_place(router: Router, server_id: str) -> str:
    """The host id of ``server_id``: from the index, else placed now (blocking)."""
    from tether.fleet.router_sessions import DEFAULT_SCOPE, place_and_insert

    found = router.table.acp_server_host(DEFAULT_SCOPE, server_id)
    if found is not None:
        return found
    return place_and_insert(
        router,
        PlacementRequest(),
        lambda chosen: router.table.place_acp_server(
            DEFAULT_SCOPE, server_id, chosen.host_id, chosen.epoch
        ),
    )


async def route(
    router: Router, head: http1.RequestHead, body: _RequestBody, out: Any, link: ClientLink
) -> bool:
    """Relay one ACP-over-HTTP request to its server's host; True: the client's
    connection serves on."""
    server_id = server_id_of(head.path)
    if server_id is None:
        await body.drain()
        out.write(http1.problem(404, "Not Found", f"the router does not serve {head.path}",
                                code="NOT_FOUND", retryable=False))  # fmt: skip
        return True
    host_id = router.table.cached_acp_host(server_id)
    if host_id is None:
        try:
            host_id = await asyncio.to_thread(_find_or_place, router, server_id)
        except (HostUnavailable, HostSuperseded) as e:
            await body.drain()
            out.write(http1.problem(503, "Service Unavailable", str(e), code="HOST_UNAVAILABLE",
                                    retryable=True, hosts=e.fields.get("hosts", {})))  # fmt: skip
            return True
        except FleetError as e:
            await body.drain()
            out.write(http1.problem(503, "Service Unavailable", str(e),
                                    code="INDEX_UNAVAILABLE", retryable=True))  # fmt: skip
            return True
    host = router.table.host(host_id)
    if host is None:
        await asyncio.to_thread(router.table.refresh)  # placed on a host not listed yet
        host = router.table.host(host_id)
    if host is None:
        await body.drain()
        out.write(http1.problem(503, "Service Unavailable", f"host {host_id} is unknown",
                                code="HOST_UNAVAILABLE", retryable=True))  # fmt: skip
        return True
    why = router.unavailable_reason(host)
    if why is not None:
        await body.drain()
        out.write(router.unavailable(host, why))
        return True
    keep, _status = await router_forward.forward(
        router, host, head, body, out, link, flat_timeout=head.method != b"POST"
    )
    return keep
