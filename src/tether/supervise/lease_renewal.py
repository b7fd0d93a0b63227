"""Lease liveness: every supervisor renews the leases it holds on a fixed interval.

Theory of operation
-------------------
Seed 003 ("Lease and Ownership Rules"): only one supervisor may hold a run's lease;
the holder renews ``lease_expires_at`` by a heartbeat on a fixed interval; another
supervisor may steal the lease only after it expired. Output alone is no heartbeat --
a silent agent is not a dead supervisor -- so the renewal has its own clock.

The clock is a thread, not the event loop: the owner's loop runs work that can block
it for a while (a reconcile's grace waits, a slow disk under SQLite), and a lease that
lapses because its holder was *busy* would hand a live run to a reaper. The thread
does nothing but one small UPDATE per interval on its own database connection (a
``Registry`` is not shared between threads), so nothing a supervisor does on its loop
can starve it. A SIGSTOPped or wedged process stops renewing as a whole: that is the
case expiry exists for.

Every supervisor process has one :data:`SUPERVISOR_ID`, written to its leases as
``owner_instance_id``. It is random per process, so a restarted owner (same pid
reused, same session) is a different holder. A renewal is itself a compare-and-set
on the holder: a lease stolen while we were frozen is *not* renewed, and is reported
back through :meth:`LeaseHeartbeat.lost` so its run stops writing it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

from tether import _log


class _Renewer(Protocol):
    def renew_leases(
        self, lease_ids: list[str], *, owner: str, now: float, ttl: float
    ) -> list[str]: ...

    def close(self) -> None: ...


#: This process's identity as a lease holder (64 random bits, hex).
SUPERVISOR_ID = os.urandom(8).hex()

#: Renewal interval and lease lifetime. The lifetime spans several missed beats, so
#: only a supervisor that is stopped or gone -- never one that is merely busy -- lets
#: its lease lapse (issue 9: "well above any legitimate stall").
HEARTBEAT_S = float(os.environ.get("TETHER_LEASE_HEARTBEAT_S", "5"))
LEASE_TTL_S = float(os.environ.get("TETHER_LEASE_TTL_S", "30"))


class LeaseHeartbeat:
    """A daemon thread renewing this process's leases; one per (process, database).

    Args:
        open_registry: opens a fresh registry connection (called on the thread).
        interval: seconds between renewals.
        ttl: how far past each renewal the lease stays valid.
    """

    def __init__(
        self, open_registry: Callable[[], _Renewer], *, interval: float, ttl: float
    ) -> None:
        self._open = open_registry
        self.interval = interval
        self.ttl = ttl
        self._leases: set[str] = set()
        self._lost: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.beats = 0

    def add(self, lease_id: str) -> None:
        """Start renewing ``lease_id`` (the lease was just created with an expiry)."""
        with self._lock:
            self._leases.add(lease_id)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="tether-lease-heartbeat", daemon=True
                )
                self._thread.start()

    def remove(self, lease_id: str) -> None:
        """Stop renewing ``lease_id`` (its run ended)."""
        with self._lock:
            self._leases.discard(lease_id)
            self._lost.discard(lease_id)
            if not self._leases:
                self._wake.set()  # let the thread see it has nothing left, and end

    def lost(self, lease_id: str) -> bool:
        """Whether a renewal found ``lease_id`` taken over (or ended) by someone else."""
        with self._lock:
            return lease_id in self._lost

    def _run(self) -> None:
        registry: _Renewer | None = None
        try:
            while True:
                with self._lock:
                    leases = sorted(self._leases - self._lost)
                    if not self._leases:
                        self._thread = None
                        return
                if registry is None:
                    registry = self._open()
                if leases:
                    self._beat(registry, leases)
                self._wake.wait(self.interval)
                self._wake.clear()
        finally:
            if registry is not None:
                registry.close()

    def _beat(self, registry: _Renewer, leases: list[str]) -> None:
        try:
            gone = registry.renew_leases(leases, owner=SUPERVISOR_ID, now=time.time(), ttl=self.ttl)
        except Exception as exc:
            _log.event("lease_heartbeat_failed", error=str(exc), owner=SUPERVISOR_ID)
            return
        self.beats += 1
        if gone:
            with self._lock:
                fresh = [lid for lid in gone if lid in self._leases and lid not in self._lost]
                self._lost.update(fresh)
            for lease_id in fresh:
                _log.event(
                    "lease_lost_to_steal",
                    runId=lease_id,
                    reason="renewal-refused",
                    owner=SUPERVISOR_ID,
                )


_heartbeats: dict[str, LeaseHeartbeat] = {}
_heartbeats_lock = threading.Lock()


def heartbeat_for(db_path: str, open_registry: Callable[[], _Renewer]) -> LeaseHeartbeat:
    """This process's heartbeat for the registry at ``db_path`` (created on first use).

    ``open_registry`` opens a fresh connection to that database (the heartbeat's thread
    calls it): supervision is handed an opener by the state layer's caller
    (:meth:`tether.state.registry.Registry.reopener`), never importing the registry itself.
    """
    with _heartbeats_lock:
        beat = _heartbeats.get(db_path)
        if beat is None:
            beat = LeaseHeartbeat(open_registry, interval=HEARTBEAT_S, ttl=LEASE_TTL_S)
            _heartbeats[db_path] = beat
        return beat


__all__ = ["HEARTBEAT_S", "LEASE_TTL_S", "SUPERVISOR_ID", "LeaseHeartbeat", "heartbeat_for"]
