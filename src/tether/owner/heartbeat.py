"""The owner's heartbeat and status writer: a thread, so that no blocking work can
starve it and the event loop never waits on the database for its own status.

Callers judge an owner that does not answer by its heartbeat (``owner_heartbeat_at``
in the registry): after ``unresponsive_after`` seconds of silence the next caller may
fence it (see :mod:`tether.operations`). A busy owner must never look silent, so the
beat does not run on the event loop -- a blocking call there (a SQLite lock wait, a
``time.sleep``) would stop it -- but in its own thread, with its own database
connection. Only a stopped (SIGSTOP) or wholly hung process stops beating.

The same thread writes the owner's status row (status, queue depth, current request,
last prompt time) and the metrics the owner kept (:class:`tether.metrics.Deferred`):
the loop changes them in memory and *pokes* the thread, which writes whatever is
current in one transaction. A turn used to cost its owner's loop half a dozen write
transactions; with a hundred owners at once they queued on SQLite's write lock. While a
turn's entries wait for the journal writer's commit, that commit carries the row
instead (:meth:`Heartbeat.carry`): one transaction and one thread woken per turn, not
two. The row trails the truth by at most ``COALESCE_S`` plus one write (live status
comes from the owner itself, over IPC).

The beat comes at least three times per ``unresponsive_after`` (and at most every
``HEARTBEAT_S``), so one late beat never makes a live owner look dead.

The beat does not depend on the database either: each one also sets the mtime of the
session's lock file, which needs no free space. On a full disk the row's beat cannot
be written, and an owner waiting for its disk must never look silent -- callers read
the newer of the two (:func:`tether.owner_fence.owner_silence`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from tether import _profile, metrics, sessions
from tether.state.registry import Registry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.state.journal.writer import Carry

__all__ = ["HEARTBEAT_S", "Heartbeat"]

HEARTBEAT_S = 5.0  # as acpx
COALESCE_S = 0.02  # how long a status change may wait to share its write with the next


class Heartbeat:
    """Writes ``owner_heartbeat_at``, the status fields and kept metrics, from a thread."""

    def __init__(
        self,
        key: str,
        *,
        unresponsive_after: float,
        fields: Callable[[], dict[str, Any]],
        kept: metrics.Deferred | None = None,
        scan: Callable[[Registry], object] | None = None,
    ) -> None:
        self.key = key
        self._scan = scan  # each beat: record the live runs' members (issue 20)
        self._scanned_at = -float("inf")  # the first write scans
        self.interval = max(0.05, min(HEARTBEAT_S, unresponsive_after / 3))
        self._fields = fields  # the status columns as they are now (read under the GIL)
        self.kept = kept
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._beat_path = sessions.lock_path(key)
        # The state database was removed or replaced under the owner (owner.state_watch):
        # nothing more is written to whatever is at its path now -- a write there would
        # damage a fresh database, or the one an operator put in its place.
        self.lost = False
        # The status changed since it was last written (set on the loop, cleared by
        # whichever thread writes the row next: this one, or the journal writer's
        # commit through :meth:`carry`). One lock orders the two writers' snapshots
        # and writes, so an older snapshot never lands after a newer one.
        self.dirty = False
        self._row_lock = threading.Lock()
        self._row_written_at = -float("inf")  # monotonic: the row's last write, either way
        run = _profile.target("heartbeat", self._run)  # bench/turn_cpu.py --profile only
        self._thread = threading.Thread(target=run, name="tether-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def changed(self, *, carried: bool = False) -> None:
        """The status changed: this thread writes it soon (coalesced with any write
        pending) -- unless ``carried``: the journal writer's next commit writes it
        (:meth:`carry`), and this thread is not woken for it."""
        self.dirty = True
        if not carried:
            self._wake.set()

    def carry(self) -> Carry | None:
        """From the journal writer's thread, as it commits a batch: the status row and
        kept metrics to write in the same transaction, if any changed.

        The returned ``settle`` must be called once the commit is done: a row that was
        not written is marked changed again and this thread writes it.
        """
        if not self._row_lock.acquire(blocking=False):
            return None  # this thread is writing the row: it writes any change after
        if self._stop.is_set() or self.lost:
            self._row_lock.release()
            return None
        if self.dirty and time.monotonic() - self._row_written_at < COALESCE_S:
            # Turns back to back: the row was written a moment ago. This thread writes
            # the latest within COALESCE_S, once for all of them, as it did before.
            self._row_lock.release()
            self._wake.set()
            return None
        dirty, self.dirty = self.dirty, False
        ops = self.take_kept()
        if not dirty and not ops:
            self._row_lock.release()
            return None
        try:
            fields = self._fields()
        except BaseException:
            # Never leave the lock held: this thread's next beat would wait on it forever.
            if self.kept is not None:
                self.kept.give_back(ops)
            self.dirty = True
            self._row_lock.release()
            raise

        def settle(written: bool) -> None:
            try:
                if written:
                    self._row_written_at = time.monotonic()
                else:
                    if self.kept is not None:
                        self.kept.give_back(ops)
                    self.dirty = True
                    self._wake.set()
            finally:
                self._row_lock.release()

        return fields, ops, settle

    def stop(self) -> None:
        """Stop beating (and wait for the thread, and for a row the journal writer
        carries, briefly). Idempotent. After it, the caller writes the final status
        itself (with :meth:`take_kept`): nothing either thread writes lands after it."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)
        if self._row_lock.acquire(timeout=1.0):
            self._row_lock.release()

    def lose(self) -> None:
        """Stop writing to the state database (thread-safe; the beat itself goes on)."""
        self.lost = True

    def take_kept(self) -> list[metrics.MetricOp]:
        return self.kept.take() if self.kept is not None else []

    def _scan_due(self, now: float) -> bool:
        """Whether this write also scans the live runs' members: once per ``interval``.

        The README promises a scan every ``HEARTBEAT_S`` at most, at the beat; a poke
        (a status change: three per quick turn) is not a beat. Scanning at each one put
        a ``/proc`` walk of the agent's tree into every turn's cost -- with a hundred
        sessions taking turns at once, each on cold caches (issue 23).
        """
        if now - self._scanned_at < self.interval:
            return False
        self._scanned_at = now
        return True

    def _write_row(self, registry: Registry) -> None:
        """The beat's row: the heartbeat time, the status as it is now, kept metrics."""
        with self._row_lock:
            self.dirty = False
            ops = self.take_kept()
            try:
                registry.update_session(
                    self.key, metric_ops=ops, owner_heartbeat_at=time.time(), **self._fields()
                )
                self._row_written_at = time.monotonic()
            except Exception:  # a missed beat is not fatal; silence is
                if self.kept is not None:
                    self.kept.give_back(ops)
                self.dirty = True  # the next beat tries again (not at once: a full disk)
                return
        if self.dirty and not self._stop.is_set():
            self._wake.set()  # changed while we wrote, and no commit could take it: again

    def _run(self) -> None:
        registry: Registry | None = None
        try:
            registry = Registry()
            while True:
                if self._wake.wait(self.interval):
                    # Poked: let the rest of the change come first (a quick turn moves
                    # queued -> running -> idle in a few ms), then write once.
                    self._stop.wait(COALESCE_S)
                self._wake.clear()
                if self._stop.is_set():
                    break
                with contextlib.suppress(OSError):  # the beat that needs no disk space
                    os.utime(self._beat_path)
                if self.lost:
                    continue  # the beat that needs no disk space goes on; no writes
                self._write_row(registry)
                if self._scan is not None and self._scan_due(time.monotonic()):
                    with contextlib.suppress(Exception):  # a missed scan loses no run
                        self._scan(registry)
        except Exception:  # no database: the owner's own writes will fail loudly
            return
        finally:
            if registry is not None:
                with contextlib.suppress(Exception):
                    registry.close()
