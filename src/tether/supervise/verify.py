"""Ownership verification: may we signal the process a lease names?

Theory of operation
-------------------
Tether never signals a process it cannot prove it owns. For our own *unreaped*
children the proof is structural (the pid cannot be reused while we hold it). For
anything else -- a previous owner's leftovers found by reconcile, a reparented
grandchild -- the proof is evidence compared with live ``/proc`` state
(process-ownership.md §1.6-1.7), and this module is the one place it is weighed.

:func:`verify` returns one of three verdicts:

``OWNED``
    Every check passed: same boot, same pid namespace, the pid exists and is not a
    zombie, same starttime, same pgid (when recorded), the environment carries
    ``TETHER_LEASE_ID=<lease_id>``, and the argv hash matches (when recorded) -- or,
    when the agent exec'd since, its parent is still the lease's verified keeper
    (:func:`exec_proven`).
``GONE``
    The lease's process provably no longer runs: another boot, no such pid, a
    zombie, a different starttime (the pid was reused), or a readable marker naming
    *another* lease (a pid reused by another run, possibly another instance's).
    The lease may be closed. GONE never licenses a signal to the pid: whatever runs
    there now is somebody else's.
``LOST``
    We cannot tell: ``/proc`` unreadable, a pid namespace unknown or different, the
    marker unreadable or absent, the pgid or argv changed under the same identity.
    Never signal; record ``lost``; a later sweep retries.

The split between "absent" and "different" markers is deliberate. A marker naming
another lease is positive evidence of another run. An absent marker is not
evidence of anything: ``/proc/<pid>/environ`` shows the environment of the *last
exec*, and a process that re-execs itself with ``env -i`` keeps its pid and
starttime but drops the marker ("it confirms ownership but never proves its
absence"), so absence means LOST, not GONE.

:func:`plan_tree_kill` lists what to signal for an owned tree, children first,
and :func:`signal_verified` is the executor's only way to signal a pid that is not
its own unreaped child: open a pidfd, *then* re-check the identity (closing the
race between verifying and opening), then signal through the pidfd, which can
never reach a recycled pid.
"""

from __future__ import annotations

import enum
import hashlib
import os
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from tether._os import UNREADABLE, ProcessIdentity, ProcessTable, ProcUnreadable
from tether.errors import IdentityUnverified

__all__ = [
    "MARKER_KEY",
    "LeaseEvidence",
    "Verdict",
    "Verification",
    "command_hash",
    "exec_proven",
    "marker_for",
    "plan_tree_kill",
    "signal_verified",
    "verify",
]

#: The environment key of the per-lease marker every agent is spawned with.
MARKER_KEY: Final = b"TETHER_LEASE_ID"


def marker_for(lease_id: str) -> tuple[bytes, bytes]:
    """The ``(key, value)`` marker that processes of ``lease_id`` carry in their environment."""
    return MARKER_KEY, lease_id.encode()


def command_hash(argv: Sequence[str | bytes]) -> str:
    """The sha256 (hex) of the NUL-joined argv bytes.

    ``str`` items are encoded with ``os.fsencode`` (surrogateescape), so the same argv
    hashes the same whether it is held as ``str`` (at spawn) or ``bytes`` (read back
    from ``/proc/<pid>/cmdline``). No quoting is involved: a lease must store the hash
    of the exact argv list that the root process exec'd -- after any shim (``setpriv``,
    ``sh -c 'exec "$@"'``) has exec'd into the agent -- never of a shell-quoted
    display string, which would never match and make the lease LOST (fail closed).
    """
    h = hashlib.sha256()
    for i, arg in enumerate(argv):
        if i:
            h.update(b"\0")
        h.update(arg if isinstance(arg, bytes) else os.fsencode(arg))
    return h.hexdigest()


