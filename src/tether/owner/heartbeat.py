"""The owner's heartbeat: a thread, so that no blocking work can starve it.

Callers judge an owner that does not answer by its heartbeat (``owner_heartbeat_at``
in the registry): after ``unresponsive_after`` seconds of silence the next caller may
fence it (see :mod:`tether.operations`). A busy owner must never look silent, so the
beat does not run on the event loop -- a blocking call there (a SQLite lock wait, a
``time.sleep``) would stop it -- but in its own thread, with its own database
connection. Only a stopped (SIGSTOP) or wholly hung process stops beating.

The beat comes at least three times per ``unresponsive_after`` (and at most every
``HEARTBEAT_S``), so one late beat never makes a live owner look dead.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from tether.registry import Registry

__all__ = ["HEARTBEAT_S", "Heartbeat"]

HEARTBEAT_S = 5.0  # as acpx


class Heartbeat:
    """Writes ``owner_heartbeat_at`` (and the queue depth) from a daemon thread."""

    def __init__(self, key: str, *, unresponsive_after: float, depth: Callable[[], int]) -> None:
        self.key = key
        self.interval = max(0.05, min(HEARTBEAT_S, unresponsive_after / 3))
        self._depth = depth
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tether-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop beating (and wait for the thread, briefly). Idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        registry: Registry | None = None
        try:
            registry = Registry()
            while not self._stop.wait(self.interval):
                with contextlib.suppress(Exception):  # a missed beat is not fatal; silence is
                    registry.update_session(
                        self.key, owner_heartbeat_at=time.time(), queue_depth=self._depth()
                    )
        except Exception:  # no database: the owner's own writes will fail loudly
            return
        finally:
            if registry is not None:
                registry.close()
