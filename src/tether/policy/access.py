"""Applying the visibility check: who is asking, the configured policy, and the verdict.

Every session operation calls :func:`authorize` (one session) or :func:`visible_sessions`
(a listing) before it acts, so list, history/read, watch, send, status, cancel,
set-mode/set, answer, close and terminate obey one rule
(:func:`tether.policy.visibility.can_see`). A denial raises
:class:`~tether.errors.VisibilityDenied` naming the rule; it never looks like "no such
session". An owner applies the same decision (:func:`check_session`) to the process at
the other end of each IPC request (:mod:`tether.owner.gate`), so a client that skips
this module gains nothing. Creating a session of another agent is decided by the
agent-to-agent policy (:func:`authorize_spawn`).

The thin path. An operator's ``prompt``/``cancel``/``status`` against a live owner
imports no sqlite3, dataclasses or pathlib, and the operator sees everything, so
:func:`authorize` first asks a cheap question with the standard library only: *could*
this process be inside an agent tree? It is, if ``TETHER_SESSION_KEY`` or
``TETHER_LEASE_ID`` is in its environment or in the environment of any ancestor (a
keeper's environment carries ``TETHER_LEASE_ID`` and the agent cannot change it; an
agent that clears its own environment is still below its keeper), or ``TETHER_OWNER_OF``
(every owner's: a killed keeper's orphans are re-parented to it), or when the process
or an ancestor left a recorded member's mark (``run/members/PID.STARTTIME``: it was
seen inside a run, wherever it is now -- issue 20). Only then is the proof
(:mod:`tether.policy.requester`, against the registry and the kernel) paid for. The hint can
only send a caller to the proof, never past it.

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

    from tether.policy.requester import Resolved
    from tether.policy.visibility import A2APolicy, Visibility
    from tether.state.registry import Registry, Session

__all__ = [
    "authorize",
    "authorize_spawn",
    "check_session",
    "close_children_enabled",
    "could_be_agent",
    "current_requester",
    "policy",
    "spawn_owner",
    "visible_sessions",
]

# TETHER_OWNER_OF is in every owner's environment as exec'd: what is below an owner and
# outside its keepers is what a killed keeper left (issue 20), the agent's side too.
_MARKERS = (b"TETHER_SESSION_KEY=", b"TETHER_LEASE_ID=", b"TETHER_OWNER_OF=")


def _stat(pid: int) -> tuple[int, int]:
    """(parent pid, start time) of ``pid``, from ``/proc/PID/stat``."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[1]), int(fields[19])


def _has_marker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            block = f.read()
    except OSError:
        return False
    return any(block.startswith(m) or b"\0" + m in block for m in _MARKERS)


_MARKER_NAMES = tuple(m[:-1].decode() for m in _MARKERS)
_CLEAN_KEPT = 1024  # (pid, start time) pairs a long-lived caller remembers as clean
# This process's own memory of the same (see ``clean`` below): a long-lived caller -- the
# HTTP gateway, a library -- walks its ancestors once, not on every operation.
_SELF_CLEAN: dict[int, int] = {}
_PROVEN = -1  # a key of _SELF_CLEAN (no pid): this process's pid once it was found clean


def _recorded(walked: list[tuple[int, int]]) -> bool:
    """Whether one of ``walked`` left a member's mark (:func:`tether.paths.members_dir_path`)."""
    from tether.paths import members_dir_path

    where = members_dir_path()
    if not os.path.isdir(where):
        return False
    return any(os.path.exists(f"{where}/{pid}.{start}") for pid, start in walked)


def could_be_agent(pid: int | None = None, *, clean: dict[int, int] | None = None) -> bool:
    """Whether the process might be inside an agent tree (so its requester needs proof).

    Standard library only. ``/proc`` that cannot be read answers True (fail closed:
    the proof decides).

    ``clean``: a long-lived caller's memory (an owner's, for its peers) of processes
    found with no marker in themselves or above them, pid -> start time. The walk stops
    at one of them. Sound because a process's ancestors only ever shrink -- when its
    parent dies it is re-parented to a subreaper or init that was already above it --
    so a process outside every agent tree stays outside, and a keeper started later
    can never come to be above it. For an operator's shell that saves all but the
    first hops of every call.

    A process recorded as a member of a run (:mod:`tether.state._registry_members`) -- or
    below one -- also answers yes: one that killed its keeper (and its owner) carries no
    marker above it, but Tether saw it inside, so it still needs the proof. The record
    leaves a mark file per member, checked here with one ``stat`` per hop.
    """
    if pid is None:
        environ = os.environ
        for name in _MARKER_NAMES:
            if environ.get(name):
                return True
        pid = os.getpid()
        if clean is None:
            clean = _SELF_CLEAN
            if clean.get(_PROVEN) == pid:
                # This very process was walked and found clean: the walk would now stop
                # at its first hop, on its own start time, which cannot have changed.
                return False
            verdict = could_be_agent(pid, clean=clean)
            if not verdict:
                clean[_PROVEN] = pid  # a fork's child has another pid: it walks anew
            return verdict
    walked: list[tuple[int, int]] = []
    try:
        for _ in range(4096):
            parent, start = _stat(pid)
            if clean is not None and clean.get(pid) == start:
                break
            if _has_marker(pid):
                return True
            walked.append((pid, start))
            if parent <= 0 or parent == pid:
                break
            pid = parent
        else:
            return True
    except (OSError, ValueError, IndexError):
        return True
    if walked and _recorded(walked):
        return True
    if clean is not None:
        if len(clean) + len(walked) > _CLEAN_KEPT:
            clean.clear()
        clean.update(walked)
    return False


