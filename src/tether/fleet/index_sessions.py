"""The fleet index's sessions (ensure, re-home, bind, adopt, read, end), as functions
over one index connection (:mod:`tether.fleet.index_sql`).

``ensure`` is idempotent fleet-wide: a partial unique index over open sessions'
(scope, agent, cwd, name) means racing creators insert one row; the losers read it.
A new row is only written on a host that is up with the epoch the caller holds.
"""

from __future__ import annotations

from psycopg.rows import dict_row

from tether.errors import FleetError, HostSuperseded
from tether.fleet import index_hosts
from tether.fleet.index_sql import Conn, new_session_id, translated
from tether.fleet.rows import Ownership, SessionRow, session_row


def ensure_session(
    conn: Conn,
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
        with translated("ensure session"), conn.cursor(row_factory=dict_row) as cur:
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
        host = index_hosts.host(conn, host_id)
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
    conn: Conn, session_id: str, host_id: str, host_epoch: int, *, force: bool = False
) -> SessionRow:
    """Move an open session whose host is down to ``host_id``, in one transaction:
    the old row ends ``lost`` naming its successor, and a new row of the same identity
    and ownership, naming where it came from, is created on ``host_id`` (which must be
    up with ``host_epoch``). Refused while the old host is not down (fenced or
    deregistered): a host whose storage may still be written keeps its sessions.
    ``force`` re-homes a session of a host that is up (the operator's explicit call).
    """
    with (
        translated("rehome session"),
        conn.transaction(),
        conn.cursor(row_factory=dict_row) as cur,
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


def undo_rehome(conn: Conn, old_id: str, new_id: str) -> bool:
    """Take back a re-home whose new host did not create the session: the new row is
    closed and the old one open again, as before the move."""
    with translated("undo rehome"), conn.transaction():
        closed = conn.execute(
            "UPDATE sessions SET state = 'closed', closed_at = now(), updated_at = now(),"
            " end_reason = 'its host did not create it; the re-home was undone'"
            " WHERE session_id = %s AND restarted_from = %s AND state = 'open' RETURNING 1",
            (new_id, old_id),
        ).fetchone()
        if closed is None:
            return False
        conn.execute(
            "UPDATE sessions SET state = 'open', rehomed_to = NULL, closed_at = NULL,"
            " end_reason = NULL, updated_at = now()"
            " WHERE session_id = %s AND rehomed_to = %s AND state = 'lost'",
            (old_id, new_id),
        )
    return True


def bind_local_key(conn: Conn, session_id: str, host_id: str, host_epoch: int, key: str) -> None:
    """Record the host's own key for a session it now owns (epoch-checked)."""
    with translated("bind session"):
        row = conn.execute(
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


def adopt_sessions(conn: Conn, host_id: str, host_epoch: int) -> list[SessionRow]:
    """A host that registered again takes back its open sessions under its new epoch.

    Returns the sessions it still owns. A session of its local state that is not in
    the list was superseded while it was away (re-homed, or ended): the host closes it
    locally, by its own proof, and never serves it again.
    """
    with translated("adopt sessions"), conn.cursor(row_factory=dict_row) as cur:
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


def session(conn: Conn, session_id: str) -> SessionRow | None:
    with translated("read session"), conn.cursor(row_factory=dict_row) as cur:
        r = cur.execute("SELECT * FROM sessions WHERE session_id = %s", (session_id,)).fetchone()
    return session_row(r) if r else None


def sessions(
    conn: Conn, *, host_id: str | None = None, state: str | None = "open"
) -> list[SessionRow]:
    clauses, args = [], []
    if host_id is not None:
        clauses.append("host_id = %s")
        args.append(host_id)
    if state is not None:
        clauses.append("state = %s")
        args.append(state)
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    with translated("list sessions"), conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            f"SELECT * FROM sessions{where} ORDER BY created_at, session_id",  # noqa: S608 -- fixed clauses, values bound
            args,
        ).fetchall()
    return [session_row(r) for r in rows]


def children(conn: Conn, session_id: str) -> list[SessionRow]:
    """The open sessions spawned by ``session_id`` (its ``parent_session_id``)."""
    with translated("list children"), conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT * FROM sessions WHERE parent_session_id = %s AND state = 'open'"
            " ORDER BY created_at",
            (session_id,),
        ).fetchall()
    return [session_row(r) for r in rows]


def end_session(conn: Conn, session_id: str, state: str, reason: str) -> bool:
    """Close an open session (``closed``) or mark it ``lost``; False if it was not open."""
    if state not in ("closed", "lost"):
        raise ValueError(f"a session ends closed or lost, not {state!r}")
    with translated("end session"):
        row = conn.execute(
            "UPDATE sessions SET state = %s, end_reason = %s, closed_at = now(),"
            " updated_at = now() WHERE session_id = %s AND state = 'open' RETURNING 1",
            (state, reason, session_id),
        ).fetchone()
    return row is not None
