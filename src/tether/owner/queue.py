"""The owner's admission queue: a bounded FIFO with deadlines, and no I/O.

Theory of operation
-------------------
Requests that need the agent (``prompt``, ``set_mode``, ``set_config_option``) run one
at a time, in arrival order. The queue holds the ones waiting for their turn; the one
running is not in it.

* ``admit`` refuses when ``max_depth`` requests are already waiting (acpx's
  ``queueMaxDepth``; the caller gets a retryable ``QUEUE_OVERLOADED``), else appends and
  says at which position.
* Each item may carry a deadline (monotonic seconds, computed by the shell from the
  request's ``deadlineMs`` and the time it was admitted). ``expire(now)`` removes and
  returns every waiting item whose deadline has passed: the shell answers them
  ``TIMEOUT`` -- a request that provably never ran -- instead of letting the caller's
  socket backstop report an unknown outcome. ``next_deadline()`` tells the shell when
  to call ``expire`` next (one timer, not one per request).
* ``pop(now)`` hands out the next item to run, skipping (and returning, to be answered)
  any that expired meanwhile.
* ``cancel(target)`` removes a waiting item by request id (``tether cancel --request``,
  Ctrl-C on a queued prompt); the running request is not the queue's business.
* ``drain()`` empties it at shutdown.

Decisions are values the shell carries out; the queue never answers anyone itself.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

__all__ = ["AdmissionQueue", "Admitted", "Overloaded", "Popped", "Queued"]


class Queued(Protocol):
    """What the queue needs of an item: its request id."""

    @property
    def request_id(self) -> str: ...


T = TypeVar("T", bound=Queued)


class Admitted:
    """The item waits at ``position`` (1 = next to run)."""

    __slots__ = ("position",)

    def __init__(self, position: int) -> None:
        self.position = position

    def __repr__(self) -> str:
        return f"Admitted(position={self.position})"


class Overloaded:
    """Refused: ``depth`` requests already wait."""

    __slots__ = ("depth",)

    def __init__(self, depth: int) -> None:
        self.depth = depth

    def __repr__(self) -> str:
        return f"Overloaded(depth={self.depth})"


class Popped(Generic[T]):
    """The next item to run (or None), and the items found expired on the way."""

    __slots__ = ("expired", "item")

    def __init__(self, item: T | None, expired: list[T]) -> None:
        self.item = item
        self.expired = expired


class AdmissionQueue(Generic[T]):
    """A bounded FIFO of waiting requests with per-item deadlines. See the module doc."""

    def __init__(self, max_depth: int) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be positive")
        self.max_depth = max_depth
        self._items: collections.deque[tuple[T, float | None]] = collections.deque()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return (item for item, _ in self._items)

    def request_ids(self) -> list[str]:
        """The waiting requests' ids, in order."""
        return [item.request_id for item, _ in self._items]

    def admit(self, item: T, *, deadline: float | None) -> Admitted | Overloaded:
        """Append ``item`` unless the queue is full."""
        if len(self._items) >= self.max_depth:
            return Overloaded(len(self._items))
        self._items.append((item, deadline))
        return Admitted(len(self._items))

    def pop(self, now: float) -> Popped[T]:
        """The next item whose deadline has not passed; the expired ones skipped."""
        expired: list[T] = []
        while self._items:
            item, deadline = self._items.popleft()
            if deadline is not None and now >= deadline:
                expired.append(item)
                continue
            return Popped(item, expired)
        return Popped(None, expired)

    def expire(self, now: float) -> list[T]:
        """Remove and return every waiting item whose deadline has passed."""
        kept: collections.deque[tuple[T, float | None]] = collections.deque()
        expired: list[T] = []
        for item, deadline in self._items:
            if deadline is not None and now >= deadline:
                expired.append(item)
            else:
                kept.append((item, deadline))
        self._items = kept
        return expired

    def next_deadline(self) -> float | None:
        """The earliest deadline among waiting items (when to call ``expire`` next)."""
        deadlines = [d for _, d in self._items if d is not None]
        return min(deadlines) if deadlines else None

    def cancel(self, request_id: str) -> T | None:
        """Remove the waiting item with this request id; None if none waits."""
        for i, (item, _) in enumerate(self._items):
            if item.request_id == request_id:
                del self._items[i]
                return item
        return None

    def remove(self, item: T) -> bool:
        """Remove ``item`` if it waits (its caller left); True if it did."""
        for i, (waiting, _) in enumerate(self._items):
            if waiting is item:
                del self._items[i]
                return True
        return False

    def drain(self) -> list[T]:
        """Remove and return every waiting item (shutdown)."""
        items = [item for item, _ in self._items]
        self._items.clear()
        return items
