"""A session's history while its host is down: served by the router from the journal its
host shipped to the index (everything up to ``durableSeq``).

Only reads: ``export`` (NDJSON), ``events`` (a replay as SSE, ended by ``host_lost``),
``history`` and ``transcript`` (rendered by the same pure code a host uses). Every
answer says where it came from (``x-tether-source: index``) and how far it goes
(``x-tether-durable-seq``), so nobody takes it for the live session: anything the host
had not shipped when it went away is not there, and the answer says so.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from tether.errors import FleetError
from tether.fleet import http1
from tether.state.journal import render
from tether.state.journal.entry import TURN_KINDS, parse_line

if TYPE_CHECKING:
    from tether.fleet.router import Router
    from tether.fleet.rows import HostRow

READS = ("export", "events", "history", "transcript")


def read_kind(path: str) -> str | None:
    """``export`` for ``/v1/sessions/{id}/export`` and so on; None for other routes."""
    parts = path.split("/")
    if len(parts) == 5 and parts[4] in READS:
        return parts[4]
    return None


def _lines(router: Router, sid: str) -> tuple[list[tuple[int, str]], int]:
    chunks = router.table.shipped(sid)
    lines: list[tuple[int, str]] = []
    for chunk in chunks:
        for raw in chunk.data.splitlines():
            text = raw.decode()
            lines.append((int(parse_line(text)["seq"]), text))
    durable = lines[-1][0] if lines else 0
    return lines, durable


def _turn_rows(lines: list[tuple[int, str]]) -> list[Any]:
    rows = []
    for seq, text in lines:
        entry = parse_line(text)
        kind = entry.get("kind")
        if kind in TURN_KINDS:
            rid = entry.pop("requestId", None)
            at = float(entry.pop("at", 0.0))
            for field in ("seq", "kind"):
                entry.pop(field, None)
            rows.append((seq, at, kind, rid, json.dumps(entry)))
    return rows


def _query_int(head: http1.RequestHead, name: str) -> int | None:
    query = head.target.split(b"?", 1)[1].decode("latin-1") if b"?" in head.target else ""
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        if key == name and value.isdigit():
            return int(value)
    return None


async def serve_read(
    router: Router, sid: str, kind: str, head: http1.RequestHead, host: HostRow, why: str
) -> bytes:
    """The whole answer to one read of a session whose host is unavailable."""
    try:
        lines, durable = await asyncio.to_thread(_lines, router, sid)
    except FleetError as e:
        return http1.problem(503, "Service Unavailable", f"{why}; and the index: {e}",
                             code="INDEX_UNAVAILABLE", retryable=True)  # fmt: skip
    headers = [
        (b"x-tether-source", b"index"),
        (b"x-tether-durable-seq", str(durable).encode()),
        (b"x-tether-host-unavailable", why.encode("utf-8", "replace")[:200]),
    ]
    if kind == "export":
        body = "".join(text + "\n" for _seq, text in lines).encode()
        return http1.response(200, body, b"application/x-ndjson", headers)
    if kind == "events":
        after = _query_int(head, "from")
        last_id = head.header(b"last-event-id")
        start = (
            int(last_id) + 1
            if last_id is not None and last_id.isdigit()
            else (after if after is not None else 1)
        )
        events = [
            b"id: %d\ndata: %s\n\n" % (seq, text.encode()) for seq, text in lines if seq >= start
        ]
        lost = {"lastSeq": durable, "durableSeq": durable, "hostId": host.host_id, "reason": why}
        events.append(http1.sse_event("host_lost", lost))
        return http1.response(200, b"".join(events), b"text/event-stream", headers)
    if kind == "history":
        turns = [t.to_json() for t in render.turns(_turn_rows(lines))]
        limit = _query_int(head, "limit")
        if limit is not None:
            turns = turns[-limit:] if limit > 0 else []
        payload = {"sessionKey": sid, "turns": turns, "durableSeq": durable, "source": "index"}
        return http1.response(200, json.dumps(payload).encode(), b"application/json", headers)
    tail = _query_int(head, "tail")
    transcript = render.transcript(lines)
    if tail is not None:
        transcript = transcript[-tail:] if tail > 0 else []
    payload = {"sessionKey": sid, "turns": transcript, "durableSeq": durable, "source": "index"}
    return http1.response(200, json.dumps(payload).encode(), b"application/json", headers)
