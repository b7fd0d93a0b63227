"""The fleet index's shipped journal chunks, as functions over one index connection
(:mod:`tether.fleet.index_sql`).

Shipping is idempotent and ordered: a chunk is keyed (session, first seq); a retry of
a shipped chunk is a no-op; ``durable_seq`` only moves forward, and only for the host
and epoch that own the session.
"""

from __future__ import annotations

from tether.errors import FleetError, HostSuperseded
from tether.fleet.index_sql import Conn, translated
from tether.fleet.rows import ShippedChunk, ShipResult


def ship(
    conn: Conn, session_id: str, host_id: str, host_epoch: int, chunk: ShippedChunk
) -> ShipResult:
    """Store one committed journal batch off-host; returns the new ``durableSeq``.

    Idempotent by (session, first seq): shipping the same chunk again stores nothing
    and answers the current ``durableSeq``. Only the host and epoch that own the
    session may ship; a chunk that would go backwards (overlapping what is durable
    without being the same chunk) is refused.
    """
    with translated("ship journal"), conn.transaction():
        # The session row is locked for the ship; the host row is share-locked so a
        # fence cannot commit between this check and the insert.
        owner = conn.execute(
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
        same = conn.execute(
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
        conn.execute(
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
        conn.execute(
            "UPDATE sessions SET durable_seq = %s, updated_at = now() WHERE session_id = %s",
            (chunk.last_seq, session_id),
        )
    return ShipResult(durable_seq=chunk.last_seq, stored=True)


def shipped(
    conn: Conn, session_id: str, *, after_seq: int = 0, limit: int = 1000
) -> list[ShippedChunk]:
    """Shipped chunks holding seqs after ``after_seq``, in seq order."""
    with translated("read shipped journal"):
        rows = conn.execute(
            "SELECT first_seq, last_seq, entries, data FROM journal_chunks"
            " WHERE session_id = %s AND last_seq > %s ORDER BY first_seq LIMIT %s",
            (session_id, after_seq, limit),
        ).fetchall()
    return [ShippedChunk(int(a), int(b), int(c), bytes(d)) for a, b, c, d in rows]
