"""The keeper's view of its run's tree: the root, its descendants, the run's boundary.

Part of the keeper (:mod:`tether.supervise.keeper`), split out by concept: the keeper
process owns the control channel, the spawn and the stop policy (TERM -> grace -> KILL
-> ECHILD); :class:`KeeperTree` owns what the keeper knows about the processes below
it -- the agent root (kept *unreaped* after it exits, ``waitid(WNOWAIT)``, which pins
its process-group number), the descendants it adopted as a child subreaper, who left
the run's boundary (``escaped``), and which signals already reached whom (once per
process: :mod:`.keeper_signals`).

Like the keeper, this module is on the cold path of every agent start: it imports only
the standard library modules the keeper already loads, and the keeper's platform layer.
"""

from __future__ import annotations

import os
import sys

from tether.supervise.keeper_signals import SentSignals

TYPE_CHECKING = False  # typing (and re) cost the keeper ~1 MiB; mypy reads the name

if TYPE_CHECKING:  # the keeper's cold path imports no collections
    from collections.abc import Callable

# The platform layer, chosen once at import (see tether.supervise.keeper).
if sys.platform.startswith("linux"):
    from tether.supervise import _keeper_linux as _plat
else:  # pragma: no cover - a port adds its module here (docs/platforms.md)
    raise ImportError(f"the keeper has no platform layer for {sys.platform}")

__all__ = ["KeeperTree", "read_stat"]


def read_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, pgid, starttime) of pid, or None if it is gone."""
    full = _plat.read_stat(pid)
    return (full[0], full[1], full[3]) if full is not None else None


def _descendants_deepest_first() -> list[tuple[int, int, str]]:
    """Every descendant of this keeper as (pid, starttime, state), children before parents."""
    order: list[tuple[int, int, str]] = []
    seen: set[int] = set()

    def visit(pid: int) -> None:
        for child in _plat.children(pid):
            if child in seen:
                continue
            seen.add(child)
            visit(child)
            st = read_stat(child)
            if st is not None:
                order.append((child, st[2], st[0]))

    visit(os.getpid())
    return order


class KeeperTree:
    """The run's tree as the keeper sees it; see the module docstring."""

    def __init__(self, cgroup: str | None, send: Callable[[dict[str, object]], None]) -> None:
        self.cgroup = cgroup
        self._send = send  # the keeper's control channel (the root's "exited" event)
        self.root_pid: int | None = None
        self.root_exit: tuple[int | None, int | None] | None = None  # (code, signal)
        self.root_reaped = False
        self.signalled = 0
        self.escaped: set[int] = set()
        self._sent = SentSignals()  # one signal per process (issue 20, item 6)
        self._cgroup_rel: str | None = None  # the run's cgroup as /proc/<pid>/cgroup names it

    def reap_root(self) -> None:
        """Reap the root, last: until now its zombie pinned the process group."""
        if self.root_pid is not None and not self.root_reaped:
            try:
                os.waitpid(self.root_pid, 0)
            except ChildProcessError:
                pass
            self.root_reaped = True

    def set_root(self, pid: int) -> None:
        """The agent root was started (and entered the run's cgroup before exec)."""
        self.root_pid = pid
        if self.cgroup:
            # The root entered the cgroup before exec (the error pipe closed only at
            # exec), so its own view names the run's cgroup relative to the mount.
            self._cgroup_rel = _plat.cgroup_of(pid)

    # --- the root and reaping ------------------------------------------------------------------

    def check_root(self) -> None:
        """Observe the root's exit without reaping it (WNOWAIT keeps its pgid pinned)."""
        if self.root_pid is None or self.root_exit is not None:
            return
        status = _plat.exit_status_keep_zombie(self.root_pid)
        if status is None:
            return
        self.root_exit = status
        code, sig = self.root_exit
        self._send({"event": "exited", "pid": self.root_pid, "code": code, "signal": sig})

    def reap_others(self) -> None:
        """Reap exited descendants other than the root (orphans adopted as subreaper)."""
        for child in _plat.children(os.getpid()):
            if child == self.root_pid:
                continue
            st = read_stat(child)
            if st is not None and st[0] == "Z":
                try:
                    os.waitpid(child, os.WNOHANG)
                except ChildProcessError:
                    pass

    def live_descendants(self) -> list[tuple[int, int, str]]:
        return [d for d in _descendants_deepest_first() if d[2] != "Z"]

    # --- signalling -----------------------------------------------------------------

    def _signal_pid(self, pid: int, starttime: int, sig: int) -> None:
        """Signal a descendant through a handle opened after, and checked against, its
        identity -- unless ``sig`` already reached it (once per process: keeper_signals)."""
        if not self._sent.due(sig, (pid, starttime)):
            return
        if _plat.signal_exact(pid, starttime, sig):
            self.signalled += 1
            self._sent.sent(sig, (pid, starttime))

    def signal_tree(self, sig: int) -> None:
        # Walk before signalling: a process that already died of the group signal can
        # no longer be seen outside the boundary it left.
        descendants = self.live_descendants()
        for pid, _, _ in descendants:
            if pid not in self.escaped and self._outside_boundary(pid):
                self.escaped.add(pid)
        # The group first: while the root is unreaped its pgid cannot be recycled.
        self._signal_group(sig, [(pid, st) for pid, st, _ in descendants])
        # Then everything that left the group (setsid, double fork), deepest first.
        for pid, starttime, _ in descendants:
            self._signal_pid(pid, starttime, sig)
        if self.cgroup:
            for pid in self._cgroup_procs():
                st = read_stat(pid)
                if st is not None:
                    self._signal_pid(pid, st[2], sig)

    def _signal_group(self, sig: int, walked: list[tuple[int, int]]) -> None:
        """``killpg`` the root's group, once per signal, and note whom it reached."""
        root = self.root_pid
        if root is None or self.root_reaped or not self._sent.group_due(sig):
            return
        in_group = [ident for ident in walked if self._in_root_group(ident[0])]
        if _plat.signal_group(root, sig):
            self.signalled += 1
            self._sent.group_sent(sig, in_group, self._in_root_group)

    def _in_root_group(self, pid: int) -> bool:
        st = read_stat(pid)
        return st is not None and st[1] == self.root_pid

    def _outside_boundary(self, pid: int) -> bool:
        """Whether a descendant has left the run's boundary (see the module docstring)."""
        if self.root_pid is None or pid == self.root_pid:
            return False
        if self.cgroup:
            rel = _plat.cgroup_of(pid)
            if rel is None or self._cgroup_rel is None:
                return False  # cannot tell: never call a process an escapee on a guess
            return rel != self._cgroup_rel and not rel.startswith(self._cgroup_rel + "/")
        st = _plat.read_stat(pid)
        return st is not None and st[1] != self.root_pid and st[2] != self.root_pid

    def _cgroup_procs(self) -> list[int]:
        assert self.cgroup is not None
        return _plat.cgroup_members(self.cgroup)

    def cgroup_kill(self) -> bool:
        if not self.cgroup or not _plat.cgroup_kill(self.cgroup):
            return False
        self.signalled += 1
        return True

    def is_empty(self) -> bool:
        self.reap_others()
        self.check_root()
        if self.live_descendants():
            return False
        return not (self.cgroup and self._cgroup_procs())
