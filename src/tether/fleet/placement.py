"""Where a new session goes: a pure choice over the index's host rows (no I/O).

The rules, in order:

1. Only hosts that can take a session: ``up`` (not draining, not down), a heartbeat
   younger than the TTL (by the index's clock), every requested label equal, and below
   their session limit.
2. A session spawned by a session goes next to its parent when the parent's host can
   take it (``near_parent``, the default): delegation stays on one machine, where the
   parent's tools and files are.
3. Otherwise the least loaded host: the higher of its memory load (``1 - available /
   total``) and session load (``sessions / max_sessions``), then fewer sessions, then the
   host id (so equal hosts are chosen the same way every time).

When no host can take the session, :class:`HostUnavailable` says why for each host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tether.errors import HostUnavailable
from tether.fleet.index import HostRow

# With no max_sessions reported, a host's session load is counted against this many.
NOMINAL_MAX_SESSIONS = 200


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    labels: Mapping[str, str] = field(default_factory=dict)
    parent_host: str | None = None
    near_parent: bool = True


def why_not(host: HostRow, request: PlacementRequest, ttl_s: float) -> str | None:
    """Why ``host`` cannot take a new session, or None if it can."""
    if host.state != "up":
        return host.state
    if host.heartbeat_age_s > ttl_s:
        return f"no heartbeat for {host.heartbeat_age_s:.1f} s"
    for key, want in request.labels.items():
        have = host.labels.get(key)
        if have != want:
            return f"label {key}={have!r}, not {want!r}"
    if host.max_sessions is not None and host.sessions >= host.max_sessions:
        return f"full ({host.sessions}/{host.max_sessions} sessions)"
    return None


def load(host: HostRow) -> float:
    limit = host.max_sessions or NOMINAL_MAX_SESSIONS
    session_load = host.sessions / limit
    memory_load = 0.0
    if host.memory_total and host.memory_available is not None:
        memory_load = 1.0 - host.memory_available / host.memory_total
    return max(session_load, memory_load)


def place(hosts: Sequence[HostRow], request: PlacementRequest, *, ttl_s: float) -> HostRow:
    refusals: dict[str, str] = {}
    eligible: list[HostRow] = []
    for host in hosts:
        reason = why_not(host, request, ttl_s)
        if reason is None:
            eligible.append(host)
        else:
            refusals[host.host_id] = reason
    if not eligible:
        detail = "; ".join(f"{h}: {r}" for h, r in sorted(refusals.items())) or "no hosts"
        raise HostUnavailable(f"no host can take a new session ({detail})", hosts=refusals)
    if request.near_parent and request.parent_host is not None:
        for host in eligible:
            if host.host_id == request.parent_host:
                return host
    return min(eligible, key=lambda h: (load(h), h.sessions, h.host_id))
