"""A host of the fleet: ``tether serve --fleet-index DSN --host-id ID --advertise URL``.

Beside the gateway, a host runs two threads:

- its :class:`~tether.fleet.membership.HostMembership` (register, beat, drain, leave);
- a sync loop that, every ``ship_interval_s``, ships the committed journal of every
  fleet session it owns (:class:`~tether.fleet.shipper.JournalShipper`) and tells the
  index which of them have ended locally (closed, terminated).

A fleet session lives on its host under its fleet id as the local session key (the
router asks the host to create it so), so its journal, owner, socket and lock are found
the way every local session's are. A local session that the index does not know (made
by an operator on the host itself) is never shipped or listed in the fleet.

With a router to reach (``TETHER_FLEET_ROUTER``), a host also opens its agents' door
(:mod:`tether.fleet.door`), through which the agents it runs reach the fleet as
requesters it proves.

When the host finds itself superseded (fenced while frozen or partitioned, or its id
registered again elsewhere), it stops shipping and closes its fleet sessions locally,
with its own proof, through ``on_superseded`` -- it never serves them again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from tether import paths
from tether.errors import HostSuperseded, TetherError
from tether.fleet.door import DOOR_ENV, FleetDoor
from tether.fleet.index import FleetIndex, SessionRow
from tether.fleet.membership import HostMembership
from tether.fleet.shipper import JournalShipper

DEFAULT_SHIP_INTERVAL_S = 0.2


class FleetHost:
    def __init__(
        self,
        dsn: str,
        host_id: str,
        url: str,
        *,
        labels: Mapping[str, str] | None = None,
        max_sessions: int | None = None,
        beat_interval_s: float = 1.0,
        ship_interval_s: float = DEFAULT_SHIP_INTERVAL_S,
        close_locally: Callable[[list[str]], None] = lambda _keys: None,
        log: Callable[[str], None] = lambda _m: None,
        router_url: str | None = None,
        fleet_token: str | None = None,
    ) -> None:
        self.dsn = dsn
        self.host_id = host_id
        self._ship_interval = ship_interval_s
        self._close_locally = close_locally
        self._log = log
        self._open_count = 0
        self.membership = HostMembership(
            self._connect,
            host_id,
            url,
            labels=labels,
            sessions=lambda: self._open_count,
            max_sessions=max_sessions,
            interval_s=beat_interval_s,
            on_superseded=self._superseded,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._owned: list[SessionRow] = []
        self._durable: dict[str, int] = {}  # fleet session id -> its shipped durable seq
        self.shipped_total = 0
        self.last_error: str | None = None
        self.door: FleetDoor | None = None
        if router_url is not None and fleet_token is not None:
            self.door = FleetDoor(host_id, router_url, fleet_token)

    def _connect(self) -> FleetIndex:
        return FleetIndex.connect(self.dsn)

    def start(self) -> int:
        """Register (raising :class:`IndexUnavailable` if the index cannot be reached),
        re-adopt the sessions this host owned before, and start shipping."""
        epoch = self.membership.start()
        with self._connect() as index:
            self._owned = index.adopt_sessions(self.host_id, epoch)
            stale = self._superseded_here(index, {row.session_id for row in self._owned})
        self._open_count = len(self._owned)
        if stale:
            # Fleet sessions this host still holds open but no longer owns (re-homed or
            # ended while it was away): closed here, by this host's own proof.
            self._log(f"host {self.host_id}: closing {len(stale)} superseded session(s)")
            self._close_locally(stale)
        self._thread = threading.Thread(target=self._run, name="fleet-ship", daemon=True)
        self._thread.start()
        if self.door is not None:
            self.door.start()
            # Owners inherit it; their keepers hand agents TETHER_SERVER=unix:<door>.
            os.environ[DOOR_ENV] = self.door.path
        return epoch

    @staticmethod
    def _superseded_here(index: FleetIndex, adopted: set[str]) -> list[str]:
        """Keys of this host's open local sessions the index knows as fleet sessions
        that this host does not own any more."""
        from tether.state.registry import Registry

        with Registry() as registry:
            local = [s.key for s in registry.sessions(include_closed=False)]
        return [k for k in local if k not in adopted and index.session(k) is not None]

    def stop(self, *, deregister: bool = True) -> None:
        if self.door is not None:
            self.door.stop()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.membership.stop(deregister=deregister)

    def leave(self, reason: str) -> None:
        """Stop shipping, ship once more (everything the owners journaled before they
        ended), and deregister: the end of a drain."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.final_sync()
        self.membership.stop(deregister=True, reason=reason)

    def final_sync(self) -> None:
        """One last sync pass on connections of its own (the sync thread has stopped)."""
        from tether.state.registry import JournalReader, Registry

        failed: tuple[type[Exception], ...] = (TetherError, *Registry.ERRORS, OSError)
        try:
            with Registry() as registry, self._connect() as index:
                journal = JournalReader(paths.state_db())
                try:
                    shipper = JournalShipper(
                        index, journal, self.host_id, lambda: self.membership.epoch
                    )
                    self.sync_once(index, registry, shipper)
                finally:
                    journal.close()
        except failed as e:
            self.last_error = str(e)
            self._log(f"host {self.host_id}: the last ship failed: {e}")

    def durable_seq(self, session_id: str) -> int | None:
        """The highest seq of the session shipped off-host, as of the last pass (None: not
        a fleet session of this host, or not shipped yet)."""
        return self._durable.get(session_id)

    def status(self) -> dict[str, Any]:
        return {
            **self.membership.status().to_dict(),
            "sessions": self._open_count,
            "shippedEntries": self.shipped_total,
            "lastError": self.last_error,
        }

    def _superseded(self) -> None:
        self._log(f"host {self.host_id}: superseded in the fleet index; closing its sessions")
        self._stop.set()
        keys = [row.session_id for row in self._owned]
        try:
            self._close_locally(keys)
        except TetherError as e:
            self._log(f"host {self.host_id}: closing superseded sessions failed: {e}")

    def _run(self) -> None:
        from tether.state.registry import JournalReader, Registry

        failed: tuple[type[Exception], ...] = (TetherError, *Registry.ERRORS, OSError)
        journal: JournalReader | None = None
        registry: Registry | None = None
        index: FleetIndex | None = None
        shipper: JournalShipper | None = None
        try:
            while not self._stop.is_set():
                try:
                    if registry is None:
                        registry = Registry()
                    if index is None or journal is None or shipper is None:
                        index = self._connect()
                        journal = journal or JournalReader(paths.state_db())
                        shipper = JournalShipper(
                            index, journal, self.host_id, lambda: self.membership.epoch
                        )
                    self.sync_once(index, registry, shipper)
                    self.last_error = None
                except HostSuperseded:
                    return  # the membership's beat says so and closes the sessions
                except failed as e:
                    self.last_error = str(e)
                    if index is not None:
                        index.close()
                    index = shipper = None
                self._stop.wait(self._ship_interval)
        finally:
            if index is not None:
                index.close()
            if journal is not None:
                journal.close()
            if registry is not None:
                registry.close()

    def sync_once(self, index: FleetIndex, registry: Any, shipper: JournalShipper) -> None:
        """One pass: ship what is committed, end in the index what ended here."""
        owned = index.sessions(host_id=self.host_id, state="open")
        self._owned = owned
        open_here = 0
        for row in owned:
            local = registry.session(row.session_id)
            if local is None:
                continue  # not created here yet (the router is creating it)
            state = local.state
            shipped = shipper.ship_session(row.session_id, row.session_id)
            self.shipped_total += shipped.entries
            self._durable[row.session_id] = shipped.durable_seq
            if state == "closed":
                index.end_session(row.session_id, "closed", "closed on its host")
            else:
                open_here += 1
        self._open_count = open_here