@dataclass(frozen=True)
class LeaseEvidence:
    """What a lease recorded about its root process when it was spawned."""

    lease_id: str
    instance_id: str
    boot_id: str
    pid: int
    starttime: int
    pgid: int | None
    command_hash: str | None
    pid_namespace: str | None
    # The run's keeper, the root's parent: proves an argv changed by the agent's own exec.
    keeper_pid: int | None = None
    keeper_starttime: int | None = None


class Verdict(enum.Enum):
    """The outcome of weighing a lease's evidence against live state."""

    OWNED = "owned"
    GONE = "gone"
    LOST = "lost"


@dataclass(frozen=True)
class Verification:
    """A verdict and the human-readable reasons behind it (for logs and ``tether reap``)."""

    verdict: Verdict
    reasons: tuple[str, ...]


def _gone(*reasons: str) -> Verification:
    return Verification(Verdict.GONE, reasons)


def _lost(*reasons: str) -> Verification:
    return Verification(Verdict.LOST, reasons)


def verify(
    evidence: LeaseEvidence,
    table: ProcessTable,
    *,
    our_instance_id: str,
    our_boot_id: str,
    command_hash_of: Callable[[list[bytes]], str] = command_hash,
) -> Verification:
    """Decide whether ``evidence``'s process is ours to signal (see the module docstring).

    Never raises for OS trouble: every read failure becomes ``LOST``.

    Raises:
        IdentityUnverified: the lease belongs to another Tether instance. Another
            instance's leases are never evaluated for signalling, so asking is a bug.
    """
    # Refuse loudly rather than return a verdict: a caller that got this far with a
    # foreign lease has a bug, and any verdict would invite acting on it.
    if evidence.instance_id != our_instance_id:
        raise IdentityUnverified(
            "refusing to verify another instance's lease",
            lease_id=evidence.lease_id,
            instance_id=evidence.instance_id,
        )
    pid = evidence.pid
    # 1. Boot. A process of another boot cannot exist now, whatever runs at its pid.
    if evidence.boot_id != our_boot_id:
        return _gone(f"lease is from boot {evidence.boot_id}, this is boot {our_boot_id}")
    try:
        live_boot = table.boot_id()
    except ProcUnreadable as exc:
        return _lost(f"cannot read boot_id: {exc}")
    if live_boot != our_boot_id:
        # Our idea of the boot disagrees with the table's: we cannot reason at all.
        return _lost(f"table reports boot {live_boot}, we believe {our_boot_id}")
    # 2. Namespace. A pid number only names a process inside one pid namespace.
    live_ns = table.pid_namespace()
    if evidence.pid_namespace is None or live_ns is None:
        return _lost("pid namespace unknown on one side; pid numbers cannot be compared")
    if evidence.pid_namespace != live_ns:
        return _lost(f"lease pid namespace {evidence.pid_namespace} is not ours ({live_ns})")
    # 3. Existence, liveness, starttime: the (boot_id, pid, starttime) identity.
    try:
        st = table.stat(pid)
    except ProcUnreadable as exc:
        return _lost(f"cannot read /proc/{pid}/stat: {exc}")
    if st is None:
        return _gone(f"pid {pid} does not exist")
    if st.is_zombie:
        return _gone(f"pid {pid} is a zombie (exited)")
    if st.starttime != evidence.starttime:
        return _gone(
            f"pid {pid} starttime {st.starttime} != recorded {evidence.starttime}: pid reused"
        )
    # 4. The marker. A different value is another run's process (GONE for us, and
    #    never signalled); absent or unreadable proves nothing (LOST).
    lost: list[str] = []
    key, want = marker_for(evidence.lease_id)
    # One key only: the environment holds secrets and is never returned or logged.
    have = table.environ_value(pid, key)
    if have is UNREADABLE:
        lost.append(f"environment of pid {pid} unreadable: marker unverifiable")
    elif have is None:
        lost.append(f"pid {pid} carries no {key.decode()} marker")
    elif have != want:
        return _gone(
            f"pid {pid} carries another lease's marker ({have.decode(errors='replace')}): "
            "pid reused by another run"
        )
    # 5. pgid: same identity but a new group means the process moved itself
    #    (setsid/setpgid); we no longer know what killpg would reach.
    if evidence.pgid is not None and st.pgid != evidence.pgid:
        lost.append(f"pid {pid} pgid {st.pgid} != recorded {evidence.pgid}")
    # 6. argv: compared as hashes of the exact argv, so quoting never enters into it.
    if evidence.command_hash is not None:
        try:
            argv = table.cmdline(pid)
        except ProcUnreadable as exc:
            argv = None
            lost.append(f"cannot read /proc/{pid}/cmdline: {exc}")
        else:
            if argv is None:
                # Vanished between stat and cmdline: it is gone now.
                return _gone(f"pid {pid} exited during verification")
        if (
            argv is not None
            and command_hash_of(argv) != evidence.command_hash
            and not exec_proven(table, evidence, st.ppid)
        ):
            lost.append(f"pid {pid} argv hash differs from the recorded command")
    if lost:
        return _lost(*lost)
    return Verification(Verdict.OWNED, (f"pid {pid} verified (boot, ns, starttime, marker)",))


