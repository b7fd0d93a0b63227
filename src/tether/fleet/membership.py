"""A host's membership of the fleet: register, beat, report capacity, drain, leave.

One :class:`HostMembership` per ``tether serve --fleet-index``. Registration happens at
start, synchronously, so a host that cannot reach the index says so before it serves.
Then a thread beats every ``interval_s`` (1 s by default) with the host's capacity.

What each outcome of a beat means:

- the beat lands: the host is alive for the routers (its age, by the index's clock,
  resets);
- the index cannot be reached: the host keeps serving the sessions it owns (ownership
  is local and needs no index) and reports ``indexUp: false``; it beats again next
  interval, over a new connection;
- the epoch is stale (:class:`HostSuperseded`): a router fenced this host while it was
  frozen or partitioned, or another process registered the same host id. The host stops
  beating, and ``on_superseded`` runs once -- the host closes its sessions locally, by its
  own proof. It never re-registers by itself: that would undo the fence.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.errors import HostSuperseded, IndexUnavailable
from tether.fleet.index import Capacity, FleetIndex

DEFAULT_INTERVAL_S = 1.0
DEFAULT_TTL_S = 5.0


def memory_capacity() -> tuple[int | None, int | None]:
    """(MemTotal, MemAvailable) in bytes from ``/proc/meminfo``; Nones where unreadable."""
    total = available = None
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemTotal:"):
                    total = int(line.split()[1]) * 1024
                elif line.startswith(b"MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None, None
    return total, available


@dataclass(frozen=True, slots=True)
class MembershipStatus:
    host_id: str
    epoch: int
    index_up: bool
    superseded: bool
    draining: bool
    last_beat_ago_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "hostId": self.host_id,
            "epoch": self.epoch,
            "indexUp": self.index_up,
            "superseded": self.superseded,
            "draining": self.draining,
            "lastBeatAgoS": None
            if self.last_beat_ago_s is None
            else round(self.last_beat_ago_s, 3),
        }


class HostMembership:
    def __init__(
        self,
        connect: Callable[[], FleetIndex],
        host_id: str,
        url: str,
        *,
        labels: Mapping[str, str] | None = None,
        sessions: Callable[[], int] = lambda: 0,
        max_sessions: int | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        on_superseded: Callable[[], None] = lambda: None,
    ) -> None:
        self._connect = connect
        self.host_id = host_id
        self.url = url
        self._labels = dict(labels or {})
        self._sessions = sessions
        self._max_sessions = max_sessions
        self._interval = interval_s
        self._on_superseded = on_superseded
        self._index: FleetIndex | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one user of the connection at a time
        self.epoch = 0
        self._index_up = False
        self._superseded = False
        self._draining = False
        self._last_beat: float | None = None

    # --- life --------------------------------------------------------------------------

    def start(self) -> int:
        """Register (raises :class:`IndexUnavailable` if the index cannot be reached) and
        start beating; returns the epoch this host now holds."""
        with self._lock:
            self._index = self._connect()
            self.epoch = self._index.register_host(
                self.host_id, self.url, labels=self._labels, capacity=self.capacity()
            )
            self._index_up = True
            self._last_beat = time.monotonic()
        self._thread = threading.Thread(
            target=self._beat_loop, name=f"fleet-beat-{self.host_id}", daemon=True
        )
        self._thread.start()
        return self.epoch

    def stop(self, *, deregister: bool = True, reason: str = "stopped") -> None:
        """Stop beating; with ``deregister``, mark this host down under its own epoch so
        routers stop sending to it at once instead of after the TTL."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 3 * self._interval))
        with self._lock:
            if deregister and not self._superseded and self._index is not None:
                try:
                    self._index.deregister_host(self.host_id, self.epoch, reason)
                except (IndexUnavailable, HostSuperseded):
                    pass  # routers will see the heartbeat age instead
            if self._index is not None:
                self._index.close()
                self._index = None

    def drain(self, draining: bool = True) -> None:
        """Take no new sessions (the router places elsewhere at once); keep serving."""
        with self._lock:
            index = self._ensure_index()
            index.set_draining(self.host_id, self.epoch, draining)
            self._draining = draining

    # --- state -------------------------------------------------------------------------

    def capacity(self) -> Capacity:
        total, available = memory_capacity()
        return Capacity(
            sessions=self._sessions(),
            max_sessions=self._max_sessions,
            memory_total=total,
            memory_available=available,
        )

    def status(self) -> MembershipStatus:
        last = self._last_beat
        return MembershipStatus(
            host_id=self.host_id,
            epoch=self.epoch,
            index_up=self._index_up,
            superseded=self._superseded,
            draining=self._draining,
            last_beat_ago_s=None if last is None else time.monotonic() - last,
        )

    # --- the beat ----------------------------------------------------------------------

    def _ensure_index(self) -> FleetIndex:
        if self._index is None:
            self._index = self._connect()
        return self._index

    def beat_once(self) -> bool:
        """One heartbeat; False once this host is superseded (and the callback has run)."""
        if self._superseded:
            return False
        try:
            with self._lock:
                index = self._ensure_index()
                index.heartbeat(self.host_id, self.epoch, self.capacity())
            self._index_up = True
            self._last_beat = time.monotonic()
            return True
        except IndexUnavailable:
            self._index_up = False
            with self._lock:
                if self._index is not None:
                    self._index.close()
                    self._index = None  # reconnect next beat
            return True
        except HostSuperseded:
            self._superseded = True
            self._on_superseded()
            return False

    def _beat_loop(self) -> None:
        while not self._stop.wait(self._interval):
            if not self.beat_once():
                return


def host_id_default() -> str:
    """A host id when none is given: the node name (a StatefulSet pod's name)."""
    return os.uname().nodename
