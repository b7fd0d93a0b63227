"""The registry's run records: leases (moved only through their state machine) and metrics.

:class:`RunStore` is a part of :class:`tether.state.registry.Registry`, kept in its own
module so each stays readable: it holds every lease write -- a lease is created
``open`` and its state moves only through :meth:`RunStore.advance_lease`, a
compare-and-set driven by the lease table (:mod:`tether.supervise.lease_state`) --
the steal and the heartbeat renewal of seed 003, and the counters and latency
histograms behind ``tether metrics``. It relies on the registry's connection
(``_db``), its ``transaction()`` and its ``instance_id``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from tether.state.metric_rows import apply_metric_ops
from tether.supervise.lease_state import LeaseInput, LeaseState, next_state

__all__ = ["ANY_OWNER", "Lease", "RunStore"]

#: Holder expectations for :meth:`RunStore.advance_lease`: match any holder.
ANY_OWNER: Any = object()


@dataclass(frozen=True)
class Lease:
    """One lease row; see the schema for the meaning of each field."""

    lease_id: str
    instance_id: str
    session_key: str | None
    owner_pid: int | None
    owner_starttime: int | None
    keeper_pid: int | None
    keeper_starttime: int | None
    root_pid: int | None
    pgid: int | None
    boot_id: str
    pid_namespace: str | None
    starttime: int | None
    cgroup_path: str | None
    command_hash: str
    cwd: str
    state: str
    created_at: float
    updated_at: float
    last_output_at: float | None
    reason: str | None
    exit_code: int | None
    exit_signal: int | None
    kill_mode: str | None
    note: str | None
    run_state: str | None = None
    backend_id: str | None = None
    owner_instance_id: str | None = None
    lease_expires_at: float | None = None
    heartbeat_at: float | None = None
    stolen_from: str | None = None
    failure: str | None = None


class RunStore:
    """Leases and metrics; mixed into :class:`tether.state.registry.Registry`."""

    _db: sqlite3.Connection
    instance_id: str

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # the Registry's BEGIN IMMEDIATE transaction

    # --- leases -------------------------------------------------------------------

    def create_lease(self, **fields: Any) -> None:
        """Insert a new lease: always ``open`` (the lease machine's initial state)."""
        if "state" in fields:
            raise ValueError("a lease is created open; move it with advance_lease()")
        now = time.time()
        fields.setdefault("instance_id", self.instance_id)
        fields["state"] = LeaseState.OPEN.value
        fields.setdefault("created_at", now)
        fields.setdefault("updated_at", now)
        cols = ", ".join(fields)
        marks = ", ".join("?" for _ in fields)
        with self.transaction() as db:
            db.execute(f"INSERT INTO leases ({cols}) VALUES ({marks})", tuple(fields.values()))  # noqa: S608 -- column names are ours

    def update_lease(self, lease_id: str, **fields: Any) -> None:
        """Update a lease's descriptive fields. Its state moves only through advance_lease()."""
        if "state" in fields:
            raise ValueError("lease state moves only through advance_lease()")
        fields["updated_at"] = time.time()
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            db.execute(f"UPDATE leases SET {sets} WHERE lease_id = ?", (*fields.values(), lease_id))  # noqa: S608 -- column names are ours

    def advance_lease(
        self,
        lease_id: str,
        event: LeaseInput,
        *,
        expect: LeaseState | tuple[LeaseState, ...],
        owner: Any = ANY_OWNER,
        record: tuple[str | None, str, Mapping[str, Any]] | None = None,
        **fields: Any,
    ) -> LeaseState | None:
        """Move a lease through its state machine, as one compare-and-set.

        The lease moves only if its current state is ``expect`` (one of, for a tuple)
        and, unless ``owner`` is :data:`ANY_OWNER`, its ``owner_instance_id`` equals
        ``owner``; the next state is computed by the lease table
        (:func:`~tether.supervise.lease_state.next_state`) from the state actually
        found, so a write the table forbids raises and writes nothing. ``record`` --
        ``(session_key, kind, payload)`` -- is added to the events in the same
        transaction, and only if the lease moved: two reconcilers racing over one
        lease therefore end it once and report its end once.

        Returns:
            The new state, or ``None`` if the lease was not in an expected state or
            held by another owner (the caller lost a race: it must not act).

        Raises:
            InvalidTransition: ``event`` is illegal from the state found (a bug).
        """
        wanted = (expect,) if isinstance(expect, LeaseState) else expect
        with self.transaction() as db:
            row = db.execute(
                "SELECT state, owner_instance_id FROM leases WHERE lease_id = ?", (lease_id,)
            ).fetchone()
            if row is None:
                return None
            current = LeaseState(row[0])
            if current not in wanted or (owner is not ANY_OWNER and row[1] != owner):
                return None
            new = next_state(current, event)
            fields["state"] = new.value
            fields["updated_at"] = time.time()
            sets = ", ".join(f"{k} = ?" for k in fields)
            # The IMMEDIATE transaction holds the write lock, so nothing can change the
            # row between the read above and this write; the WHERE re-checks it anyway.
            db.execute(
                f"UPDATE leases SET {sets} WHERE lease_id = ? AND state = ?",  # noqa: S608 -- column names are ours
                (*fields.values(), lease_id, current.value),
            )
            if record is not None:
                session_key, kind, payload = record
                db.execute(
                    "INSERT INTO events (session_key, kind, payload, at) VALUES (?, ?, ?, ?)",
                    (session_key, kind, json.dumps(dict(payload)), time.time()),
                )
        return new

    def steal_lease(
        self,
        lease_id: str,
        *,
        expect: LeaseState,
        holder: str | None,
        now: float,
        holder_dead: bool,
        new_owner: str,
        ttl: float,
        record: tuple[str | None, str, Mapping[str, Any]] | None = None,
        **fields: Any,
    ) -> bool:
        """Take over an expired lease (seed 003): one compare-and-set on state and holder.

        Succeeds only if the lease is still in ``expect``, still held by ``holder``,
        and either expired at ``now`` (``lease_expires_at`` passed) or ``holder_dead``
        (its holder was proven gone, so it can renew nothing). The steal is committed
        -- recorded, with ``stolen_from`` -- before the caller signals anything; of two
        supervisors racing for one lease, exactly one gets ``True``. ``record`` --
        ``(session_key, kind, payload)`` -- is added to the events in the same
        transaction, only by the winner.
        """
        query = (
            "SELECT state FROM leases WHERE lease_id = ? AND state = ? AND owner_instance_id IS ?"
        )
        args: tuple[Any, ...] = (lease_id, expect.value, holder)
        if not holder_dead:
            query += " AND lease_expires_at IS NOT NULL AND lease_expires_at <= ?"
            args += (now,)
        with self.transaction() as db:
            row = db.execute(query, args).fetchone()
            if row is None:
                return False
            new = next_state(expect, LeaseInput.STOLEN)
            fields.update(
                state=new.value,
                owner_instance_id=new_owner,
                stolen_from=holder,
                lease_expires_at=now + ttl,
                heartbeat_at=now,
                updated_at=time.time(),
            )
            sets = ", ".join(f"{k} = ?" for k in fields)
            db.execute(
                f"UPDATE leases SET {sets} WHERE lease_id = ? AND state = ?",  # noqa: S608 -- column names are ours
                (*fields.values(), lease_id, expect.value),
            )
            if record is not None:
                session_key, kind, payload = record
                db.execute(
                    "INSERT INTO events (session_key, kind, payload, at) VALUES (?, ?, ?, ?)",
                    (session_key, kind, json.dumps(dict(payload)), time.time()),
                )
        return True

    def renew_leases(
        self, lease_ids: list[str], *, owner: str, now: float, ttl: float
    ) -> list[str]:
        """Heartbeat: push ``lease_expires_at`` forward for the live leases ``owner`` holds.

        Returns the ids that were *not* renewed (stolen, or ended): the holder has lost
        them and must not write them again.
        """
        lost: list[str] = []
        with self.transaction() as db:
            for lease_id in lease_ids:
                cur = db.execute(
                    "UPDATE leases SET lease_expires_at = ?, heartbeat_at = ?"
                    " WHERE lease_id = ? AND owner_instance_id = ? AND state IN (?, ?)",
                    (
                        now + ttl,
                        now,
                        lease_id,
                        owner,
                        LeaseState.OPEN.value,
                        LeaseState.CLOSING.value,
                    ),
                )
                if cur.rowcount != 1:
                    lost.append(lease_id)
        return lost

    def lease(self, lease_id: str) -> Lease | None:
        row = self._db.execute("SELECT * FROM leases WHERE lease_id = ?", (lease_id,)).fetchone()
        return Lease(**dict(row)) if row else None

    def leases(
        self,
        *,
        states: tuple[str, ...] | None = None,
        session_key: str | None = None,
        all_instances: bool = False,
    ) -> list[Lease]:
        query = "SELECT * FROM leases WHERE 1=1"
        args: list[Any] = []
        if not all_instances:
            query += " AND instance_id = ?"
            args.append(self.instance_id)
        if states:
            query += f" AND state IN ({', '.join('?' for _ in states)})"
            args.extend(states)
        if session_key is not None:
            query += " AND session_key = ?"
            args.append(session_key)
        query += " ORDER BY created_at"
        return [Lease(**dict(r)) for r in self._db.execute(query, args).fetchall()]

    def delete_lease(self, lease_id: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM leases WHERE lease_id = ?", (lease_id,))

    # --- counters and histograms --------------------------------------------------

    def incr(self, name: str, by: int = 1, **labels: str) -> None:
        with self.transaction() as db:
            apply_metric_ops(db, [("incr", name, by, None, labels)])

    def counters(self) -> dict[str, int]:
        rows = self._db.execute("SELECT name, labels, value FROM counters ORDER BY name, labels")
        return {(f"{n}{{{lbl}}}" if lbl else n): int(v) for n, lbl, v in rows.fetchall()}

    def observe(self, name: str, value: float, bounds: tuple[float, ...], **labels: str) -> None:
        """Add one observation to a histogram (``bounds`` are the buckets' upper edges)."""
        with self.transaction() as db:
            apply_metric_ops(db, [("observe", name, value, bounds, labels)])

    def histograms(self) -> list[tuple[str, str, int, float, list[int]]]:
        """Every histogram as ``(name, labels, count, sum, per-bucket counts)``."""
        rows = self._db.execute(
            "SELECT name, labels, count, sum, buckets FROM histograms ORDER BY name, labels"
        ).fetchall()
        return [
            (str(n), str(lbl), int(c), float(sm), list(json.loads(b))) for n, lbl, c, sm, b in rows
        ]
