"""The registry's record of a session's owners: each owner's generation and identity.

:class:`OwnerStore` is a part of :class:`tether.state.registry.Registry`. An owner that
took a session's flock records itself here (:meth:`OwnerStore.begin_owner`): its pid,
start time and socket on the session's row, with a generation one past the previous
owner's, and its identity (boot id included) in ``owner_identity`` for verified fencing.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["OwnerStore"]


class OwnerStore:
    """Owner generations and identities; mixed into :class:`tether.state.registry.Registry`."""

    _db: sqlite3.Connection

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # the Registry's BEGIN IMMEDIATE transaction

    def begin_owner(
        self,
        key: str,
        *,
        pid: int,
        starttime: int | None,
        socket: str,
        boot_id: str | None = None,
    ) -> int:
        """Record a new owner for the session and return its generation (previous + 1).

        Called by an owner right after it acquired the session's flock, so increments are
        serialised by the lock as well as by the transaction.
        """
        now = time.time()
        with self.transaction() as db:
            row = db.execute(
                "SELECT owner_generation FROM sessions WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                raise KeyError(key)
            generation = int(row[0]) + 1
            db.execute(
                "UPDATE sessions SET owner_pid = ?, owner_starttime = ?, owner_generation = ?,"
                " owner_socket = ?, owner_started_at = ?, owner_heartbeat_at = ?,"
                " owner_status = 'starting', queue_depth = 0, current_request = NULL,"
                " updated_at = ? WHERE key = ?",
                (pid, starttime, generation, socket, now, now, now, key),
            )
            if boot_id is not None:
                db.execute(
                    "INSERT OR REPLACE INTO owner_identity"
                    " (session_key, pid, starttime, boot_id, generation, recorded_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (key, pid, starttime, boot_id, generation, now),
                )
        return generation

    def sessions_owned_by(self, pid: int, starttime: int, boot_id: str) -> list[str]:
        """The sessions whose latest owner recorded this identity (more than one: the
        owners of a session host, :mod:`tether.sessionhost`)."""
        rows = self._db.execute(
            "SELECT session_key FROM owner_identity"
            " WHERE pid = ? AND starttime = ? AND boot_id = ? ORDER BY session_key",
            (pid, starttime, boot_id),
        ).fetchall()
        return [str(row[0]) for row in rows]

    def owner_identity(self, key: str) -> dict[str, Any] | None:
        """The identity recorded by the session's latest owner: pid, starttime, boot_id,
        generation (None if no owner recorded one)."""
        row = self._db.execute(
            "SELECT pid, starttime, boot_id, generation FROM owner_identity WHERE session_key = ?",
            (key,),
        ).fetchone()
        if row is None:
            return None
        return {"pid": row[0], "starttime": row[1], "boot_id": row[2], "generation": row[3]}
