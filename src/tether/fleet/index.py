"""The fleet index: hosts, sessions and shipped journal chunks in PostgreSQL.

One :class:`FleetIndex` wraps one ``psycopg`` connection (autocommit; every multi-statement
change is one explicit transaction). It is the only module that speaks SQL to the index,
and the one place where ``psycopg`` errors become Tether's (:class:`IndexUnavailable`
for a server that cannot be reached, :class:`HostSuperseded` for a stale epoch).

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

import json
import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tether.errors import FleetError, HostSuperseded, IndexUnavailable
from tether.fleet.rows import (
    Capacity,
    HostRow,
    Ownership,
    SessionRow,
    ShippedChunk,
    ShipResult,
    host_row,
    session_row,
)
from tether.fleet.schema import MIGRATIONS

# pg_advisory_xact_lock key for migrations: any constant shared by every Tether.
_MIGRATION_LOCK = 0x7E7E_0001
# How long one statement may run before the index counts as unavailable. A frozen
# server must not hang a router's request: routing falls back to its cached host table.
DEFAULT_STATEMENT_TIMEOUT_MS = 5_000
DEFAULT_CONNECT_TIMEOUT_S = 3


def new_session_id() -> str:
    """A fleet-global session id: random, never derived from a host, a cwd or a name.

    The same shape as a host's own session key (64 hex digits), so a host can keep a
    fleet session under this id and every path derived from a key stays as it is.
    """
    return secrets.token_hex(32)


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """The one boundary where psycopg's errors become Tether's."""
    try:
        yield
    except psycopg.OperationalError as e:
        raise IndexUnavailable(f"the fleet index cannot be reached ({what}): {e}") from e
    except psycopg.errors.QueryCanceled as e:
        raise IndexUnavailable(f"the fleet index did not answer in time ({what})") from e
    except psycopg.Error as e:
        raise FleetError(f"the fleet index refused {what}: {e}") from e


def migrate(conn: psycopg.Connection[Any]) -> int:
    """Bring the index's schema up to date; returns the version. Safe to race."""
    with _translated("migrate"), conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS fleet_migrations ("
            " version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT count(*) FROM fleet_migrations").fetchone()
        version = int(row[0]) if row else 0
        if version > len(MIGRATIONS):
            raise FleetError(
                f"the fleet index is at schema version {version}, newer than this Tether"
                f" knows ({len(MIGRATIONS)}): upgrade Tether on this machine"
            )
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            conn.execute(script.encode())
            conn.execute("INSERT INTO fleet_migrations (version) VALUES (%s)", (number,))
        return len(MIGRATIONS)


