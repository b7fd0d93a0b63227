"""Applying the visibility check: who is asking, the configured policy, and the verdict.

Every session operation calls :func:`authorize` (one session) or :func:`visible_sessions`
(a listing) before it acts, so list, history, send, status, cancel, set-mode/set,
close -- and watch and terminate once they exist -- obey one rule
(:func:`tether.visibility.can_see`). A denial raises
:class:`~tether.errors.VisibilityDenied` naming the rule; it never looks like "no such
session".

The thin path. An operator's ``prompt``/``cancel``/``status`` against a live owner
imports no sqlite3, dataclasses or pathlib, and the operator sees everything, so
:func:`authorize` first asks a cheap question with the standard library only: *could*
this process be inside an agent tree? It is, if ``TETHER_SESSION_KEY`` or
``TETHER_LEASE_ID`` is in its environment or in the environment of any ancestor (a
keeper's environment carries ``TETHER_LEASE_ID`` and the agent cannot change it; an
agent that clears its own environment is still below its keeper). Only then is the
proof (:mod:`tether.requester`, against the registry and the kernel) paid for. The
hint can only send a caller to the proof, never past it.

Configuration::

    [sessions]
    visibility = "tree"        # self | tree | agent | all
    closeChildren = true       # closing a session closes the sessions it spawned first
    [agentToAgent]
    enabled = false
    allow = ["claude", "co*"]  # exact (case-sensitive) or * wildcards (case-insensitive)
"""

from __future__ import annotations

import os

from tether.errors import NoSession, UsageError, VisibilityDenied

TYPE_CHECKING = False  # typing costs ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

    from tether.registry import Registry, Session
    from tether.requester import Resolved
    from tether.visibility import A2APolicy, Visibility

__all__ = [
    "authorize",
    "close_children_enabled",
    "could_be_agent",
    "current_requester",
    "policy",
    "spawn_owner",
    "visible_sessions",
]

_MARKERS = (b"TETHER_SESSION_KEY=", b"TETHER_LEASE_ID=")


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    return int(raw[raw.rfind(b")") + 2 :].split()[1])


def _has_marker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            block = f.read()
    except OSError:
        return False
    return any(block.startswith(m) or b"\0" + m in block for m in _MARKERS)


def could_be_agent(pid: int | None = None) -> bool:
    """Whether the process might be inside an agent tree (so its requester needs proof).

    Standard library only. ``/proc`` that cannot be read answers True (fail closed:
    the proof decides).
    """
    if pid is None and any(os.environ.get(m[:-1].decode()) for m in _MARKERS):
        return True
    pid = os.getpid() if pid is None else pid
    try:
        for _ in range(4096):
            if _has_marker(pid):
                return True
            parent = _ppid(pid)
            if parent <= 0 or parent == pid:
                return False
            pid = parent
    except (OSError, ValueError, IndexError):
        return True
    return True


def current_requester(registry: Registry | None = None) -> Resolved:
    """Who this process is (:func:`tether.requester.resolve`), the hint first."""
    from tether.requester import Resolved, resolve

    if not could_be_agent():
        return Resolved(None, "no agent tree above this process: the operator")
    if registry is not None:
        return resolve(registry)
    from tether.registry import Registry

    with Registry() as reg:
        return resolve(reg)


def _section(cfg: dict[str, Any] | None, name: str) -> dict[str, Any]:
    if cfg is None:
        from tether import config

        cfg = config.load(os.getcwd())
    value = cfg.get(name) or {}
    if not isinstance(value, dict):
        raise UsageError(f"config [{name}] must be a table")
    return value


def policy(cfg: dict[str, Any] | None = None) -> tuple[Visibility, A2APolicy]:
    """The configured visibility level and agent-to-agent policy."""
    from tether.visibility import A2APolicy, Visibility

    sessions_cfg = _section(cfg, "sessions")
    a2a_cfg = _section(cfg, "agentToAgent")
    try:
        level = Visibility.parse(str(sessions_cfg.get("visibility") or "tree"))
    except ValueError as exc:
        raise UsageError(f"config [sessions] {exc}") from None
    allow = a2a_cfg.get("allow") or []
    if not isinstance(allow, (list, tuple)) or not all(isinstance(p, str) for p in allow):
        raise UsageError("config [agentToAgent] allow must be a list of strings")
    enabled = a2a_cfg.get("enabled", False)
    if not isinstance(enabled, bool):
        raise UsageError("config [agentToAgent] enabled must be true or false")
    return level, A2APolicy(enabled=enabled, allow=tuple(allow))


def close_children_enabled(cfg: dict[str, Any] | None = None) -> bool:
    """``[sessions] closeChildren`` (default true)."""
    value = _section(cfg, "sessions").get("closeChildren", True)
    if not isinstance(value, bool):
        raise UsageError("config [sessions] closeChildren must be true or false")
    return value


def authorize(
    key: str,
    action: str,
    *,
    cfg: dict[str, Any] | None = None,
    registry: Registry | None = None,
) -> Resolved | None:
    """Raise :class:`VisibilityDenied` unless this process may ``action`` session ``key``.

    Returns None for the operator (decided without the registry on the thin path),
    else the requester as resolved. For a requester, a session that does not exist
    raises ``NoSession`` (there is nothing to hide); one that exists but is out of
    reach raises ``VisibilityDenied`` naming the rule -- never a look-alike "no session".
    """
    if not could_be_agent():
        return None
    if registry is None:
        from tether.registry import Registry

        with Registry() as reg:
            return authorize(key, action, cfg=cfg, registry=reg)
    from tether.ownership import row_of
    from tether.visibility import Action, can_see

    resolved = current_requester(registry)
    if resolved.requester is None:
        return resolved
    session = registry.session(key)
    if session is None:
        raise NoSession("no such session", session_key=key)
    level, a2a = policy(cfg)
    decision = can_see(row_of(session), resolved.requester, level, a2a, Action(action))
    if not decision.allowed:
        raise VisibilityDenied(
            decision.why,
            rule=decision.rule,
            session_key=key,
            requester=resolved.requester.session_key,
        )
    return resolved


def spawn_owner(resolved: Resolved, agent_id: str, parent: Session | None = None) -> dict[str, Any]:
    """The ownership fields of a session ``resolved`` creates (``upsert_session(owner=)``).

    The operator's sessions are operator-owned; a requester's record it as owner,
    spawner and parent, and a sandboxed requester's children are sandboxed too.
    """
    key = resolved.spawner_key
    return {
        "agent_id": agent_id,
        "owner_session_key": key,
        "spawned_by": key,
        "parent_session_key": key,
        "sandboxed": bool(parent is not None and parent.sandboxed),
    }


def visible_sessions(
    registry: Registry, rows: list[Session], *, cfg: dict[str, Any] | None = None
) -> list[Session]:
    """The rows this process may list (all of them for the operator)."""
    resolved = current_requester(registry)
    if resolved.requester is None:
        return rows
    from tether.ownership import row_of
    from tether.visibility import can_see

    level, a2a = policy(cfg)
    return [s for s in rows if can_see(row_of(s), resolved.requester, level, a2a).allowed]
