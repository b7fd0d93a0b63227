"""The fleet index: hosts, sessions and shipped journal chunks in PostgreSQL.

One :class:`FleetIndex` wraps one ``psycopg`` connection (autocommit; every multi-statement
change is one explicit transaction). Its SQL lives in one module per concept, functions
over that connection: :mod:`~tether.fleet.index_sql` (connecting, migrations, and the one
place where ``psycopg`` errors become Tether's: :class:`IndexUnavailable` for a server
that cannot be reached), :mod:`~tether.fleet.index_hosts` (hosts and ACP servers' hosts),
:mod:`~tether.fleet.index_sessions` and :mod:`~tether.fleet.index_journal` (shipped
chunks); a stale epoch raises :class:`HostSuperseded`. Nothing else speaks SQL to it.

The rules it keeps, each enforced by the database rather than by a lock in a router:

- **Epochs fence hosts.** Registering a host bumps its epoch; every write a host makes
  (heartbeat, session rows, shipped chunks) carries the epoch it holds and changes
  nothing once a newer one exists. A fence (marking a host down) is one compare-and-set
  on the epoch: of two routers racing to fence, one wins.
- **Liveness by the index's clock.** A host's heartbeat age is ``now() - heartbeat_at``
  computed by PostgreSQL, so no two machines' clocks are ever compared.
- **``ensure`` is idempotent fleet-wide.** A partial unique index over open sessions'
  (scope, agent, cwd, name) means racing creators insert one row; the losers read it.
- **Shipping is idempotent and ordered.** A chunk is keyed (session, first seq); a retry
  of a shipped chunk is a no-op; ``durable_seq`` only moves forward, and only for the
  host and epoch that own the session.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from tether.fleet import index_hosts, index_journal, index_sessions, index_sql
from tether.fleet.index_sql import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_STATEMENT_TIMEOUT_MS,
    migrate,
    new_session_id,
)
from tether.fleet.rows import (
    Capacity,
    HostRow,
    Ownership,
    SessionRow,
    ShippedChunk,
    ShipResult,
)


class FleetIndex:
    """The fleet index over one connection. Not thread-safe: one per thread.

    Each method is its concept's function over this connection; their docstrings say
    what the database guarantees.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    @classmethod
    def connect(
        cls,
        dsn: str,
        *,
        statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
        connect_timeout_s: int = DEFAULT_CONNECT_TIMEOUT_S,
        migrate_schema: bool = True,
    ) -> FleetIndex:
        conn = index_sql.connect(
            dsn, statement_timeout_ms=statement_timeout_ms, connect_timeout_s=connect_timeout_s
        )
        try:
            if migrate_schema:
                migrate(conn)
        except BaseException:
            conn.close()
            raise
        return cls(conn)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> FleetIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_version(self) -> int:
        return index_sql.schema_version(self._conn)

    # --- hosts (tether.fleet.index_hosts) ----------------------------------------------

    def register_host(
        self,
        host_id: str,
        url: str,
        *,
        labels: Mapping[str, str] | None = None,
        capacity: Capacity | None = None,
    ) -> int:
        """Register (or re-register) a host; returns its new epoch."""
        return index_hosts.register_host(self._conn, host_id, url, labels=labels, capacity=capacity)

    def heartbeat(self, host_id: str, epoch: int, capacity: Capacity | None = None) -> None:
        """Renew a host's heartbeat; raises :class:`HostSuperseded` if its epoch is stale."""
        index_hosts.heartbeat(self._conn, host_id, epoch, capacity)

    def set_draining(self, host_id: str, epoch: int, draining: bool = True) -> None:
        """Stop (or resume) placing new sessions on this host; its sessions keep routing."""
        index_hosts.set_draining(self._conn, host_id, epoch, draining)

    def deregister_host(self, host_id: str, epoch: int, reason: str = "deregistered") -> bool:
        """A host leaving on purpose: marked down under its own epoch (no bump)."""
        return index_hosts.deregister_host(self._conn, host_id, epoch, reason)

    def fence_host(self, host_id: str, seen_epoch: int, reason: str) -> int | None:
        """Mark a host down and bump its epoch, if it still holds ``seen_epoch``."""
        return index_hosts.fence_host(self._conn, host_id, seen_epoch, reason)

    def hosts(self) -> list[HostRow]:
        return index_hosts.hosts(self._conn)

    def host(self, host_id: str) -> HostRow | None:
        return index_hosts.host(self._conn, host_id)

    def acp_server_host(self, scope: str, server_id: str) -> str | None:
        """The host that serves ACP server ``server_id``, if one was placed."""
        return index_hosts.acp_server_host(self._conn, scope, server_id)

    def place_acp_server(self, scope: str, server_id: str, host_id: str, host_epoch: int) -> str:
        """The host of ``server_id``: placed on ``host_id`` unless it already has one."""
        return index_hosts.place_acp_server(self._conn, scope, server_id, host_id, host_epoch)

    # --- sessions (tether.fleet.index_sessions) ----------------------------------------

    def ensure_session(
        self,
        *,
        scope: str,
        agent: str,
        cwd: str,
        name: str,
        host_id: str,
        host_epoch: int,
        ownership: Ownership | None = None,
        session_id: str | None = None,
    ) -> tuple[SessionRow, bool]:
        """The open session of (scope, agent, cwd, name), created on ``host_id`` if none;
        returns ``(row, created)``."""
        return index_sessions.ensure_session(
            self._conn, scope=scope, agent=agent, cwd=cwd, name=name, host_id=host_id,
            host_epoch=host_epoch, ownership=ownership, session_id=session_id,
        )  # fmt: skip

    def rehome_session(
        self, session_id: str, host_id: str, host_epoch: int, *, force: bool = False
    ) -> SessionRow:
        """Move an open session whose host is down to ``host_id``, in one transaction."""
        return index_sessions.rehome_session(
            self._conn, session_id, host_id, host_epoch, force=force
        )

    def undo_rehome(self, old_id: str, new_id: str) -> bool:
        """Take back a re-home whose new host did not create the session."""
        return index_sessions.undo_rehome(self._conn, old_id, new_id)

    def bind_local_key(self, session_id: str, host_id: str, host_epoch: int, key: str) -> None:
        """Record the host's own key for a session it now owns (epoch-checked)."""
        index_sessions.bind_local_key(self._conn, session_id, host_id, host_epoch, key)

    def adopt_sessions(self, host_id: str, host_epoch: int) -> list[SessionRow]:
        """A host that registered again takes back its open sessions under its new epoch."""
        return index_sessions.adopt_sessions(self._conn, host_id, host_epoch)

    def session(self, session_id: str) -> SessionRow | None:
        return index_sessions.session(self._conn, session_id)

    def sessions(
        self, *, host_id: str | None = None, state: str | None = "open"
    ) -> list[SessionRow]:
        return index_sessions.sessions(self._conn, host_id=host_id, state=state)

    def children(self, session_id: str) -> list[SessionRow]:
        """The open sessions spawned by ``session_id`` (its ``parent_session_id``)."""
        return index_sessions.children(self._conn, session_id)

    def end_session(self, session_id: str, state: str, reason: str) -> bool:
        """Close an open session (``closed``) or mark it ``lost``; False if it was not open."""
        return index_sessions.end_session(self._conn, session_id, state, reason)

    # --- shipped journal (tether.fleet.index_journal) ----------------------------------

    def ship(
        self, session_id: str, host_id: str, host_epoch: int, chunk: ShippedChunk
    ) -> ShipResult:
        """Store one committed journal batch off-host; returns the new ``durableSeq``."""
        return index_journal.ship(self._conn, session_id, host_id, host_epoch, chunk)

    def shipped(
        self, session_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[ShippedChunk]:
        """Shipped chunks holding seqs after ``after_seq``, in seq order."""
        return index_journal.shipped(self._conn, session_id, after_seq=after_seq, limit=limit)


__all__: Sequence[str] = (
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_STATEMENT_TIMEOUT_MS",
    "Capacity",
    "FleetIndex",
    "HostRow",
    "Ownership",
    "SessionRow",
    "ShipResult",
    "ShippedChunk",
    "migrate",
    "new_session_id",
)
