"""The routes the router answers from the index: listing sessions, creating them.

**Creating** (``POST /v1/sessions``, the body a host takes, plus the router's own
``labels`` and ``parentSessionId``): the router places the session (least loaded host,
labels as constraints, next to its parent), inserts its row in the index -- the partial
unique index decides, fleet-wide, whether it is new -- and asks the owning host to
create (or ensure) it under its fleet id (``x-tether-session-id``). The host's answer is
relayed as it is. A row whose creation the host refused is ended at once, so the
identity is free again; nothing is left half-made.

Racing creators of one (scope, agent, cwd, name), through any routers, all reach the
one host that owns the row, which serializes creation of that key itself: one session,
one owner.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from tether import _fastjson
from tether.errors import FleetError, HostSuperseded, HostUnavailable
from tether.fleet import http1, router_access, router_forward
from tether.fleet.delegation import row_of, spawn_ownership
from tether.fleet.placement import PlacementRequest, place
from tether.fleet.rows import HostRow, Ownership, SessionRow
from tether.policy.visibility import Requester, can_see, can_spawn

if TYPE_CHECKING:
    from tether.fleet.relay import ClientLink
    from tether.fleet.requests import RequestBody as _RequestBody
    from tether.fleet.router import Router

_T = TypeVar("_T")
BODY_MAX = 64 * 1024
ROUTER_FIELDS = ("labels", "parentSessionId")
DEFAULT_SCOPE = "default"  # one scope per router token, until tokens carry identities


def record(row: SessionRow, host: HostRow | None, available: bool) -> dict[str, Any]:
    """A session as the router lists it: the host's record's core fields and where it is."""
    return {
        "id": row.session_id,
        "key": row.session_id,
        "name": row.name,
        "agent": row.agent,
        "cwd": row.cwd,
        "state": row.state,
        "host": row.host_id,
        "hostId": row.host_id,
        "hostUrl": None if host is None else host.url,
        "hostAvailable": available,
        "durableSeq": row.durable_seq,
        "parentSessionId": row.parent_session_id,
    }


async def list_sessions(
    router: Router, head: http1.RequestHead, who: Requester | None = None
) -> bytes:
    """The fleet's sessions (``?state=``, default open) that ``who`` may list."""
    query = head.target.split(b"?", 1)[1].decode("latin-1") if b"?" in head.target else ""
    state: str | None = "open"
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        if key == "state" and value in ("open", "closed", "lost", "all"):
            state = None if value == "all" else value
    try:
        rows = await asyncio.to_thread(router.table.list_sessions, state)
    except FleetError as e:
        return http1.problem(503, "Service Unavailable", str(e), code="INDEX_UNAVAILABLE",
                             retryable=True)  # fmt: skip
    if who is not None:
        level, a2a = router.settings.visibility, router.settings.a2a
        rows = [r for r in rows if can_see(row_of(r), who, level, a2a).allowed]
    items = []
    for row in rows:
        host = router.table.host(row.host_id)
        available = host is not None and router.unavailable_reason(host) is None
        items.append(record(row, host, available))
    return http1.json_response(200, {"sessions": items})


def _bad(detail: str, field: str) -> bytes:
    return http1.problem(422, "Unprocessable Content", detail, code="BAD_VALUE",
                         retryable=False, field=field)  # fmt: skip


async def _read(body: _RequestBody) -> bytes | None:
    parts: list[bytes] = []
    size = 0
    async for part in body:
        size += len(part)
        if size > BODY_MAX:
            await body.drain()
            return None
        parts.append(part)
    return b"".join(parts)


async def read_json(body: _RequestBody) -> tuple[dict[str, Any] | None, bytes | None]:
    """A request's JSON object (bounded), or the problem document to answer instead."""
    raw = await _read(body)
    if raw is None:
        return None, http1.problem(413, "Content Too Large", f"a body over {BODY_MAX} bytes",
                                   code="BODY_TOO_LARGE", retryable=False)  # fmt: skip
    try:
        doc = _fastjson.loads_unicode(raw or b"{}")
    except ValueError:
        return None, _bad("the body is not JSON", "body")
    if not isinstance(doc, dict):
        return None, _bad("the body must be a JSON object", "body")
    return doc, None


async def create_session(
    router: Router,
    head: http1.RequestHead,
    body: _RequestBody,
    out: Any,
    link: ClientLink,
    who: Requester | None = None,
) -> bool:
    doc = await _read_spec(body)
    if isinstance(doc, bytes):
        out.write(doc)
        return True
    ownership = Ownership(parent_session_id=doc.get("parentSessionId"),
                          spawned_by=doc.get("parentSessionId"))  # fmt: skip
    if who is not None:
        # A requester's session is its own child, placed next to it unless the labels
        # say otherwise; another agent's needs the agent-to-agent policy.
        decision = can_spawn(who, doc["agent"], router.settings.a2a)
        if not decision.allowed:
            out.write(router_access.denied(decision, requester=who.session_key))
            return True
        ownership = spawn_ownership(who)
    placed = await _placed(router, doc, ownership)
    if isinstance(placed, bytes):
        out.write(placed)
        return True
    row, created, host = placed
    if who is not None and not created:
        # An existing session of that identity is ensured only if it is within reach.
        refused = await router_access.target_refused(router, who, row.session_id, head)
        if refused is not None:
            out.write(refused)
            return True
    why = router.unavailable_reason(host)
    if why is not None and not created:
        out.write(router.unavailable(host, why))
        return True
    forward = {k: v for k, v in doc.items() if k not in ROUTER_FIELDS}
    payload = json.dumps(forward, separators=(",", ":")).encode()
    fwd_head = http1.RequestHead(
        head.method,
        head.target,
        [(k, v) for k, v in head.headers if k not in (b"content-length", b"transfer-encoding")],
        head.keep_alive,
    )
    extra = [
        (b"content-length", str(len(payload)).encode()),
        (b"x-tether-session-id", row.session_id.encode()),
    ]
    keep, status = await router_forward.forward(
        router, host, fwd_head, [payload], out, link, extra=extra
    )
    if created and not 200 <= status < 300:
        await asyncio.to_thread(
            router.table.end_session, row.session_id, f"its host refused to create it ({status})"
        )
    router.table.remember(row.session_id, row.host_id)
    return keep


