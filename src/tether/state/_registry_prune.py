"""``sessions prune``: old journal entries and events, and closed sessions whole.

What it touches is scoped by session key: the sessions of one agent (``tether mock
sessions prune``: keys derived from that agent's scope,
:func:`tether.operations.pruning.agent_keys`), or every session (``--all-agents``:
``keys`` None). A dry run does the same work in a
transaction it rolls back, so what it reports is exactly what a real run removes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable
from contextlib import AbstractContextManager
from typing import Any

from tether.state.journal import retention as journal_retention
from tether.state.journal import store as journal_store


class _RolledBack(Exception):
    """Ends a dry run's transaction: everything it did is undone."""


class PruneStore:
    """Pruning; mixed into :class:`tether.state.registry.Registry`. Callers go through
    :func:`tether.operations.prune`, which scopes it to an agent."""

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # the Registry's BEGIN IMMEDIATE transaction

    def prune(
        self,
        *,
        older_than: float | None = None,
        closed: bool = False,
        keys: Collection[str] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Remove old journal entries and events, and (``closed``) closed sessions whole.

        ``older_than`` is a wall-clock time: entries and events before it go (sequence
        numbers are never reused: the high-water marks stay). ``closed`` removes closed
        sessions with their journals, events and finished leases. ``keys``: only these
        sessions (None: every session, and events of none). ``dry_run``: report, change
        nothing. Returns what went (or would go).
        """
        report: dict[str, Any] = {}
        try:
            with self.transaction() as db:
                report = _prune(db, older_than=older_than, closed=closed, keys=keys)
                if dry_run:
                    raise _RolledBack
        except _RolledBack:
            pass
        return {**report, "dryRun": dry_run}


def _prune(
    db: sqlite3.Connection,
    *,
    older_than: float | None,
    closed: bool,
    keys: Collection[str] | None,
) -> dict[str, Any]:
    def scoped(found: Iterable[Any]) -> list[str]:
        return [str(k) for (k,) in found if keys is None or str(k) in keys]

    entries = events = 0
    removed: list[str] = []
    if older_than is not None:
        for key in scoped(db.execute("SELECT session_key FROM journal_heads").fetchall()):
            entries += journal_retention.drop_older(db, key, older_than)
        if keys is None:
            events += db.execute("DELETE FROM events WHERE at < ?", (older_than,)).rowcount
        else:
            for key in keys:
                events += db.execute(
                    "DELETE FROM events WHERE session_key = ? AND at < ?", (key, older_than)
                ).rowcount
    if closed:
        removed = scoped(db.execute("SELECT key FROM sessions WHERE state = 'closed'").fetchall())
        for key in removed:
            entries += journal_store.stats(db, key).entries
            events += db.execute("DELETE FROM events WHERE session_key = ?", (key,)).rowcount
            db.execute(
                "DELETE FROM leases WHERE session_key = ? AND state IN ('closed', 'lost')",
                (key,),
            )
            db.execute("DELETE FROM sessions WHERE key = ?", (key,))
        journal_retention.forget_session(db, removed)
    return {"entriesRemoved": entries, "eventsRemoved": events, "sessionsRemoved": removed}
