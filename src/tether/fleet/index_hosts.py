"""The fleet index's hosts (register, beat, drain, leave, fence, read) and the hosts
of ACP servers, as functions over one index connection (:mod:`tether.fleet.index_sql`).

Epochs fence hosts: registering bumps the epoch; every write a host makes carries the
epoch it holds and changes nothing once a newer one exists. A fence is one
compare-and-set on the epoch. Heartbeat ages are computed by PostgreSQL's clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from psycopg.rows import dict_row

from tether.errors import HostSuperseded
from tether.fleet.index_sql import Conn, translated
from tether.fleet.rows import Capacity, HostRow, host_row


def register_host(
    conn: Conn,
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
    with translated("register host"):
        row = conn.execute(
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


def heartbeat(conn: Conn, host_id: str, epoch: int, capacity: Capacity | None = None) -> None:
    """Renew a host's heartbeat; raises :class:`HostSuperseded` if its epoch is stale.

    A draining host keeps beating (it is alive, it just takes no new sessions); a host
    marked down does not come back by beating: it must register again.
    """
    cap = capacity or Capacity()
    with translated("heartbeat"):
        row = conn.execute(
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


def set_draining(conn: Conn, host_id: str, epoch: int, draining: bool = True) -> None:
    """Stop (or resume) placing new sessions on this host; its sessions keep routing."""
    state = "draining" if draining else "up"
    with translated("drain"):
        row = conn.execute(
            "UPDATE hosts SET state = %s WHERE host_id = %s AND epoch = %s"
            " AND state <> 'down' RETURNING 1",
            (state, host_id, epoch),
        ).fetchone()
    if row is None:
        raise HostSuperseded(
            f"host {host_id} epoch {epoch} is no longer current", host=host_id, epoch=epoch
        )


def deregister_host(conn: Conn, host_id: str, epoch: int, reason: str = "deregistered") -> bool:
    """A host leaving on purpose: marked down under its own epoch (no bump)."""
    with translated("deregister host"):
        row = conn.execute(
            "UPDATE hosts SET state = 'down', down_reason = %s"
            " WHERE host_id = %s AND epoch = %s RETURNING 1",
            (reason, host_id, epoch),
        ).fetchone()
    return row is not None


def fence_host(conn: Conn, host_id: str, seen_epoch: int, reason: str) -> int | None:
    """Mark a host down and bump its epoch, if it still holds ``seen_epoch``.

    One compare-and-set: of several routers that saw the same stale host, exactly one
    gets the new epoch back; the others get ``None``. Nothing is signalled: whatever
    the fenced host still writes with its old epoch is refused by the index.
    """
    with translated("fence host"):
        row = conn.execute(
            "UPDATE hosts SET state = 'down', epoch = epoch + 1, down_reason = %s"
            " WHERE host_id = %s AND epoch = %s RETURNING epoch",
            (reason, host_id, seen_epoch),
        ).fetchone()
    return int(row[0]) if row else None


def hosts(conn: Conn) -> list[HostRow]:
    with translated("list hosts"), conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT *, EXTRACT(EPOCH FROM now() - heartbeat_at)::float8 AS age"
            " FROM hosts ORDER BY host_id"
        ).fetchall()
    return [host_row(r) for r in rows]


def host(conn: Conn, host_id: str) -> HostRow | None:
    with translated("read host"), conn.cursor(row_factory=dict_row) as cur:
        r = cur.execute(
            "SELECT *, EXTRACT(EPOCH FROM now() - heartbeat_at)::float8 AS age"
            " FROM hosts WHERE host_id = %s",
            (host_id,),
        ).fetchone()
    return host_row(r) if r else None


def acp_server_host(conn: Conn, scope: str, server_id: str) -> str | None:
    """The host that serves ACP server ``server_id``, if one was placed."""
    with translated("read ACP server"):
        row = conn.execute(
            "SELECT host_id FROM acp_servers WHERE scope = %s AND server_id = %s",
            (scope, server_id),
        ).fetchone()
    return None if row is None else str(row[0])


def place_acp_server(conn: Conn, scope: str, server_id: str, host_id: str, host_epoch: int) -> str:
    """The host of ``server_id``: ``host_id`` if this call placed it there, else the
    one an earlier (or racing) caller placed it on. Placing needs ``host_id`` up
    with ``host_epoch``, as a new session does (:class:`HostSuperseded` otherwise)."""
    with translated("place ACP server"):
        conn.execute(
            "INSERT INTO acp_servers (scope, server_id, host_id, host_epoch)"
            " SELECT %s, %s, host_id, epoch FROM hosts"
            " WHERE host_id = %s AND epoch = %s AND state = 'up'"
            " ON CONFLICT (scope, server_id) DO NOTHING",
            (scope, server_id, host_id, host_epoch),
        )
    placed = acp_server_host(conn, scope, server_id)
    if placed is None:
        raise HostSuperseded(
            f"host {host_id} epoch {host_epoch} can take no new ACP server",
            host=host_id,
            epoch=host_epoch,
        )
    return placed
