"""The owner as the subreaper of last resort: what a dead keeper leaves is still ours.

Theory of operation
-------------------
Every agent run has a keeper, a child subreaper: however a member daemonises (double
fork, ``setsid``, ``execve`` with an empty environment, moving to another cgroup), it
stays below the keeper. The one way out is to kill the keeper (the agent runs as the
same user, or as root). Then the kernel re-parents the keeper's children to the nearest
*living subreaper above it* -- which is the session's owner once it has called
:func:`become_last_resort`. So after a keeper's death every process its tree left
behind is a child of the owner, and the owner can prove it:

* the owner's children are its keepers (recorded by :func:`note_launched` when they
  start, forgotten when reaped) and nothing else -- the owner (like ``tether exec``)
  starts no other process;
* so a child that is not a keeper of ours was adopted, from a keeper's tree: it is the
  agent's, and ending it -- with everything below it -- signals nothing we do not own.

A keeper that dies before its run has ended is an escape attempt, not a normal end: the
run's finalizer (:mod:`tether.supervise.finalizer`, through
:mod:`tether.supervise.witnesses`) calls :func:`end_adopted`, which records each
adopted process as a member of the run (:mod:`tether.state._registry_members`), sends it
SIGTERM once, SIGKILL after the grace, and reaps it (it is our child); its own
children come up to us as it dies and go the same way. The run ends
``ownership-escape``.

Only a process that knows every child it has may claim this role: the owner daemon
does. A library process (or a test runner) that supervises runs in-process keeps the
previous behaviour -- its other children are not Tether's to judge.

What remains (see the README's "This is not a sandbox"): an agent that kills its owner
as well as its keeper leaves its orphans to init (or to a subreaper above the owner);
then only the recorded identities of members (:mod:`tether.supervise.members`) find them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable

from tether import _os
from tether.supervise import _keeper_linux
from tether.supervise.verify import signal_verified

__all__ = [
    "adopted",
    "become_last_resort",
    "end_adopted",
    "forget_launched",
    "is_last_resort",
    "note_launched",
]

_state = {"last_resort": False}
_LAUNCHED: set[int] = set()  # our own children: the keepers we started and hold
_POLL_S = 0.01
KILL_WAIT_S = 2.0


def become_last_resort() -> None:
    """Make this process a child subreaper that judges its adopted children.

    Call it only in a process whose every child is a keeper started through
    :func:`tether.supervise.runner.spawn_agent` (the owner daemon).
    """
    _keeper_linux.become_subreaper()
    _state["last_resort"] = True


def is_last_resort() -> bool:
    return _state["last_resort"]


def note_launched(pid: int) -> None:
    """``pid`` is a child we started ourselves (a keeper)."""
    _LAUNCHED.add(pid)


def forget_launched(pid: int) -> None:
    """Our child ``pid`` has been reaped."""
    _LAUNCHED.discard(pid)


def adopted(table: _os.ProcessTable) -> list[tuple[int, int]]:
    """``(pid, starttime)`` of our children that we did not start ([] unless last resort)."""
    if not _state["last_resort"]:
        return []
    me = os.getpid()
    out: list[tuple[int, int]] = []
    with contextlib.suppress(_os.ProcUnreadable):
        for pid in table.children(me):
            if pid in _LAUNCHED:
                continue
            st = table.stat(pid)
            if st is not None and st.ppid == me:
                out.append((pid, st.starttime))
    return out


def _below(table: _os.ProcessTable, roots: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``roots`` and every live descendant of them, children before parents."""
    order: list[tuple[int, int]] = []
    seen: set[int] = set()

    def visit(pid: int, starttime: int, depth: int) -> None:
        if pid in seen or depth > 4096:
            return
        seen.add(pid)
        with contextlib.suppress(_os.ProcUnreadable):
            for child in table.children(pid):
                st = table.stat(child)
                if st is not None and st.ppid == pid:
                    visit(child, st.starttime, depth + 1)
        order.append((pid, starttime))

    for pid, starttime in roots:
        visit(pid, starttime, 0)
    return order


def _reap_zombies(table: _os.ProcessTable, kids: list[tuple[int, int]]) -> None:
    for pid, _ in kids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


async def end_adopted(
    table: _os.ProcessTable,
    record: Callable[[list[tuple[int, int]]], None],
    grace: float,
) -> list[int]:
    """End every adopted child and its tree: TERM once, KILL after ``grace``, reap.

    ``record`` is called with each newly found ``(pid, starttime)`` before it is
    signalled. Bounded by ``grace + KILL_WAIT_S``. Returns every pid found.
    """
    if not _state["last_resort"]:
        return []
    boot = table.boot_id()
    found: dict[int, int] = {}
    termed: set[tuple[int, int]] = set()
    started = time.monotonic()
    kill_at = started + grace
    while True:
        kids = adopted(table)
        _reap_zombies(table, [k for k in kids if _zombie(table, k[0])])
        tree = [t for t in _below(table, adopted(table)) if not _zombie(table, t[0])]
        if not tree:
            break
        new = [t for t in tree if t[0] not in found or found[t[0]] != t[1]]
        if new:
            record(new)
            found.update(new)
        now = time.monotonic()
        sig = signal.SIGKILL if now >= kill_at else signal.SIGTERM
        for pid, starttime in tree:
            if sig == signal.SIGTERM and (pid, starttime) in termed:
                continue
            ident = _os.ProcessIdentity(boot, pid, starttime)
            if signal_verified(table, ident, sig) and sig == signal.SIGTERM:
                termed.add((pid, starttime))
        if now >= kill_at + KILL_WAIT_S:
            break
        await asyncio.sleep(_POLL_S)
    _reap_zombies(table, adopted(table))  # one may have died after the last look
    return sorted(found)


def _zombie(table: _os.ProcessTable, pid: int) -> bool:
    try:
        st = table.stat(pid)
    except _os.ProcUnreadable:
        return False
    return st is None or st.is_zombie
