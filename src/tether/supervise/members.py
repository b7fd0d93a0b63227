"""Run members by identity: who is still alive of a run, and ending them by that proof.

Theory of operation
-------------------
A run's *members* are the processes Tether has observed while they were provably inside
the run (:mod:`tether.state._registry_members`): in its cgroup, below its keeper, or adopted
by its owner when the keeper died. What the kernel still says about them after the run
has ended is the last witness of seed 003's promise "nothing it starts outlives its
session": a recorded member whose ``(boot id, pid, start time)`` is still alive is a
survivor, wherever it has moved (another cgroup, reparented to init, a new session).

Ending one needs no further proof: the identity was recorded while the process was
inside the run, and :func:`tether.supervise.verify.signal_verified` signals only that
very process (pidfd first, then boot id and start time re-checked). A process that
merely *claims* membership (an environment marker) is never recorded here and never
signalled by this module.

Used by the run's own finalizer (:mod:`tether.supervise.finalizer`: the members of the run
that just ended) and by reconciliation (``close``/``terminate`` with no owner running,
``tether reap``: members of runs that are over), which both report every survivor,
end it, and count it (``run_ownership_escape_total``).
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

from tether import _log, _os, metrics
from tether.supervise.member import Member
from tether.supervise.verify import signal_verified

__all__ = [
    "MemberScan",
    "alive",
    "end_blocking",
    "escaped_of",
    "report",
    "split_alive",
    "survivors_of",
    "sweep_members",
]

KILL_WAIT_S = 2.0  # after SIGKILL, how long we watch for the members to disappear
_POLL_S = 0.01


def alive(table: _os.ProcessTable, member: Member, boot_id: str) -> bool:
    """Whether that very process (same boot, pid and start time) is still running."""
    if member.boot_id != boot_id:
        return False
    try:
        st = table.stat(member.pid)
    except _os.ProcUnreadable:
        return True  # cannot tell: report it rather than call it gone
    return st is not None and not st.is_zombie and st.starttime == member.starttime


def split_alive(
    table: _os.ProcessTable, members: list[Member], exclude: tuple[int, ...] = ()
) -> tuple[list[Member], list[Member]]:
    """``(alive, gone)``; members whose pid is in ``exclude`` (us, our ancestors) are
    neither: never reported, never forgotten."""
    boot = table.boot_id()
    live: list[Member] = []
    gone: list[Member] = []
    for m in members:
        if m.pid in exclude:
            continue
        (live if alive(table, m, boot) else gone).append(m)
    return live, gone


def _signal(table: _os.ProcessTable, members: list[Member], sig: int) -> int:
    sent = 0
    for m in members:
        ident = _os.ProcessIdentity(m.boot_id, m.pid, m.starttime)
        if signal_verified(table, ident, sig):
            sent += 1
    return sent


def end_blocking(table: _os.ProcessTable, members: list[Member], grace: float) -> list[Member]:
    """TERM once, wait up to ``grace``, KILL what is left, watch it go (bounded).

    Returns the members still alive at the end (unproven: reported, never hidden).
    """
    if not members:
        return []
    _signal(table, members, signal.SIGTERM)
    deadline = time.monotonic() + grace
    live = members
    while live and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        live, _ = split_alive(table, live)
    if live:
        _signal(table, live, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while live and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            live, _ = split_alive(table, live)
    return live


def report(
    lease_id: str, session_key: str | None, live: list[Member], why: str, registry: Any = None
) -> None:
    """Count and log members found alive after their run ended (one line per run).

    ``registry``: persist the count there when no metrics sink is attached (an offline
    close or terminate reconciles without one).
    """
    metrics.incr("run_ownership_escape_total")
    if registry is not None and not metrics.attached():
        registry.incr("run_ownership_escape_total")
    _log.event(
        "ownership_escape",
        logging.WARNING,
        runId=lease_id,
        sessionKey=session_key,
        reason="ownership-escape",
        why=why,
        pids=[m.pid for m in live],
    )


def sweep_members(
    registry: Any,
    *,
    session_key: str | None = None,
    dry_run: bool = False,
    grace: float = 1.5,
    table: _os.ProcessTable | None = None,
    exclude: tuple[int, ...] = (),
    ending: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Recorded members of runs that are over, still alive: report, end, count them.

    A run is over when its lease is neither ``open`` nor ``closing`` (reconciliation
    has just ended every stale one -- ``ending`` names them, so that a dry run, which
    ends nothing, reports what a real one would); the members of live runs are their
    supervisors'.
    Returns one decision per run with survivors (``kind`` ``members``), the shape
    ``tether reap`` prints. Records of members proven gone are forgotten.
    """
    table = table if table is not None else _os.current()
    live_leases = {
        lease.lease_id
        for lease in registry.leases(states=("open", "closing"), all_instances=True)
        if lease.lease_id not in ending
    }
    by_lease: dict[str, list[Member]] = {}
    for m in registry.members(session_key=session_key):
        if m.lease_id not in live_leases:
            by_lease.setdefault(m.lease_id, []).append(m)
    decisions: list[dict[str, Any]] = []
    for lease_id, members in by_lease.items():
        live, gone = split_alive(table, members, exclude)
        if not dry_run:
            registry.forget_members(gone)
        if not live:
            continue
        key = live[0].session_key
        why = (
            f"recorded member(s) of run {lease_id} still alive after the run ended"
            " (left its keeper and cgroup): ownership-escape"
        )
        decision: dict[str, Any] = {
            "kind": "members",
            "lease_id": lease_id,
            "session_key": key,
            "pids": [m.pid for m in live],
            "why": why,
            "dry_run": dry_run,
        }
        if not dry_run:
            left = end_blocking(table, live, grace)
            decision["extinct"] = not left
            report(lease_id, key, live, why, registry)
            ended = [m for m in live if m not in left]
            registry.forget_members(ended)
        decisions.append(decision)
    return decisions


