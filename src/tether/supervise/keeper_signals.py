"""One signal per process: the keeper's bookkeeping of what it has already sent.

The keeper reaches its tree three ways -- ``killpg`` on the root's group, each
descendant by identity, each cgroup member -- because each catches what another can
miss (a ``setsid`` member leaves the group; a member may leave the cgroup as root).
Sent blindly, the three add up: a same-group child got the group's SIGTERM and then
its own, 1-3 ms apart, and a TERM handler ran twice (issue 20, item 6; seed 003 asks
for TERM -> grace -> KILL once per process). :class:`SentSignals` remembers, per
signal, which identities (pid, starttime) a signal has reached, so each way skips what
an earlier one already covered:

* the group signal is sent once per signal number (the root is held unreaped, so its
  pgid cannot be recycled meanwhile);
* a process counts as reached by it when it was in the root's group both before and
  after the ``killpg`` (it cannot have left and come back in between);
* a process signalled by identity is never signalled again with the same signal.

A process forked after the group signal, into the group, is not reached by it and
gets its SIGKILL after the grace like any member born after the TERM wave.

Standard library only and no Tether imports: the keeper imports it on its cold path.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing (and re) cost the keeper ~1 MiB; mypy reads the name
if TYPE_CHECKING:  # the keeper's cold path imports no collections
    from collections.abc import Callable

__all__ = ["SentSignals"]

Identity = tuple[int, int]  # (pid, starttime)


class SentSignals:
    """What the keeper already sent, per signal (see the module docstring)."""

    def __init__(self) -> None:
        self._groups: set[int] = set()
        self._reached: dict[int, set[Identity]] = {}

    def group_due(self, sig: int) -> bool:
        """Whether the group still needs ``sig`` (each signal goes to the group once)."""
        return sig not in self._groups

    def group_sent(
        self, sig: int, in_group: list[Identity], still_in_group: Callable[[int], bool]
    ) -> None:
        """Record a delivered group signal: ``in_group`` were in the group before it, and
        those ``still_in_group`` after it were reached by it."""
        self._groups.add(sig)
        reached = self._reached.setdefault(sig, set())
        reached.update(ident for ident in in_group if still_in_group(ident[0]))

    def due(self, sig: int, ident: Identity) -> bool:
        """Whether ``ident`` still needs ``sig``."""
        return ident not in self._reached.get(sig, ())

    def sent(self, sig: int, ident: Identity) -> None:
        """Record ``sig`` delivered to ``ident``."""
        self._reached.setdefault(sig, set()).add(ident)
