"""What a router knows of hosts and sessions: refreshed from the index by a thread, read
from memory on every request, so routing goes on from the cache while PostgreSQL is down.

While the index cannot be read, what the router last read of it stands: a cached
session's host is used however old the entry (a session never changes host: a re-home
makes a new id), and hosts' heartbeat ages stop growing at the moment the index was
lost -- their beats cannot land either, so an age measured across the outage would call
every host lost. A host that dies meanwhile is still seen at once (refused connections)
and a frozen one by its first-byte timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tether.errors import FleetError
from tether.fleet.index import FleetIndex
from tether.fleet.rows import HostRow, SessionRow, ShippedChunk

SESSION_CACHE_S = 5.0
ACP_CACHE_MAX = 65_536  # ACP server ids remembered (their host never changes)


class HostTable:
    """What the router knows of hosts and sessions: refreshed from the index, read from
    memory on every request."""

    def __init__(self, connect: Callable[[], FleetIndex], refresh_s: float) -> None:
        self._connect = connect
        self._refresh_s = refresh_s
        self._hosts: dict[str, HostRow] = {}
        self._refreshed_at = 0.0
        self._index_lost_at: float | None = None  # since when the index cannot be read
        self._sessions: dict[str, tuple[str, float]] = {}  # id -> (host id, cached at)
        self._acp: dict[str, str] = {}  # ACP server id -> host id (a row never changes)
        self._index: FleetIndex | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.index_up = False
        # Hosts that refused a connection (monotonic time): a dead process is known at
        # once, not a heartbeat TTL later. Cleared by the next answer, after the TTL, or
        # when the host registers again (another process, at its own address).
        self._refused: dict[str, float] = {}
        self._refused_at: dict[str, tuple[str, int]] = {}  # host id -> (url, epoch) refused
        self._refused_why: dict[str, str] = {}
        self.refused_ttl_s = 5.0

    def start(self) -> None:
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="fleet-hosts", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None

    def _with_index(self, fn: Callable[[FleetIndex], Any]) -> Any:
        with self._lock:
            try:
                if self._index is None:
                    self._index = self._connect()
                result = fn(self._index)
                self.index_up = True
                self._index_lost_at = None
                return result
            except FleetError:
                self.index_up = False
                if self._index_lost_at is None:
                    self._index_lost_at = time.monotonic()
                if self._index is not None:
                    self._index.close()
                    self._index = None
                raise

    def refresh(self) -> None:
        try:
            rows = self._with_index(lambda ix: ix.hosts())
        except FleetError:
            return  # keep routing from what we have
        self._hosts = {h.host_id: h for h in rows}
        self._refreshed_at = time.monotonic()

    def _loop(self) -> None:
        while not self._stop.wait(self._refresh_s):
            self.refresh()

    def mark_refused(self, host: HostRow, why: str = "") -> None:
        """``host`` (the row we connected by) refused a connection; remembered for the
        TTL, and only for that registration of the host (its url and epoch)."""
        self._refused[host.host_id] = time.monotonic()
        self._refused_why[host.host_id] = why
        self._refused_at[host.host_id] = (host.url, host.epoch)

    def mark_answered(self, host_id: str) -> None:
        if self._refused:
            self._refused.pop(host_id, None)

    def refused_why(self, host_id: str) -> str:
        """What the last refusal of ``host_id`` said (a TLS failure names its reason)."""
        return self._refused_why.get(host_id, "") if host_id in self._refused else ""

    def refused(self, host_id: str) -> float | None:
        """Seconds since ``host_id`` refused a connection, if it did within the TTL."""
        at = self._refused.get(host_id)
        if at is None:
            return None
        ago = time.monotonic() - at
        row = self._hosts.get(host_id)
        # A refusal by a host that registered again since (a drained host restarted; a
        # new epoch, most often a new address) was the old process's: the new one is
        # judged afresh. Kept, its sessions' reads came from the index -- behind the
        # live journal by up to a shipping interval -- while the host served them.
        again = row is not None and (row.url, row.epoch) != self._refused_at.get(host_id)
        if again or ago > self.refused_ttl_s:
            self._refused.pop(host_id, None)
            return None
        return ago

    def hosts(self) -> list[HostRow]:
        return list(self._hosts.values())

    def host(self, host_id: str) -> HostRow | None:
        return self._hosts.get(host_id)

    def age(self, host: HostRow) -> float:
        """The host's heartbeat age now; while the index is lost, as it was then."""
        lost = self._index_lost_at
        now = time.monotonic() if lost is None else max(lost, self._refreshed_at)
        return host.heartbeat_age_s + (now - self._refreshed_at)

    def cached_session_host(self, session_id: str) -> str | None:
        """The session's host from memory: an entry younger than ``SESSION_CACHE_S``,
        or any entry while the index cannot be read."""
        hit = self._sessions.get(session_id)
        if hit is not None and (not self.index_up or time.monotonic() - hit[1] < SESSION_CACHE_S):
            return hit[0]
        return None

    def lookup_session(self, session_id: str) -> str | None:
        """The owning host of an open session, from the index (blocking: run in a thread)."""
        row = self._with_index(lambda ix: ix.session(session_id))
        if row is None or row.state != "open":
            self._sessions.pop(session_id, None)
            return None
        self._sessions[session_id] = (row.host_id, time.monotonic())
        return str(row.host_id)

    def durable_seq(self, session_id: str) -> int | None:
        try:
            row = self._with_index(lambda ix: ix.session(session_id))
        except FleetError:
            return None
        return None if row is None else int(row.durable_seq)

    def forget_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def remember(self, session_id: str, host_id: str) -> None:
        self._sessions[session_id] = (host_id, time.monotonic())

    def cached_acp_host(self, server_id: str) -> str | None:
        return self._acp.get(server_id)

    def _remember_acp(self, server_id: str, host_id: str | None) -> str | None:
        if host_id is not None:
            if len(self._acp) >= ACP_CACHE_MAX:
                self._acp.pop(next(iter(self._acp)))  # the oldest: it is in the index
            self._acp[server_id] = host_id
        return host_id

    # Blocking calls on the index for the router's own routes (run them in a thread).

    def acp_server_host(self, scope: str, server_id: str) -> str | None:
        found = self._with_index(lambda ix: ix.acp_server_host(scope, server_id))
        return self._remember_acp(server_id, found)

    def place_acp_server(self, scope: str, server_id: str, host_id: str, epoch: int) -> str:
        placed: str = self._with_index(
            lambda ix: ix.place_acp_server(scope, server_id, host_id, epoch)
        )
        self._remember_acp(server_id, placed)
        return placed

    def list_sessions(self, state: str | None) -> list[SessionRow]:
        rows: list[SessionRow] = self._with_index(lambda ix: ix.sessions(state=state))
        return rows

    def children(self, session_id: str) -> list[SessionRow]:
        rows: list[SessionRow] = self._with_index(lambda ix: ix.children(session_id))
        return rows

    def session_row(self, session_id: str) -> SessionRow | None:
        row: SessionRow | None = self._with_index(lambda ix: ix.session(session_id))
        return row

    def ensure_session(self, **kwargs: Any) -> tuple[SessionRow, bool]:
        result: tuple[SessionRow, bool] = self._with_index(lambda ix: ix.ensure_session(**kwargs))
        return result

    def shipped(self, session_id: str) -> list[ShippedChunk]:
        """Every chunk of the session's journal its host shipped, in seq order."""
        out: list[ShippedChunk] = []
        after = 0
        while True:
            batch = self._shipped_after(session_id, after)
            out += batch
            if len(batch) < 1000:
                return out
            after = batch[-1].last_seq

    def _shipped_after(self, session_id: str, after: int) -> list[ShippedChunk]:
        batch: list[ShippedChunk] = self._with_index(
            lambda ix: ix.shipped(session_id, after_seq=after, limit=1000)
        )
        return batch

    def fence_host(self, host_id: str, seen_epoch: int, reason: str) -> int | None:
        fenced: int | None = self._with_index(lambda ix: ix.fence_host(host_id, seen_epoch, reason))
        self.refresh()
        return fenced

    def rehome_session(self, session_id: str, host_id: str, epoch: int, force: bool) -> SessionRow:
        row: SessionRow = self._with_index(
            lambda ix: ix.rehome_session(session_id, host_id, epoch, force=force)
        )
        self.forget_session(session_id)
        return row

    def undo_rehome(self, old_id: str, new_id: str) -> None:
        self._with_index(lambda ix: ix.undo_rehome(old_id, new_id))
        self.forget_session(new_id)

    def end_session(self, session_id: str, reason: str) -> None:
        self._with_index(lambda ix: ix.end_session(session_id, "closed", reason))
        self.forget_session(session_id)
