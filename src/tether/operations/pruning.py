"""Pruning the state: old journal entries and events, and closed sessions whole.

The storage side -- what a prune deletes, in one transaction, and a dry run's rollback
-- is the state layer's (:meth:`tether.state.registry.Registry.prune`); this is what a caller
asks for: which sessions (one agent's, or every agent's), and the run files of the
sessions removed (their lock file and socket, never a live owner's). Needs no owner.
"""

from __future__ import annotations

import os

from tether import sessions

TYPE_CHECKING = False  # typing costs ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

    from tether.state.registry import Registry


def agent_keys(registry: Registry, agent_scope: str) -> set[str]:
    """The keys of every session (open or closed) of the agent ``agent_scope`` names.

    A session belongs to an agent when its key derives from that agent's scope (the key
    is a hash of the scope, the directory and the name), so no label is compared.
    """
    return {
        s.key
        for s in registry.sessions(include_closed=True)
        if sessions.session_key(agent_scope, s.cwd, s.name) == s.key
    }


def prune(
    *,
    older_than: float | None = None,
    closed: bool = False,
    agent_scope: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Remove journal entries and events older than ``older_than`` (a wall-clock time),
    and (``closed``) closed sessions whole, with their run files.

    Args:
        older_than: entries and events before this time go (seqs are never reused).
        closed: remove closed sessions with their journals, events and finished leases.
        agent_scope: only the sessions of this agent (:func:`agent_keys`); None: every
            agent's sessions, and events of none.
        dry_run: report what would go, change nothing.

    Returns:
        ``entriesRemoved``, ``eventsRemoved``, ``sessionsRemoved`` (keys), ``dryRun``.

    Raises:
        StateError: the state database failed (nothing half-removed: one transaction).
    """
    from tether.state.registry import Registry

    with Registry() as registry:
        keys = None if agent_scope is None else agent_keys(registry, agent_scope)
        report = registry.prune(older_than=older_than, closed=closed, keys=keys, dry_run=dry_run)
    if not dry_run:
        for key in report["sessionsRemoved"]:
            _remove_run_files(key)
    return report


def _remove_run_files(key: str) -> None:
    """A removed session's lock file and socket go with it (never a live owner's)."""
    import fcntl

    lock = sessions.lock_path(key)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return  # an owner holds it: not ours to remove
    try:
        for path in (sessions.socket_path(key), sessions.create_lock_path(key), lock):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    finally:
        os.close(fd)
