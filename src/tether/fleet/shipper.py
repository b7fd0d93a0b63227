"""Shipping a host's committed journal entries to the fleet index.

The journal's one writer on a host is each session's owner; the shipper only reads what
is committed (``tether.state.journal.store.read``) and copies it off-host, so history,
transcripts and replay of a session work while its host is down. It never writes the
local journal and never slows an owner.

The cursor of each session is the index's ``durableSeq``, read back whenever anything
goes wrong: a ship whose answer was lost is found already stored, and shipping resumes
after it. Chunks are runs of consecutive stored entries (at most ``max_entries`` lines
or ``max_bytes``), so one ship of a long turn is a few rows, not one per entry. A seq
hole in the local journal (an owner killed mid-turn skips to its next reservation
block; the journal says so in its own entry) is shipped as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tether.errors import FleetError, HostSuperseded
from tether.fleet.index import FleetIndex, ShippedChunk

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.state.registry import JournalReads

DEFAULT_MAX_ENTRIES = 5_000
DEFAULT_MAX_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class Shipped:
    session_id: str
    durable_seq: int
    chunks: int
    entries: int


def chunk_lines(
    rows: Iterable[tuple[int, bytes]], *, max_entries: int, max_bytes: int
) -> list[ShippedChunk]:
    """Cut ``(seq, line)`` rows, in seq order, into chunks of at most ``max_entries``
    lines and about ``max_bytes`` (a single larger line is a chunk of its own)."""
    out: list[ShippedChunk] = []
    lines: list[bytes] = []
    first = last = size = 0
    for seq, line in rows:
        if lines and (len(lines) >= max_entries or size + len(line) + 1 > max_bytes):
            out.append(ShippedChunk(first, last, len(lines), b"\n".join(lines) + b"\n"))
            lines, size = [], 0
        if not lines:
            first = seq
        lines.append(line)
        last = seq
        size += len(line) + 1
    if lines:
        out.append(ShippedChunk(first, last, len(lines), b"\n".join(lines) + b"\n"))
    return out


class JournalShipper:
    """Ships the journals of the sessions this host owns, one pass at a time."""

    def __init__(
        self,
        index: FleetIndex,
        journal: JournalReads,
        host_id: str,
        epoch: Callable[[], int],
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._index = index
        self._journal = journal  # the state layer's journal reads
        self._host_id = host_id
        self._epoch = epoch
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._durable: dict[str, int] = {}

    def durable_seq(self, session_id: str) -> int | None:
        return self._durable.get(session_id)

    def _resync(self, session_id: str) -> int:
        row = self._index.session(session_id)
        if row is None:
            raise FleetError(f"session {session_id} is not in the fleet index")
        self._durable[session_id] = row.durable_seq
        return row.durable_seq

    def ship_session(self, session_id: str, local_key: str) -> Shipped:
        """Ship what is committed locally past the index's ``durableSeq``.

        Raises :class:`HostSuperseded` when this host no longer owns the session.
        """
        durable = self._durable.get(session_id)
        if durable is None:
            durable = self._resync(session_id)
        shipped_chunks = shipped_entries = 0
        while True:
            rows = self._journal.journal_read(local_key, durable + 1, limit=self._max_entries)
            if not rows:
                break
            for chunk in chunk_lines(
                rows, max_entries=self._max_entries, max_bytes=self._max_bytes
            ):
                try:
                    result = self._index.ship(session_id, self._host_id, self._epoch(), chunk)
                except HostSuperseded:
                    self._durable.pop(session_id, None)
                    raise
                except FleetError:
                    # An overlap or a different chunk: our cursor was stale (a ship
                    # whose answer was lost). Start again from the index's word -- which
                    # must have moved past where we were, or we would loop on it.
                    before = durable
                    durable = self._resync(session_id)
                    if durable <= before:
                        raise
                    break
                durable = result.durable_seq
                self._durable[session_id] = durable
                if result.stored:
                    shipped_chunks += 1
                    shipped_entries += chunk.entries
            else:
                if len(rows) < self._max_entries:
                    break
        return Shipped(session_id, durable, shipped_chunks, shipped_entries)
