"""The registry's record of run members: processes observed while provably inside a run.

:class:`MemberStore` is a part of :class:`tether.state.registry.Registry` (schema v7, table
``run_members``). A member is recorded by its identity -- boot id, pid, start time --
when Tether *saw* it inside a run: the run's root at spawn, a ``tether`` caller proven
below the run's keeper, an orphan the owner adopted when the keeper died. The record
outlives the process's place in the tree: once recorded, the process (and what it
starts, found through its parent chain) is that run's agent for every requester check
(:func:`tether.policy.requester.resolve`), and a member still alive after its run ended is
reported and ended by that identity (:mod:`tether.supervise.members`).

Rows of members proven gone are deleted (:meth:`MemberStore.forget_members`); the rest
stay until a sweep finds them gone.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager

from tether import paths
from tether.supervise.member import Member

__all__ = ["Member", "MemberStore"]

_MAX_IN = 500  # identities per lookup: a parent chain is far shorter


_COLS = "boot_id, pid, starttime, lease_id, session_key, how, seen_at"


def _member(row: sqlite3.Row) -> Member:
    boot, pid, start, lease, key, how, seen = tuple(row)
    return Member(boot, int(pid), int(start), lease, key, how, float(seen))


class MemberStore:
    """Run members; mixed into :class:`tether.state.registry.Registry`."""

    _db: sqlite3.Connection
    path: str

    def _marks(self) -> str:
        """The members' mark directory next to this database (see ``paths``)."""
        return paths.members_dir_path(os.path.dirname(os.path.abspath(self.path)))

    def _mark(self, identities: Iterable[tuple[int, int]], *, on: bool) -> None:
        """Create (or remove) each member's mark file; best effort, like the hint it feeds."""
        where = self._marks()
        if on:
            with contextlib.suppress(OSError):
                os.makedirs(where, mode=0o700, exist_ok=True)
        for pid, starttime in identities:
            name = os.path.join(where, f"{pid}.{starttime}")
            with contextlib.suppress(OSError):
                if on:
                    os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
                else:
                    os.unlink(name)

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # the Registry's BEGIN IMMEDIATE transaction

    def record_members(
        self,
        lease_id: str,
        session_key: str | None,
        boot_id: str,
        identities: Iterable[tuple[int, int]],
        how: str,
    ) -> None:
        """Record ``(pid, starttime)`` pairs as members of run ``lease_id``.

        The first record of an identity wins: a process is the member of the run it was
        first seen in (it cannot be inside two runs' keepers at once).
        """
        now = time.time()
        rows = [(boot_id, pid, st, lease_id, session_key, how, now) for pid, st in identities]
        if not rows:
            return
        self._mark([(r[1], r[2]) for r in rows], on=True)
        with self.transaction() as db:
            db.executemany(
                f"INSERT OR IGNORE INTO run_members ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)",  # noqa: S608 -- column names are ours
                rows,
            )

    def member_in(self, boot_id: str, chain: Sequence[tuple[int, int]]) -> Member | None:
        """The recorded member nearest the front of ``chain`` (a pid and its ancestors,
        nearest first, as ``(pid, starttime)``), or None."""
        chain = list(chain)[:_MAX_IN]
        if not chain:
            return None
        marks = ", ".join("?" for _ in chain)
        rows = self._db.execute(
            f"SELECT {_COLS} FROM run_members WHERE boot_id = ? AND pid IN ({marks})",  # noqa: S608 -- placeholders only
            (boot_id, *(pid for pid, _ in chain)),
        ).fetchall()
        found = {(m.pid, m.starttime): m for m in map(_member, rows)}
        for ident in chain:
            if ident in found:
                return found[ident]
        return None

    def owner_in(self, boot_id: str, chain: Sequence[tuple[int, int]]) -> str | None:
        """The session whose recorded owner is nearest the front of ``chain``, or None."""
        chain = list(chain)[:_MAX_IN]
        if not chain:
            return None
        marks = ", ".join("?" for _ in chain)
        rows = self._db.execute(
            "SELECT session_key, pid, starttime FROM owner_identity"  # noqa: S608 -- placeholders only
            f" WHERE boot_id = ? AND pid IN ({marks})",
            (boot_id, *(pid for pid, _ in chain)),
        ).fetchall()
        found = {(int(r[1]), r[2]): str(r[0]) for r in rows if r[2] is not None}
        for pid, starttime in chain:
            if (pid, starttime) in found:
                return found[(pid, starttime)]
        return None

    def members(
        self, *, lease_id: str | None = None, session_key: str | None = None
    ) -> list[Member]:
        """Recorded members of one run, of one session's runs, or all."""
        where, args = "", tuple[str, ...]()
        if lease_id is not None:
            where, args = "WHERE lease_id = ?", (lease_id,)
        elif session_key is not None:
            where, args = "WHERE session_key = ?", (session_key,)
        query = f"SELECT {_COLS} FROM run_members {where} ORDER BY seen_at"  # noqa: S608 -- fixed clauses
        rows = self._db.execute(query, args).fetchall()
        return [_member(r) for r in rows]

    def forget_members(self, members: Iterable[Member]) -> None:
        """Delete the records of members proven gone."""
        keys = [(m.boot_id, m.pid, m.starttime) for m in members]
        if not keys:
            return
        self._mark(((pid, st) for _boot, pid, st in keys), on=False)
        with self.transaction() as db:
            db.executemany(
                "DELETE FROM run_members WHERE boot_id = ? AND pid = ? AND starttime = ?", keys
            )
