"""Re-homing a session whose host is gone: ``POST /v1/sessions/{id}/rehome``.

Explicit, never automatic, never silent. A host that is only late (its heartbeat older
than the TTL) may still be writing its storage, so the router first fences it -- one
compare-and-set on its epoch -- after which nothing it writes to the index counts; a
host that is up is refused unless ``force`` says the operator means it. Then, in one
index transaction, the old session ends ``lost`` naming its successor and a new session
of the same identity is created on another host (placed like any new session, or the
``hostId`` asked for). The new host's first owner journals ``conversation_restarted``
(from which session and host, up to which durable seq). With ``replay``, the old
session's transcript, as shipped, is sent to the new agent as its first prompt: the
agent is told it is context from a conversation that was restarted.

If the new host refuses to create the session, the move is undone: the old session is
open again and the new row closed, so a second try starts from where the first did.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import TYPE_CHECKING, Any

from tether.errors import FleetError, HostSuperseded, HostUnavailable
from tether.fleet import http1
from tether.fleet.host_calls import call_host
from tether.fleet.placement import PlacementRequest, place
from tether.fleet.relay import HostRefused, HostSilent
from tether.fleet.router_reads import _lines
from tether.state.journal import render

if TYPE_CHECKING:
    from tether.fleet.requests import RequestBody as _RequestBody
    from tether.fleet.router import Router
    from tether.fleet.rows import HostRow, SessionRow

REPLAY_MAX_CHARS = 200_000  # the transcript sent as context is cut to its last part past this


def replay_text(transcript: list[dict[str, Any]], from_host: str) -> str:
    parts = [
        f"[Tether] This conversation was restarted: its host ({from_host}) was lost, and the"
        " agent session could not be resumed. What follows is the conversation so far, as"
        " it was recorded, for context. Acknowledge briefly and wait for the next request.",
        "",
    ]
    for turn in transcript:
        parts.append(f"User: {turn.get('prompt', '')}")
        if turn.get("text"):
            parts.append(f"Assistant: {turn['text']}")
        calls = turn.get("toolCalls") or []
        parts.extend(f"(tool call: {c.get('title') or c.get('kind')})" for c in calls)
        parts.append("")
    text = "\n".join(parts)
    if len(text) > REPLAY_MAX_CHARS:
        text = parts[0] + "\n\n[... earlier turns cut ...]\n" + text[-REPLAY_MAX_CHARS:]
    return text


def _problem(status: int, detail: str, code: str, retryable: bool = False, **extra: Any) -> bytes:
    title = {404: "Not Found", 409: "Conflict", 422: "Unprocessable Content"}.get(
        status, "Service Unavailable"
    )
    return http1.problem(status, title, detail, code=code, retryable=retryable, **extra)


@dataclasses.dataclass(frozen=True, slots=True)
class _Ask:
    """What a re-home request asks for (its JSON body)."""

    replay: bool
    force: bool
    labels: dict[str, str]
    wanted: str | None


async def rehome(router: Router, sid: str, body: _RequestBody, out: Any) -> bool:
    out.write(await _rehome(router, sid, body))
    return True


async def _rehome(router: Router, sid: str, body: _RequestBody) -> bytes:
    """The answer to one re-home request: read it, find the session lost (fencing a late
    host), move it in the index, and have the new host create it."""
    ask = await _read_ask(body)
    if isinstance(ask, bytes):
        return ask
    found = await _lost_session(router, sid, ask.force)
    if isinstance(found, bytes):
        return found
    row, why = found
    try:
        target = _target(router, row.host_id, ask.labels, ask.wanted)
        new = await asyncio.to_thread(
            router.table.rehome_session, sid, target.host_id, target.epoch, ask.force
        )
    except (HostUnavailable, HostSuperseded) as e:
        return _problem(503, str(e), "HOST_UNAVAILABLE", True)
    except FleetError as e:
        return _problem(409, str(e), "REHOME_REFUSED")
    return await _create_on(router, target, row, new, ask.replay, why)


async def _read_ask(body: _RequestBody) -> _Ask | bytes:
    from tether.fleet.router_sessions import read_json

    doc, error = await read_json(body)
    if error is not None:
        return error
    assert doc is not None
    labels = doc.get("labels", {})
    wanted = doc.get("hostId")
    if not isinstance(labels, dict) or (wanted is not None and not isinstance(wanted, str)):
        return _problem(422, "labels is an object, hostId a string", "BAD_VALUE")
    return _Ask(bool(doc.get("replay", False)), bool(doc.get("force", False)), labels, wanted)


async def _lost_session(
    router: Router, sid: str, force: bool
) -> tuple[SessionRow, str | None] | bytes:
    """The open session to move and why its host is unavailable (None: forced); a host
    that is only late is fenced first."""
    try:
        row = await asyncio.to_thread(router.table.session_row, sid)
    except FleetError as e:
        return _problem(503, str(e), "INDEX_UNAVAILABLE", True)
    if row is None or row.state != "open":
        state = "unknown" if row is None else row.state
        return _problem(404 if row is None else 409, f"session {sid} is {state}", "NO_SESSION")
    old_host = router.table.host(row.host_id)
    why = None if old_host is None else router.unavailable_reason(old_host)
    if old_host is not None and why is None:
        why = await router.probe(old_host)  # dead since its last beat?
    if old_host is not None and why is None and not force:
        return _problem(409, f"its host {row.host_id} is up: the session is not lost"
                        " (give force to move it anyway)", "HOST_AVAILABLE")  # fmt: skip
    if old_host is not None and old_host.state != "down" and not force:
        # Late, not known down: fence it first, so its storage's writes stop counting.
        await asyncio.to_thread(
            router.table.fence_host, old_host.host_id, old_host.epoch, f"re-home of {sid}"
        )
    return row, why


async def _create_on(
    router: Router, target: HostRow, row: SessionRow, new: SessionRow, replay: bool,
    why: str | None,
) -> bytes:  # fmt: skip
    """Have ``target`` create the moved session (undoing the move if it cannot), then
    send the old transcript as its first prompt if ``replay`` asks."""
    sid = row.session_id
    restarted = {
        "fromSession": sid,
        "fromHost": row.host_id,
        "durableSeq": row.durable_seq,
        "replayed": replay,
        "reason": why or "forced",
    }
    extra = [
        (b"x-tether-session-id", new.session_id.encode()),
        (b"x-tether-restarted-from", json.dumps(restarted).encode()),
    ]
    spec = {"agent": row.agent, "cwd": row.cwd, "name": row.name}
    try:
        status, created = await call_host(router, target, b"POST", "/v1/sessions", spec, extra)
    except (HostRefused, HostSilent) as e:
        status, created = 503, {"detail": str(e)}
    if not 200 <= status < 300:
        await asyncio.to_thread(router.table.undo_rehome, sid, new.session_id)
        detail = (created or {}).get("detail") if isinstance(created, dict) else None
        return _problem(502, f"host {target.host_id} could not take the session ({status}):"
                        f" {detail or 'no detail'}; nothing was moved", "REHOME_FAILED",
                        True)  # fmt: skip
    router.table.remember(new.session_id, target.host_id)
    answer: dict[str, Any] = {
        **(created if isinstance(created, dict) else {}),
        "id": new.session_id,
        "hostId": target.host_id,
        "rehomedFrom": sid,
        "fromHost": row.host_id,
        "durableSeq": row.durable_seq,
        "replayRequestId": None,
    }
    if replay:
        lines, _durable = await asyncio.to_thread(_lines, router, sid)
        text = replay_text(render.transcript(lines), row.host_id)
        status, queued = await call_host(
            router, target, b"POST", f"/v1/sessions/{new.session_id}/prompt", {"prompt": text}, []
        )
        if status == 202 and isinstance(queued, dict):
            answer["replayRequestId"] = queued.get("requestId")
    return http1.json_response(201, answer)


def _target(router: Router, old_host: str, labels: dict[str, str], wanted: str | None) -> HostRow:
    hosts = [
        dataclasses.replace(h, heartbeat_age_s=router.table.age(h))
        for h in router.table.hosts()
        if h.host_id != old_host and (wanted is None or h.host_id == wanted)
    ]
    return place(hosts, PlacementRequest(labels=labels), ttl_s=router.settings.ttl_s)