def current_requester(registry: Registry | None = None) -> Resolved:
    """Who this process is (:func:`tether.policy.requester.resolve`), the hint first.

    A caller proven inside a run is recorded as that run's member.
    """
    from tether.policy.requester import Resolved, resolve

    if not could_be_agent():
        return Resolved(None, "no agent tree above this process: the operator")
    if registry is not None:
        return resolve(registry, record=True)
    from tether.state.registry import Registry

    with Registry() as reg:
        return resolve(reg, record=True)


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
    from tether.policy.visibility import A2APolicy, Visibility

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
        from tether.state.registry import Registry

        with Registry() as reg:
            return authorize(key, action, cfg=cfg, registry=reg)
    resolved = current_requester(registry)
    if resolved.requester is None:
        return resolved
    session = registry.session(key)
    if session is None:
        raise NoSession("no such session", session_key=key)
    check_session(registry, session, resolved, action, cfg=cfg)
    return resolved


def check_session(
    registry: Registry,
    session: Session,
    resolved: Resolved,
    action: str,
    *,
    cfg: dict[str, Any] | None = None,
    cascade_from: str | None = None,
) -> None:
    """Raise :class:`VisibilityDenied` unless ``resolved`` may ``action`` ``session``.

    The one decision behind :func:`authorize` (this process asks) and the owner's door
    check (:mod:`tether.owner.gate`: its IPC peer asks). ``cascade_from``: the close (or
    terminate) is part of closing that session's family (:mod:`tether.policy.cascade`), whose
    authority covers every descendant: it is allowed when ``session`` descends from
    ``cascade_from`` and the requester may close ``cascade_from`` itself -- the
    grandchild outside a non-transitive ``tree`` view still ends with its grandparent.
    """
    requester = resolved.requester
    if requester is None:
        return
    from tether.policy.ownership import descends_from, row_of
    from tether.policy.visibility import Action, can_see

    level, a2a = policy(cfg)
    act = Action(action)
    decision = can_see(row_of(session), requester, level, a2a, act)
    if decision.allowed:
        return
    if cascade_from and cascade_from != session.key and act in (Action.CLOSE, Action.TERMINATE):
        root = registry.session(cascade_from)
        if (
            root is not None
            and descends_from(session, cascade_from, registry.session)
            and can_see(row_of(root), requester, level, a2a, act).allowed
        ):
            return
    raise VisibilityDenied(
        decision.why,
        rule=decision.rule,
        session_key=session.key,
        requester=requester.session_key,
    )


def authorize_spawn(
    resolved: Resolved, agent_id: str, *, cfg: dict[str, Any] | None = None
) -> None:
    """Raise :class:`VisibilityDenied` unless ``resolved`` may start an ``agent_id`` session.

    The agent-to-agent policy limits spawning (:func:`tether.policy.visibility.can_spawn`):
    another agent's session only when ``[agentToAgent]`` allows both agents.
    """
    if resolved.requester is None:
        return
    from tether.policy.visibility import can_spawn

    _level, a2a = policy(cfg)
    decision = can_spawn(resolved.requester, agent_id, a2a)
    if not decision.allowed:
        raise VisibilityDenied(
            decision.why,
            rule=decision.rule,
            requester=resolved.requester.session_key,
            agent=agent_id,
        )


def spawn_owner(
    resolved: Resolved,
    agent_id: str,
    parent: Session | None = None,
    *,
    sandboxed: bool = False,
) -> dict[str, Any]:
    """The ownership fields of a session ``resolved`` creates (``upsert_session(owner=)``).

    The operator's sessions are operator-owned; a requester's record it as owner,
    spawner and parent. A session is sandboxed when asked (``--sandboxed``) or when its
    spawner is: a sandboxed session cannot shed the clamp by spawning.
    """
    key = resolved.spawner_key
    inherited = resolved.requester is not None and resolved.requester.sandboxed
    return {
        "agent_id": agent_id,
        "owner_session_key": key,
        "spawned_by": key,
        "parent_session_key": key,
        "sandboxed": bool(sandboxed or inherited or (parent is not None and parent.sandboxed)),
    }


def visible_sessions(
    registry: Registry, rows: list[Session], *, cfg: dict[str, Any] | None = None
) -> list[Session]:
    """The rows this process may list (all of them for the operator)."""
    resolved = current_requester(registry)
    if resolved.requester is None:
        return rows
    from tether.policy.ownership import row_of
    from tether.policy.visibility import can_see

    level, a2a = policy(cfg)
    return [s for s in rows if can_see(row_of(s), resolved.requester, level, a2a).allowed]
