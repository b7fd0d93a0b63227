"""A session's row in the registry (table ``sessions``), as a value and back.

A part of :mod:`tether.state.registry`, which re-exports :class:`Session`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Session", "ownership_fields", "session_from_row"]


@dataclass(frozen=True)
class Session:
    """One session row."""

    key: str
    name: str
    agent_command: list[str]
    agent_label: str
    cwd: str
    acp_session_id: str | None
    state: str
    created_at: float
    updated_at: float
    closed_at: float | None
    last_prompt_at: float | None
    owner_pid: int | None
    owner_starttime: int | None
    owner_generation: int
    owner_socket: str | None
    owner_started_at: float | None
    owner_heartbeat_at: float | None
    owner_status: str | None
    queue_depth: int
    current_request: str | None
    desired_mode: str | None
    desired_config: dict[str, Any]
    options: dict[str, Any]
    last_end: dict[str, Any] | None
    # Ownership (issue 10): None = operator-owned.
    agent_id: str = ""
    owner_session_key: str | None = None
    spawned_by: str | None = None
    parent_session_key: str | None = None
    sandboxed: bool = False


def session_from_row(row: sqlite3.Row) -> Session:
    data = dict(row)
    data["agent_command"] = json.loads(data["agent_command"])
    data["desired_config"] = json.loads(data["desired_config"] or "{}")
    data["options"] = json.loads(data["options"] or "{}")
    data["last_end"] = json.loads(data["last_end"]) if data["last_end"] else None
    data["agent_id"] = data.get("agent_id") or data["agent_label"]
    data["sandboxed"] = bool(data.get("sandboxed"))
    return Session(**data)


_OWNERSHIP_KEYS = ("owner_session_key", "spawned_by", "parent_session_key")


def ownership_fields(agent_label: str, owner: Mapping[str, Any] | None) -> dict[str, Any]:
    owner = owner or {}
    fields: dict[str, Any] = {k: owner.get(k) or None for k in _OWNERSHIP_KEYS}
    fields["agent_id"] = owner.get("agent_id") or agent_label
    fields["sandboxed"] = 1 if owner.get("sandboxed") else 0
    return fields
