"""The router's relay of one request to a host, and its answers for a session it cannot
relay to: one that is not open (404, or 410 naming its successor), one whose host is
unavailable (a read served from the shipped journal, else 503), and a host's 404 for a
cached session, checked against the index once more.

Functions over a :class:`~tether.fleet.router.Router` (its host table, its pool of host
connections, its settings).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether.errors import FleetError
from tether.fleet import http1
from tether.fleet.relay import ClientLink, Endpoint, HostRefused, HostSilent, exchange
from tether.fleet.requests import RequestBody as _RequestBody
from tether.fleet.requests import once as _once
from tether.fleet.rows import HostRow, SessionRow

if TYPE_CHECKING:
    from tether.fleet.router import Router


async def forward(
    router: Router,
    host: HostRow,
    head: http1.RequestHead,
    body: Any,
    out: asyncio.StreamWriter,
    link: ClientLink,
    *,
    sid: str | None = None,
    extra: Sequence[http1.Header] = (),
    recheck: bool = False,
    flat_timeout: bool = True,
) -> tuple[bool, int]:
    """Relay one request to ``host``; answer the client for a host that fails.

    ``body`` is a :class:`_RequestBody` (drained whatever happens) or an iterable of
    bytes the router made itself. Returns whether the client's connection serves on,
    and the status the client was answered (the host's, or the router's own).
    ``recheck``: a 404 of the host is checked against the index before it is
    relayed (:func:`recheck_held`). ``flat_timeout`` False: the first byte is waited
    for as long as the host is available (an answer that comes when a turn ends).
    """
    at = Endpoint.of(host.url)
    address, port = at.host, at.port
    headers = [(b"authorization", router.fleet_auth)] if router.fleet_auth else []
    headers += [(b"x-tether-router", b"1"), *extra]
    request = http1.encode_request_head(head, at.netloc, headers)

    async def on_lost(_last: int | None) -> dict[str, Any]:
        durable = None if sid is None else await asyncio.to_thread(router.table.durable_seq, sid)
        return {"durableSeq": durable, "hostId": host.host_id}

    parts = body.relayed(head) if isinstance(body, _RequestBody) else _once(body)
    try:
        outcome = await exchange(
            router.pool, address, port, request, parts, out,
            first_byte_timeout=router.settings.first_byte_timeout_s if flat_timeout else None,
            on_lost=on_lost, link=link, still_up=lambda: still_up(router, host.host_id),
            hold_status=404 if recheck else None, tls=at.tls,
        )  # fmt: skip
    except HostRefused as e:
        router.pool.forget(address, port)
        router.table.mark_refused(host, str(e))
        if isinstance(body, _RequestBody):
            await body.drain()
        answer = (
            router.unavailable(host, str(e))
            if sid is None
            else (await offline(router, sid, head, host, str(e), recheck))
        )
        out.write(answer)
        return True, int(answer[9:12])  # nothing is wrong with the client's connection
    except HostSilent as e:
        retry = head.method in (b"GET", b"HEAD")
        out.write(http1.problem(
            504, "Gateway Timeout",
            f"{e}; whether it acted on the request is unknown",
            code="HOST_TIMEOUT", retryable=retry, hostId=host.host_id, keep_alive=False,
        ))  # fmt: skip
        return False, 504
    router.table.mark_answered(host.host_id)
    router.routed_total += 1
    if outcome.held is not None and sid is not None:
        answer = await recheck_held(router, sid, outcome.held)
        out.write(answer)
        return outcome.client_whole, int(answer[9:12])
    # A client that got a whole answer keeps its connection, whatever becomes of the
    # host connection (a host saying `connection: close` said it to the client).
    return outcome.client_whole, outcome.status


async def recheck_held(router: Router, sid: str, held: bytes) -> bytes:
    """A host said 404 for a session the router had cached: the index, read once
    more, decides -- an ended session answers as :func:`not_open` does (410 and
    ``rehomedTo``); one still open there gets the host's own answer."""
    router.table.forget_session(sid)
    try:
        row = await asyncio.to_thread(router.table.session_row, sid)
    except FleetError:
        return held  # the index cannot say more than the host did
    if row is not None and row.state == "open":
        return held
    return not_open_answer(sid, row)


async def not_open(router: Router, sid: str) -> bytes:
    """404 for a session the fleet never had; 410 for one that ended, naming the
    session that continues it when it was re-homed."""
    try:
        row = await asyncio.to_thread(router.table.session_row, sid)
    except FleetError:
        row = None
    return not_open_answer(sid, row)


def not_open_answer(sid: str, row: SessionRow | None) -> bytes:
    if row is None:
        return http1.problem(404, "Not Found", f"no session {sid} in the fleet",
                             code="NO_SESSION", retryable=False)  # fmt: skip
    detail = f"session {sid} is {row.state}" + (
        f": re-homed as {row.rehomed_to}" if row.rehomed_to else ""
    )
    return http1.problem(410, "Gone", detail, code="SESSION_" + row.state.upper(),
                         retryable=False, rehomedTo=row.rehomed_to)  # fmt: skip


async def offline(
    router: Router,
    sid: str,
    head: http1.RequestHead,
    host: HostRow,
    why: str,
    recheck: bool = False,
) -> bytes:
    """The answer for a session whose host is unavailable: a read is served from the
    journal the host shipped; anything else is ``503 HOST_UNAVAILABLE`` -- unless the
    host came from the cache (``recheck``) and the index, read once more, says the
    session ended since (re-homed off that host, most likely): then ``410``."""
    from tether.fleet import router_reads

    kind = router_reads.read_kind(head.path)
    if head.method == b"GET" and kind is not None:
        return await router_reads.serve_read(router, sid, kind, head, host, why)
    if recheck:
        try:
            row = await asyncio.to_thread(router.table.session_row, sid)
        except FleetError:
            row = None  # the index cannot say more: the host's state is the answer
        if row is not None and row.state != "open":
            router.table.forget_session(sid)
            return not_open_answer(sid, row)
    return router.unavailable(host, why)


def still_up(router: Router, host_id: str) -> bool:
    """The host as the table knows it now (not as it was when the answer began)."""
    host = router.table.host(host_id)
    return host is not None and router.unavailable_reason(host) is None