async def _read_spec(body: _RequestBody) -> dict[str, Any] | bytes:
    """A new session's JSON body, checked (agent, cwd, name, labels, parentSessionId),
    or the problem to answer."""
    doc, error = await read_json(body)
    if error is not None:
        return error
    assert doc is not None
    for field in ("agent", "cwd"):
        if not isinstance(doc.get(field), str) or not doc[field]:
            return _bad(f"{field} is required (a string)", field)
    labels = doc.get("labels", {})
    parent = doc.get("parentSessionId")
    if not isinstance(doc.get("name", ""), str):
        return _bad("name must be a string", "name")
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        return _bad("labels must be an object of strings", "labels")
    if parent is not None and not isinstance(parent, str):
        return _bad("parentSessionId must be a string", "parentSessionId")
    return doc


async def _placed(
    router: Router, doc: dict[str, Any], ownership: Ownership
) -> tuple[SessionRow, bool, HostRow] | bytes:
    """The session of ``doc``'s identity, ensured in the index (placed if new), whether
    this call created it, and its host; or the problem to answer."""
    try:
        row, created = await asyncio.to_thread(
            _place_and_insert, router, doc["agent"], doc["cwd"], doc.get("name", ""),
            doc.get("labels", {}), ownership,
        )  # fmt: skip
    except (HostUnavailable, HostSuperseded) as e:
        return http1.problem(503, "Service Unavailable", str(e), code="HOST_UNAVAILABLE",
                             retryable=True, hosts=e.fields.get("hosts", {}))  # fmt: skip
    except FleetError as e:
        return http1.problem(503, "Service Unavailable", str(e), code="INDEX_UNAVAILABLE",
                             retryable=True)  # fmt: skip
    host = router.table.host(row.host_id)
    if host is None:
        await asyncio.to_thread(router.table.refresh)
        host = router.table.host(row.host_id)
    if host is None:
        return http1.problem(503, "Service Unavailable", f"host {row.host_id} is unknown",
                             code="HOST_UNAVAILABLE", retryable=True)  # fmt: skip
    return row, created, host


def place_and_insert(
    router: Router, request: PlacementRequest, insert: Callable[[HostRow], _T]
) -> _T:
    """Place (least loaded, labels, parent) and ``insert`` the row on the chosen host;
    once more, from a fresh host table, if the cached one had no host for it (a host
    that registered since the last refresh is used at once) or the chosen host drained
    or was fenced meanwhile. Blocking: run it in a thread."""
    for attempt in range(2):
        hosts = [
            dataclasses.replace(h, heartbeat_age_s=router.table.age(h))
            for h in router.table.hosts()
        ]
        try:
            return insert(place(hosts, request, ttl_s=router.settings.ttl_s))
        except (HostUnavailable, HostSuperseded):
            if attempt:
                raise
            router.table.refresh()
    raise AssertionError("unreachable")


def _place_and_insert(
    router: Router,
    agent: str,
    cwd: str,
    name: str,
    labels: dict[str, str],
    ownership: Ownership,
) -> tuple[SessionRow, bool]:
    parent_host = None
    parent = ownership.parent_session_id
    if parent is not None:
        parent_row = router.table.session_row(parent)
        parent_host = None if parent_row is None else parent_row.host_id
    request = PlacementRequest(labels=labels, parent_host=parent_host)
    return place_and_insert(
        router,
        request,
        lambda chosen: router.table.ensure_session(
            scope=DEFAULT_SCOPE,
            agent=agent,
            cwd=cwd,
            name=name,
            host_id=chosen.host_id,
            host_epoch=chosen.epoch,
            ownership=ownership,
        ),
    )


async def close_children(router: Router, sid: str, depth: int = 0) -> None:
    """Close the sessions ``sid`` spawned, wherever they live, children first -- each on
    its own host, by that host's own proof (a host never ends another host's trees).
    A child whose host is unavailable is left to its host (it is reported by listing)."""
    from tether.fleet.host_calls import call_host
    from tether.fleet.relay import HostRefused, HostSilent

    if depth > 16:  # a spawn chain that deep is a loop in the records, not a tree
        return
    try:
        children = await asyncio.to_thread(router.table.children, sid)
    except FleetError:
        return
    for child in children:
        await close_children(router, child.session_id, depth + 1)
        host = router.table.host(child.host_id)
        if host is None or router.unavailable_reason(host) is not None:
            continue
        try:
            await call_host(router, host, b"DELETE", f"/v1/sessions/{child.session_id}", None, [])
        except (HostRefused, HostSilent):
            continue
