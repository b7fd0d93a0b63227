"""The fleet index's rows as Tether reads them (no I/O): hosts, sessions, shipped chunks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class HostRow:
    host_id: str
    url: str
    epoch: int
    state: str  # up | draining | down
    labels: Mapping[str, str]
    sessions: int
    max_sessions: int | None
    memory_total: int | None
    memory_available: int | None
    heartbeat_age_s: float  # by the index's clock
    down_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "hostId": self.host_id,
            "url": self.url,
            "epoch": self.epoch,
            "state": self.state,
            "labels": dict(self.labels),
            "sessions": self.sessions,
            "maxSessions": self.max_sessions,
            "memoryTotal": self.memory_total,
            "memoryAvailable": self.memory_available,
            "heartbeatAgeS": round(self.heartbeat_age_s, 3),
            "downReason": self.down_reason,
        }


@dataclass(frozen=True, slots=True)
class Capacity:
    """What a host reports with each heartbeat."""

    sessions: int = 0
    max_sessions: int | None = None
    memory_total: int | None = None
    memory_available: int | None = None


@dataclass(frozen=True, slots=True)
class SessionRow:
    session_id: str
    scope: str
    agent: str
    cwd: str
    name: str
    state: str  # open | closed | lost
    host_id: str
    host_epoch: int
    local_key: str | None
    durable_seq: int
    owner_session_id: str | None = None
    spawned_by: str | None = None
    parent_session_id: str | None = None
    sandboxed: bool = False
    end_reason: str | None = None
    restarted_from: str | None = None
    rehomed_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "sessionId": self.session_id,
            "scope": self.scope,
            "agent": self.agent,
            "cwd": self.cwd,
            "name": self.name,
            "state": self.state,
            "hostId": self.host_id,
            "hostEpoch": self.host_epoch,
            "localKey": self.local_key,
            "durableSeq": self.durable_seq,
            "ownerSessionId": self.owner_session_id,
            "spawnedBy": self.spawned_by,
            "parentSessionId": self.parent_session_id,
            "sandboxed": self.sandboxed,
            "endReason": self.end_reason,
            "restartedFrom": self.restarted_from,
            "rehomedTo": self.rehomed_to,
        }


@dataclass(frozen=True, slots=True)
class Ownership:
    """Seed 000's ownership fields of a new session (all optional: the operator's)."""

    owner_session_id: str | None = None
    spawned_by: str | None = None
    parent_session_id: str | None = None
    sandboxed: bool = False


@dataclass(frozen=True, slots=True)
class ShippedChunk:
    first_seq: int
    last_seq: int
    entries: int
    data: bytes


@dataclass(frozen=True, slots=True)
class ShipResult:
    durable_seq: int
    stored: bool  # False: this chunk was already shipped (a retry)


def host_row(r: Mapping[str, Any]) -> HostRow:
    return HostRow(
        host_id=r["host_id"],
        url=r["url"],
        epoch=int(r["epoch"]),
        state=r["state"],
        labels=dict(r["labels"] or {}),
        sessions=int(r["sessions"]),
        max_sessions=r["max_sessions"],
        memory_total=r["memory_total"],
        memory_available=r["memory_available"],
        heartbeat_age_s=float(r["age"]),
        down_reason=r["down_reason"],
    )


def session_row(r: Mapping[str, Any]) -> SessionRow:
    return SessionRow(
        session_id=r["session_id"],
        scope=r["scope"],
        agent=r["agent"],
        cwd=r["cwd"],
        name=r["name"],
        state=r["state"],
        host_id=r["host_id"],
        host_epoch=int(r["host_epoch"]),
        local_key=r["local_key"],
        durable_seq=int(r["durable_seq"]),
        owner_session_id=r["owner_session_id"],
        spawned_by=r["spawned_by"],
        parent_session_id=r["parent_session_id"],
        sandboxed=bool(r["sandboxed"]),
        end_reason=r["end_reason"],
        restarted_from=r.get("restarted_from"),
        rehomed_to=r.get("rehomed_to"),
    )