class FleetIndex:
    """The fleet index over one connection. Not thread-safe: one per thread."""

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
        with _translated("connect"):
            conn = psycopg.connect(
                dsn,
                autocommit=True,
                connect_timeout=connect_timeout_s,
                options=f"-c statement_timeout={int(statement_timeout_ms)}",
                application_name="tether",
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
        with _translated("schema version"):
            row = self._conn.execute("SELECT count(*) FROM fleet_migrations").fetchone()
        return int(row[0]) if row else 0

    # --- hosts -------------------------------------------------------------------------

    def register_host(
        self,
        host_id: str,
        url: str,
        *,
        labels: Mapping[str, str] | None = None,
        capacity: Capacity | None = None,
    ) -> int:
        """Register (or re-register) a host; returns its new epoch.

        Every registration bumps the epoch, so whatever an earlier incarnation of this host
        id still tries to write afterwards (a late heartbeat, a ship) changes nothing.
        """
        cap = capacity or Capacity()
        with _translated("register host"):
            row = self._conn.execute(
                """
                INSERT INTO hosts (host_id, url, epoch, state, labels, sessions,
                                   max_sessions, memory_total, memory_available)
                VALUES (%s, %s, 1, 'up', %s, %s, %s, %s, %s)
                ON CONFLICT (host_id) DO UPDATE SET
                    url = EXCLUDED.url, epoch = hosts.epoch + 1, state = 'up',
                    labels = EXCLUDED.labels, sessions = EXCLUDED.sessions,
                    max_sessions = EXCLUDED.max_sessions,
                    memory_total = EXCLUDED.memory_total,
                    memory_available = EXCLUDED.memory_available,
                    registered_at = now(), heartbeat_at = now(), down_reason = NULL
                RETURNING epoch
                """,
                (
                    host_id,
                    url,
                    json.dumps(dict(labels or {})),
                    cap.sessions,
                    cap.max_sessions,
                    cap.memory_total,
                    cap.memory_available,
                ),
            ).fetchone()
        assert row is not None  # INSERT ... RETURNING always returns the row
        return int(row[0])

    def heartbeat(self, host_id: str, epoch: int, capacity: Capacity | None = None) -> None:
        """Renew a host's heartbeat; raises :class:`HostSuperseded` if its epoch is stale.

        A draining host keeps beating (it is alive, it just takes no new sessions); a host
        marked down does not come back by beating: it must register again.
        """
        cap = capacity or Capacity()
        with _translated("heartbeat"):
            row = self._conn.execute(
                """
                UPDATE hosts SET heartbeat_at = now(), sessions = %s, max_sessions = %s,
                                 memory_total = %s, memory_available = %s
                WHERE host_id = %s AND epoch = %s AND state <> 'down'
                RETURNING epoch
                """,
                (
                    cap.sessions,
                    cap.max_sessions,
                    cap.memory_total,
                    cap.memory_available,
                    host_id,
                    epoch,
                ),
            ).fetchone()
        if row is None:
            raise HostSuperseded(
                f"host {host_id} epoch {epoch} is no longer current", host=host_id, epoch=epoch
            )

    def set_draining(self, host_id: str, epoch: int, draining: bool = True) -> None:
        """Stop (or resume) placing new sessions on this host; its sessions keep routing."""
        state = "draining" if draining else "up"
        with _translated("drain"):
            row = self._conn.execute(
                "UPDATE hosts SET state = %s WHERE host_id = %s AND epoch = %s"
                " AND state <> 'down' RETURNING 1",
                (state, host_id, epoch),
            ).fetchone()
        if row is None:
            raise HostSuperseded(
                f"host {host_id} epoch {epoch} is no longer current", host=host_id, epoch=epoch
            )

    def deregister_host(self, host_id: str, epoch: int, reason: str = "deregistered") -> bool:
        """A host leaving on purpose: marked down under its own epoch (no bump)."""
        with _translated("deregister host"):
            row = self._conn.execute(
                "UPDATE hosts SET state = 'down', down_reason = %s"
                " WHERE host_id = %s AND epoch = %s RETURNING 1",
                (reason, host_id, epoch),
            ).fetchone()
        return row is not None

    def fence_host(self, host_id: str, seen_epoch: int, reason: str) -> int | None:
        """Mark a host down and bump its epoch, if it still holds ``seen_epoch``.

        One compare-and-set: of several routers that saw the same stale host, exactly one
        gets the new epoch back; the others get ``None``. Nothing is signalled: whatever
        the fenced host still writes with its old epoch is refused by the index.
        """
        with _translated("fence host"):
            row = self._conn.execute(
                "UPDATE hosts SET state = 'down', epoch = epoch + 1, down_reason = %s"
                " WHERE host_id = %s AND epoch = %s RETURNING epoch",
                (reason, host_id, seen_epoch),
            ).fetchone()
        return int(row[0]) if row else None

    def hosts(self) -> list[HostRow]:
        with _translated("list hosts"), self._conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                "SELECT *, EXTRACT(EPOCH FROM now() - heartbeat_at)::float8 AS age"
                " FROM hosts ORDER BY host_id"
            ).fetchall()
        return [host_row(r) for r in rows]

    def host(self, host_id: str) -> HostRow | None:
        with _translated("read host"), self._conn.cursor(row_factory=dict_row) as cur:
            r = cur.execute(
                "SELECT *, EXTRACT(EPOCH FROM now() - heartbeat_at)::float8 AS age"
                " FROM hosts WHERE host_id = %s",
                (host_id,),
            ).fetchone()
        return host_row(r) if r else None

    # --- sessions ----------------------------------------------------------------------

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
        """The open session of (scope, agent, cwd, name), created on ``host_id`` if none.

        Returns ``(row, created)``. Racing callers get the same row and exactly one of
        them ``created=True`` (the partial unique index decides, not a lock here). A new
        row is only written while ``host_id`` is up with ``host_epoch``: placement on a
        host that was fenced or is draining in the meantime raises
        :class:`HostSuperseded`, and the caller places again.
        """
        own = ownership or Ownership()
        new_id = session_id or new_session_id()
        for _ in range(3):  # an open row closed between our insert and read: look again
            with _translated("ensure session"), self._conn.cursor(row_factory=dict_row) as cur:
                created = cur.execute(
                    """
                    INSERT INTO sessions (session_id, scope, agent, cwd, name, state,
                                          host_id, host_epoch, owner_session_id,
                                          spawned_by, parent_session_id, sandboxed)
                    SELECT %s, %s, %s, %s, %s, 'open', host_id, epoch, %s, %s, %s, %s
                    FROM hosts WHERE host_id = %s AND epoch = %s AND state = 'up'
                    ON CONFLICT (scope, agent, cwd, name) WHERE state = 'open' DO NOTHING
                    RETURNING *
                    """,
                    (
                        new_id,
                        scope,
                        agent,
                        cwd,
                        name,
                        own.owner_session_id,
                        own.spawned_by,
                        own.parent_session_id,
                        own.sandboxed,
                        host_id,
                        host_epoch,
                    ),
                ).fetchone()
                if created is not None:
                    return session_row(created), True
                existing = cur.execute(
                    "SELECT * FROM sessions WHERE scope = %s AND agent = %s AND cwd = %s"
                    " AND name = %s AND state = 'open'",
                    (scope, agent, cwd, name),
                ).fetchone()
            if existing is not None:
                return session_row(existing), False
            host = self.host(host_id)
            if host is None or host.epoch != host_epoch or host.state != "up":
                raise HostSuperseded(
                    f"host {host_id} epoch {host_epoch} can take no new session"
                    f" (it is {'unknown' if host is None else host.state},"
                    f" epoch {None if host is None else host.epoch})",
                    host=host_id,
                    epoch=host_epoch,
                )
        raise FleetError("the session kept changing while it was ensured; try again")

    def rehome_session(
        self, session_id: str, host_id: str, host_epoch: int, *, force: bool = False
    ) -> SessionRow:
        """Move an open session whose host is down to ``host_id``, in one transaction:
        the old row ends ``lost`` naming its successor, and a new row of the same identity
        and ownership, naming where it came from, is created on ``host_id`` (which must be
        up with ``host_epoch``). Refused while the old host is not down (fenced or
        deregistered): a host whose storage may still be written keeps its sessions.
        ``force`` re-homes a session of a host that is up (the operator's explicit call).
        """
        with (
            _translated("rehome session"),
            self._conn.transaction(),
            self._conn.cursor(row_factory=dict_row) as cur,
        ):
            old = cur.execute(
                "SELECT s.*, h.state AS host_state FROM sessions s"
                " JOIN hosts h ON h.host_id = s.host_id"
                " WHERE s.session_id = %s FOR UPDATE OF s",
                (session_id,),
            ).fetchone()
            if old is None or old["state"] != "open":
                raise FleetError(
                    f"session {session_id} is not open in the fleet", session_id=session_id
                )
            if old["host_state"] != "down" and not force:
                raise FleetError(
                    f"session {session_id}'s host {old['host_id']} is not down: it keeps"
                    " its sessions (close the session, or fence the host first)",
                    session_id=session_id,
                    host=old["host_id"],
                )
            new_id = new_session_id()
            cur.execute(
                "UPDATE sessions SET state = 'lost', rehomed_to = %s, closed_at = now(),"
                " updated_at = now(), end_reason = %s WHERE session_id = %s",
                (new_id, f"re-homed to {host_id} as {new_id}", session_id),
            )
            created = cur.execute(
                """
                INSERT INTO sessions (session_id, scope, agent, cwd, name, state, host_id,
                                      host_epoch, owner_session_id, spawned_by,
                                      parent_session_id, sandboxed, restarted_from)
                SELECT %s, %s, %s, %s, %s, 'open', host_id, epoch, %s, %s, %s, %s, %s
                FROM hosts WHERE host_id = %s AND epoch = %s AND state = 'up'
                RETURNING *
                """,
                (
                    new_id,
                    old["scope"],
                    old["agent"],
                    old["cwd"],
                    old["name"],
                    old["owner_session_id"],
                    old["spawned_by"],
                    old["parent_session_id"],
                    old["sandboxed"],
                    session_id,
                    host_id,
                    host_epoch,
                ),
            ).fetchone()
            if created is None:
                raise HostSuperseded(
                    f"host {host_id} epoch {host_epoch} can take no new session",
                    host=host_id,
                    epoch=host_epoch,
                )
        return session_row(created)

    def undo_rehome(self, old_id: str, new_id: str) -> bool:
        """Take back a re-home whose new host did not create the session: the new row is
        closed and the old one open again, as before the move."""
        with _translated("undo rehome"), self._conn.transaction():
            closed = self._conn.execute(
                "UPDATE sessions SET state = 'closed', closed_at = now(), updated_at = now(),"
                " end_reason = 'its host did not create it; the re-home was undone'"
                " WHERE session_id = %s AND restarted_from = %s AND state = 'open' RETURNING 1",
                (new_id, old_id),
            ).fetchone()
            if closed is None:
                return False
            self._conn.execute(
                "UPDATE sessions SET state = 'open', rehomed_to = NULL, closed_at = NULL,"
                " end_reason = NULL, updated_at = now()"
                " WHERE session_id = %s AND rehomed_to = %s AND state = 'lost'",
                (old_id, new_id),
            )
        return True

    def bind_local_key(self, session_id: str, host_id: str, host_epoch: int, key: str) -> None:
        """Record the host's own key for a session it now owns (epoch-checked)."""
        with _translated("bind session"):
            row = self._conn.execute(
                "UPDATE sessions SET local_key = %s, updated_at = now()"
                " WHERE session_id = %s AND host_id = %s AND host_epoch = %s RETURNING 1",
                (key, session_id, host_id, host_epoch),
            ).fetchone()
        if row is None:
            raise HostSuperseded(
                f"session {session_id} is not owned by {host_id} epoch {host_epoch}",
                session_id=session_id,
                host=host_id,
            )

    def adopt_sessions(self, host_id: str, host_epoch: int) -> list[SessionRow]:
        """A host that registered again takes back its open sessions under its new epoch.

        Returns the sessions it still owns. A session of its local state that is not in
        the list was superseded while it was away (re-homed, or ended): the host closes it
        locally, by its own proof, and never serves it again.
        """
        with _translated("adopt sessions"), self._conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                """
                UPDATE sessions s SET host_epoch = h.epoch, updated_at = now()
                FROM hosts h
                WHERE s.host_id = %s AND s.state = 'open' AND h.host_id = s.host_id
                  AND h.epoch = %s AND h.state <> 'down'
                RETURNING s.*
                """,
                (host_id, host_epoch),
            ).fetchall()
        return [session_row(r) for r in rows]

    def session(self, session_id: str) -> SessionRow | None:
        with _translated("read session"), self._conn.cursor(row_factory=dict_row) as cur:
            r = cur.execute(
                "SELECT * FROM sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
        return session_row(r) if r else None

    def sessions(
        self, *, host_id: str | None = None, state: str | None = "open"
    ) -> list[SessionRow]:
        clauses, args = [], []
        if host_id is not None:
            clauses.append("host_id = %s")
            args.append(host_id)
        if state is not None:
            clauses.append("state = %s")
            args.append(state)
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        with _translated("list sessions"), self._conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                f"SELECT * FROM sessions{where} ORDER BY created_at, session_id",  # noqa: S608 -- fixed clauses, values bound
                args,
            ).fetchall()
        return [session_row(r) for r in rows]

    def children(self, session_id: str) -> list[SessionRow]:
        """The open sessions spawned by ``session_id`` (its ``parent_session_id``)."""
        with _translated("list children"), self._conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                "SELECT * FROM sessions WHERE parent_session_id = %s AND state = 'open'"
                " ORDER BY created_at",
                (session_id,),
            ).fetchall()
        return [session_row(r) for r in rows]

    def end_session(self, session_id: str, state: str, reason: str) -> bool:
        """Close an open session (``closed``) or mark it ``lost``; False if it was not open."""
        if state not in ("closed", "lost"):
            raise ValueError(f"a session ends closed or lost, not {state!r}")
        with _translated("end session"):
            row = self._conn.execute(
                "UPDATE sessions SET state = %s, end_reason = %s, closed_at = now(),"
                " updated_at = now() WHERE session_id = %s AND state = 'open' RETURNING 1",
                (state, reason, session_id),
            ).fetchone()
        return row is not None

    # --- ACP servers (over HTTP, through routers) -------------------------------------

    def acp_server_host(self, scope: str, server_id: str) -> str | None:
        """The host that serves ACP server ``server_id``, if one was placed."""
        with _translated("read ACP server"):
            row = self._conn.execute(
                "SELECT host_id FROM acp_servers WHERE scope = %s AND server_id = %s",
                (scope, server_id),
            ).fetchone()
        return None if row is None else str(row[0])

    def place_acp_server(self, scope: str, server_id: str, host_id: str, host_epoch: int) -> str:
        """The host of ``server_id``: ``host_id`` if this call placed it there, else the
        one an earlier (or racing) caller placed it on. Placing needs ``host_id`` up
        with ``host_epoch``, as a new session does (:class:`HostSuperseded` otherwise)."""
        with _translated("place ACP server"):
            self._conn.execute(
                "INSERT INTO acp_servers (scope, server_id, host_id, host_epoch)"
                " SELECT %s, %s, host_id, epoch FROM hosts"
                " WHERE host_id = %s AND epoch = %s AND state = 'up'"
                " ON CONFLICT (scope, server_id) DO NOTHING",
                (scope, server_id, host_id, host_epoch),
            )
        placed = self.acp_server_host(scope, server_id)
        if placed is None:
            raise HostSuperseded(
                f"host {host_id} epoch {host_epoch} can take no new ACP server",
                host=host_id,
                epoch=host_epoch,
            )
        return placed

    # --- shipped journal ---------------------------------------------------------------

    def ship(
        self, session_id: str, host_id: str, host_epoch: int, chunk: ShippedChunk
    ) -> ShipResult:
        """Store one committed journal batch off-host; returns the new ``durableSeq``.

        Idempotent by (session, first seq): shipping the same chunk again stores nothing
        and answers the current ``durableSeq``. Only the host and epoch that own the
        session may ship; a chunk that would go backwards (overlapping what is durable
        without being the same chunk) is refused.
        """
        with _translated("ship journal"), self._conn.transaction():
            # The session row is locked for the ship; the host row is share-locked so a
            # fence cannot commit between this check and the insert.
            owner = self._conn.execute(
                "SELECT s.host_id, s.host_epoch, s.durable_seq, h.epoch, h.state"
                " FROM sessions s JOIN hosts h ON h.host_id = s.host_id"
                " WHERE s.session_id = %s FOR UPDATE OF s FOR SHARE OF h",
                (session_id,),
            ).fetchone()
            if (
                owner is None
                or owner[0] != host_id
                or int(owner[1]) != host_epoch
                or int(owner[3]) != host_epoch
                or owner[4] == "down"
            ):
                raise HostSuperseded(
                    f"session {session_id} is not owned by {host_id} epoch {host_epoch}",
                    session_id=session_id,
                    host=host_id,
                )
            durable = int(owner[2])
            same = self._conn.execute(
                "SELECT last_seq FROM journal_chunks WHERE session_id = %s AND first_seq = %s",
                (session_id, chunk.first_seq),
            ).fetchone()
            if same is not None:
                if int(same[0]) != chunk.last_seq:
                    raise FleetError(
                        f"a different chunk at seq {chunk.first_seq} was already shipped",
                        session_id=session_id,
                    )
                return ShipResult(durable_seq=durable, stored=False)
            if chunk.first_seq <= durable:
                raise FleetError(
                    f"chunk {chunk.first_seq}-{chunk.last_seq} overlaps what is durable"
                    f" (through {durable})",
                    session_id=session_id,
                )
            self._conn.execute(
                "INSERT INTO journal_chunks (session_id, first_seq, last_seq, entries,"
                " host_id, host_epoch, data) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (
                    session_id,
                    chunk.first_seq,
                    chunk.last_seq,
                    chunk.entries,
                    host_id,
                    host_epoch,
                    chunk.data,
                ),
            )
            self._conn.execute(
                "UPDATE sessions SET durable_seq = %s, updated_at = now() WHERE session_id = %s",
                (chunk.last_seq, session_id),
            )
        return ShipResult(durable_seq=chunk.last_seq, stored=True)

    def shipped(
        self, session_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[ShippedChunk]:
        """Shipped chunks holding seqs after ``after_seq``, in seq order."""
        with _translated("read shipped journal"):
            rows = self._conn.execute(
                "SELECT first_seq, last_seq, entries, data FROM journal_chunks"
                " WHERE session_id = %s AND last_seq > %s ORDER BY first_seq LIMIT %s",
                (session_id, after_seq, limit),
            ).fetchall()
        return [ShippedChunk(int(a), int(b), int(c), bytes(d)) for a, b, c, d in rows]


__all__: Sequence[str] = (
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