def exec_proven(table: ProcessTable, evidence: LeaseEvidence, ppid: int) -> bool:
    """Whether a root whose argv no longer matches is still the process we spawned.

    An agent started through a shebang script or an exec'ing wrapper (``env FOO=1
    agent``, every npm agent's ``node`` shim, ``npx``) execs again after the keeper
    started it, so its argv is not the one recorded (issue 20, item 5). Its identity
    still is: the pid and starttime (already checked) survive ``exec``, and so does
    its parentage. The keeper forked the root and, as a child subreaper, keeps it as a
    child until it is reaped, so "its parent is the lease's keeper, that very process
    (pid, starttime, not a zombie, carrying the lease's marker)" proves the root is
    the one the keeper started, whatever it has exec'd since.
    """
    kpid, kstart = evidence.keeper_pid, evidence.keeper_starttime
    if kpid is None or kstart is None or kpid <= 1 or ppid != kpid:
        return False
    try:
        kst = table.stat(kpid)
        if kst is None or kst.is_zombie or kst.starttime != kstart:
            return False
        return _carries(table, kpid, marker_for(evidence.lease_id))
    except ProcUnreadable:
        return False


def _carries(table: ProcessTable, pid: int, marker: tuple[bytes, bytes]) -> bool:
    # Only a readable, equal marker counts; unreadable or absent fails closed.
    return table.environ_value(pid, marker[0]) == marker[1]


def order_children_first(table: ProcessTable, pids: Iterable[int]) -> list[int]:
    """Order ``pids`` so that each comes before its ancestors within the set.

    Depth is measured along ppid links inside the set (a ``setsid`` escapee that
    reparented to a subreaper starts a new root). Deepest first; ties by pid,
    descending, for a stable order. Raises ProcUnreadable like ``table.stat``.
    """
    members = set(pids)
    # Parent links only inside the set: ancestry outside it (init, a subreaper, the
    # dead owner) says nothing about the order we must signal in.
    parent: dict[int, int | None] = {}
    for pid in members:
        st = table.stat(pid)
        parent[pid] = st.ppid if st is not None and st.ppid in members else None

    def depth(pid: int) -> int:
        d, seen = 0, {pid}
        p = parent.get(pid)
        while p is not None and p not in seen:  # `seen` guards a (bogus) ppid cycle
            seen.add(p)
            d += 1
            p = parent.get(p)
        return d

    return sorted(members, key=lambda p: (-depth(p), -p))


