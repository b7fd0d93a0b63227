"""The sessions a requester may see, as the documented records (``sessions list``/``show``)."""

from __future__ import annotations

from tether import access

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


def list_sessions(*, include_closed: bool = False) -> list[dict[str, Any]]:
    """The sessions of this home the requester may see (open ones unless ``include_closed``)."""
    from tether.registry import Registry

    with Registry() as registry:
        rows = access.visible_sessions(registry, registry.sessions(include_closed=include_closed))
        return [describe(s, registry.instance_id) for s in rows]


def describe(session: Any, instance_id: str) -> dict[str, Any]:
    """A registry session as the documented record (``sessions list``/``show``)."""
    from tether.ownership import ownership_json

    record = {
        "key": session.key,
        "name": session.name,
        "state": session.state,
        "agent": session.agent_label,
        "agentCommand": session.agent_command,
        "cwd": session.cwd,
        "acpSessionId": session.acp_session_id,
        "createdAt": session.created_at,
        "lastPromptAt": session.last_prompt_at,
        "ownerPid": session.owner_pid,
        "ownerGeneration": session.owner_generation,
        "ownerStatus": session.owner_status,
        "lastEnd": session.last_end,
    }
    fork = session.options.get("fork_from") if isinstance(session.options, dict) else None
    if isinstance(fork, dict):
        record["forkedFrom"] = fork  # {sessionKey, acpSessionId}: where `sessions fork` began
    record.update(ownership_json(session, instance_id))
    return record
