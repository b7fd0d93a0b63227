"""The owner's memory after a burst: given back to the system once the session is idle.

A streamed turn allocates many short-lived objects (frames, entry lines, batches). Python
frees them, but the C allocator keeps the freed pages mapped, so an owner that relayed
one large turn would sit at its peak for the rest of the session's life. Once the owner
has been idle a moment, a collection and ``malloc_trim`` return those pages: a warm
owner stays small however busy its past.

The first trim also freezes what survives it (:func:`tether._memory.give_back`): the
owner's long-lived state then exists (imports, the agent's connection, the session), and
the later trims -- after every turn of a session prompted now and then -- collect only
what was allocated since, in a hundredth of a millisecond instead of ~5 ms.

The owners of a session host (:mod:`tether.sessionhost`) share one process, so they
share one trim (:class:`HostTrim`): once every owner there has been idle a moment, and
collecting only the young generations. A full collection there would walk every
session's objects (a hundred times an owner's), once per owner per burst; and nothing
is frozen, because a host outlives its sessions and what was frozen is never freed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tether import _memory

__all__ = ["HostTrim", "MemoryTrim"]

SETTLE_S = 1.0  # idle this long before trimming: a next prompt right away pays nothing


class MemoryTrim:
    """Trim once per burst, ``SETTLE_S`` after the owner goes idle (if it still is)."""

    def __init__(
        self,
        idle: Callable[[], bool],
        *,
        shrink: Callable[[], None],
        freeze: bool = False,
        host: HostTrim | None = None,
    ) -> None:
        self._idle = idle
        self._shrink = shrink  # drop caches that are only worth keeping while busy
        self._freeze = freeze  # the first trim freezes its survivors (the owner's process)
        self._handle: asyncio.TimerHandle | None = None
        self._host = host  # a session host's one trim, for all its owners
        self.trims = 0

    @property
    def idle(self) -> bool:
        return self._idle()

    def shrink(self) -> None:
        self._shrink()

    def soon(self) -> None:
        """The owner just went idle: trim after it settles."""
        if self._host is not None:
            if self not in self._host.owners:  # from its first idle moment to its end
                self._host.owners.append(self)
            self._host.soon()
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle = asyncio.get_running_loop().call_later(SETTLE_S, self._run)

    def _run(self) -> None:
        self._handle = None
        if not self._idle():
            return  # busy again: the next idle moment trims
        self._shrink()
        _memory.give_back(freeze=self._freeze and self.trims == 0)
        self.trims += 1

    def cancel(self) -> None:
        """The owner is ending: no trim of its own, and none of the host's waits on it."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._host is not None and self in self._host.owners:
            self._host.owners.remove(self)


class HostTrim:
    """One trim for a session host's owners: ``SETTLE_S`` after the last of them went
    idle, if all still are (see the module docstring)."""

    def __init__(self) -> None:
        self.owners: list[MemoryTrim] = []
        self._handle: asyncio.TimerHandle | None = None
        self.trims = 0

    def soon(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = asyncio.get_running_loop().call_later(SETTLE_S, self._run)

    def _run(self) -> None:
        self._handle = None
        if not all(owner.idle for owner in self.owners):
            return  # one is busy: the next owner to go idle asks again
        for owner in self.owners:
            owner.shrink()
        _memory.give_back(generation=1)
        self.trims += 1