def escaped_of(decisions: list[dict[str, Any]]) -> list[int]:
    """Pids of recorded members that :func:`sweep_members` found alive (ended or not)."""
    return [p for d in decisions if d.get("kind") == "members" for p in d.get("pids") or ()]


def survivors_of(decisions: list[dict[str, Any]]) -> list[int]:
    """Pids of recorded members that are still alive after the sweep (or a dry run)."""
    return [
        p
        for d in decisions
        if d.get("kind") == "members" and not d.get("extinct")
        for p in d.get("pids") or ()
    ]


class MemberScan:
    """Records the members of live runs as the owner sees them (its heartbeat thread).

    Each pass walks every live run's keeper and records each descendant not recorded
    before (a descendant of our own unreaped child, the keeper, is provably inside the
    run). A process that lives a pass or more is then its run's member wherever it goes
    later -- even if it kills its keeper and its owner at once. Memory is bounded: the
    identities seen are kept per pass, not forever, and records of members that died
    are dropped on the next pass.
    """

    def __init__(self, session_key: str | None, table: _os.ProcessTable | None = None) -> None:
        self.session_key = session_key
        self.table = table if table is not None else _os.current()
        self._seen: dict[tuple[int, int], str] = {}  # identity -> lease, last pass

    def tree(self, keeper_pid: int) -> list[tuple[int, int]]:
        """``(pid, starttime)`` of every live descendant of ``keeper_pid``."""
        out: list[tuple[int, int]] = []
        stack = [keeper_pid]
        visited: set[int] = set()
        while stack and len(visited) < 65536:
            pid = stack.pop()
            if pid in visited:
                continue
            visited.add(pid)
            try:
                children = self.table.children(pid)
            except _os.ProcUnreadable:
                continue
            for child in children:
                try:
                    st = self.table.stat(child)
                except _os.ProcUnreadable:
                    continue
                if st is not None and st.ppid == pid and not st.is_zombie:
                    out.append((child, st.starttime))
                    stack.append(child)
        return out

    def scan_live(self, registry: Any, live: Any) -> int:
        """One pass over an owner's live agent run (``AgentSlot.live``) and its terminals.

        Called from the owner's heartbeat thread: it reads only fields fixed at spawn
        (lease id, keeper pid) and a copy of the terminal table.
        """
        if live is None:
            return 0
        procs = [live.proc]
        terminals = getattr(live, "terminals", None)
        if terminals is not None:
            procs += [run.proc for run in list(terminals.runs.values())]
        runs = [(p.lease_id, p.keeper_pid) for p in procs if p.keeper_pid is not None]
        return self.scan(registry, runs)

    def scan(self, registry: Any, runs: list[tuple[str, int]]) -> int:
        """One pass over ``runs`` (lease id, keeper pid); returns how many were recorded.

        Members seen by the last pass and gone by this one are forgotten (a busy run
        starts thousands of short processes); one that merely left the tree alive (its
        keeper was killed) stays recorded.
        """
        seen: dict[tuple[int, int], str] = {}
        recorded = 0
        boot = self.table.boot_id()
        for lease_id, keeper_pid in runs:
            found = self.tree(keeper_pid)
            seen.update((i, lease_id) for i in found)
            new = [i for i in found if i not in self._seen]
            if new:
                registry.record_members(lease_id, self.session_key, boot, new, "scan")
                recorded += len(new)
        left = [
            Member(boot, pid, start, lease, self.session_key, "scan", 0.0)
            for (pid, start), lease in self._seen.items()
            if (pid, start) not in seen
        ]
        _live, gone = split_alive(self.table, left)
        if gone:
            registry.forget_members(gone)
        self._seen = seen
        return recorded
