"""The open sessions' family links, read without the registry (issue 23).

``sessions close`` first closes the session's open descendants (:mod:`tether.policy.cascade`),
which needs one query: every open session's key, family columns and state. Importing the
registry for it -- its dataclasses, the journal's storage, the migrations -- cost the
CLI's close more than everything else it imports; this module reads the same rows with
``sqlite3`` alone. It only reads, and only a database at the current schema version:
anything else (no database yet, an older or newer schema, any error at all) answers
None, and the caller takes the registry's way, which creates, migrates and translates
errors as it always did.
"""

from __future__ import annotations

import os
import sqlite3

from tether import paths
from tether.state.schema import MIGRATIONS

__all__ = ["OpenRow", "open_rows"]

_QUERY = (
    "SELECT key, parent_session_key, spawned_by, owner_session_key, state"
    " FROM sessions WHERE state != 'closed' ORDER BY created_at"
)


class OpenRow:
    """An open session's family columns, as :func:`tether.policy.ownership.parent_of`
    reads them (which of them makes the parent is that module's to say)."""

    __slots__ = ("key", "owner_session_key", "parent_session_key", "spawned_by", "state")

    def __init__(
        self, key: str, parent: str | None, spawner: str | None, owner: str | None, state: str
    ) -> None:
        self.key = key
        self.parent_session_key = parent
        self.spawned_by = spawner
        self.owner_session_key = owner
        self.state = state


def open_rows() -> list[OpenRow] | None:
    """Every open session's family columns, oldest first; None: ask the registry."""
    path = paths.state_db()
    if not os.path.exists(path):
        return None
    try:
        db = sqlite3.connect(path, timeout=10.0, isolation_level=None)
    except sqlite3.Error:
        return None
    try:
        db.execute("PRAGMA query_only = 1")
        db.execute("PRAGMA busy_timeout = 10000")
        if db.execute("PRAGMA user_version").fetchone()[0] != len(MIGRATIONS):
            return None
        return [
            OpenRow(str(key), parent, spawner, owner, str(state))
            for key, parent, spawner, owner, state in db.execute(_QUERY)
        ]
    except sqlite3.Error:
        return None
    finally:
        db.close()