def _marked_tree(
    roots: Sequence[int],
    table: ProcessTable,
    marker: tuple[bytes, bytes],
    exclude: Collection[int],
) -> list[int]:
    found: set[int] = set()
    # Walk down from the roots; we descend through unmarked processes too (cheap and
    # harmless: inclusion is decided per pid by its own marker, never by ancestry).
    stack = list(roots)
    walked: set[int] = set()
    while stack:
        pid = stack.pop()
        if pid in walked:
            continue
        walked.add(pid)
        stack.extend(table.children(pid))
    # Reparented escapees (setsid + double fork) are not below the root any more,
    # but they inherited the marker: a full scan finds them.
    candidates = walked | set(table.pids())
    for pid in candidates:
        if pid <= 1 or pid in exclude:
            continue  # never init, never ourselves or our ancestry
        # The environment first: on a host of hundreds of processes almost none carries
        # the marker, and for those one read decides (a gone process reads unreadable, a
        # zombie's environment empty: neither carries it), so a scan is one read per
        # process, not two (issue 23: the scan was most of a close's teardown).
        if not _carries(table, pid, marker):
            continue
        st = table.stat(pid)
        if st is None or st.is_zombie:
            continue  # nothing to signal; its parent reaps it
        found.add(pid)
    return order_children_first(table, found)


def plan_tree_kill(
    root_pid: int,
    table: ProcessTable,
    marker: tuple[bytes, bytes],
    *,
    exclude: Collection[int] = (),
) -> list[int]:
    """The pids of a verified tree to signal, children first (deepest first).

    The tree is what a walk of ``children()`` from ``root_pid`` reaches, plus every
    process carrying ``marker`` (``(key, value)``) anywhere in the table. Each pid
    included -- the root too -- must itself carry the marker where readable: a
    process whose readable environment has no marker or another one may have been
    adopted from elsewhere, and one whose environment is unreadable cannot be
    confirmed; both are skipped (fail closed). Zombies, pid 1 and ``exclude`` (pass
    our own pid and ancestry) are never included.

    Call it only after :func:`verify` returned ``OWNED`` for the root, and signal the
    result with :func:`signal_verified`.

    Raises:
        ProcUnreadable: the listing or a stat could not be read; plan nothing.
    """
    return _marked_tree([root_pid], table, marker, exclude)


def marked_survivors(
    table: ProcessTable, marker: tuple[bytes, bytes], *, exclude: Collection[int] = ()
) -> list[int]:
    """Every live process carrying ``marker``, children first, found by a scan alone.

    For a lease whose root is GONE: its pid may now belong to someone else, so we
    must not walk from it, but a ``setsid`` grandchild with the marker may live on.

    Raises:
        ProcUnreadable: as :func:`plan_tree_kill`.
    """
    return _marked_tree([], table, marker, exclude)


def signal_verified(
    table: ProcessTable,
    ident: ProcessIdentity,
    sig: int,
    *,
    marker: tuple[bytes, bytes] | None = None,
) -> bool:
    """Signal the process ``ident`` names, only if its identity holds after pinning it.

    Opens a pidfd, then re-checks boot_id and starttime (and ``marker``, if given)
    *after* opening -- a check before opening could be invalidated by a reap and
    reuse in between -- then signals through the pidfd and closes it.

    Returns:
        ``True`` if the signal was delivered to that very process; ``False`` if it
        could not be proven to be the same process, is gone, or refused (``EPERM``).
        Never raises for gone or foreign processes.
    """
    try:
        # Cheap pre-check: no pidfd for a pid of another boot.
        if table.boot_id() != ident.boot_id:
            return False
        fd = table.pidfd_open(ident.pid)
    except OSError:
        # ProcessLookupError (gone), ProcUnreadable, EMFILE...: nothing proven.
        return False
    try:
        try:
            st = table.stat(ident.pid)
            if st is None or st.starttime != ident.starttime:
                return False  # the pid we pinned is not the process we verified
            if table.boot_id() != ident.boot_id:
                return False
            if marker is not None and not _carries(table, ident.pid, marker):
                return False
            table.pidfd_send_signal(fd, sig)
        except OSError:
            # ESRCH: it exited after we pinned it (fine, nothing to signal);
            # EPERM: not ours to signal; ProcUnreadable: unproven. All are "no".
            return False
        return True
    finally:
        try:
            table.close_fd(fd)
        except OSError:
            pass  # closing a pidfd cannot meaningfully fail; never mask the verdict
