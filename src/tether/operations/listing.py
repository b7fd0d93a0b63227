"""The sessions a requester may see, as the documented records (``sessions list``/``show``)."""

from __future__ import annotations

from tether.policy import access

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


def list_sessions(*, include_closed: bool = False) -> list[dict[str, Any]]:
    """The sessions of this home the requester may see (open ones unless ``include_closed``)."""
    from tether.state.registry import Registry

    with Registry() as registry:
        rows = access.visible_sessions(registry, registry.sessions(include_closed=include_closed))
        return [describe(s, registry.instance_id) for s in rows]


def describe(session: Any, instance_id: str) -> dict[str, Any]:
    """A registry session as the documented record (``sessions list``/``show``)."""
    from tether.policy.ownership import ownership_json

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


def resolve_key(prefix: str) -> str:
    """The full key of the one session (open or closed) the requester may see whose key
    starts with ``prefix``: how a caller addresses a session by key (the CLI's ``--key``)
    whatever its name, agent or door.

    Raises:
        UsageError: ``prefix`` is not hexadecimal, or several sessions' keys start with it.
        NoSession: no session the requester may see has such a key.
    """
    from tether.errors import NoSession, UsageError
    from tether.names import escape
    from tether.state.registry import Registry

    wanted = prefix.strip().lower()
    if not wanted or any(c not in "0123456789abcdef" for c in wanted):
        raise UsageError(f"--key takes a session key or its prefix (hex), got {escape(prefix)!r}")
    with Registry() as registry:
        rows = access.visible_sessions(registry, registry.sessions(include_closed=True))
    keys = [s.key for s in rows if s.key.startswith(wanted)]
    if not keys:
        raise NoSession(f"no session has a key starting with {wanted}")
    if len(keys) > 1:
        shown = ", ".join(k[:16] for k in keys[:5])
        raise UsageError(
            f"{len(keys)} sessions have keys starting with {wanted} ({shown}"
            f"{', ...' if len(keys) > 5 else ''}): give more of the key"
        )
    return keys[0]
