"""The marked tree: which live processes carry a lease's marker, children first.

Split out of :mod:`tether.supervise.verify` by concept (no I/O of its own: everything is
read through the :class:`tether._os.ProcessTable` passed in). :mod:`.verify` weighs one
process's identity; this module lists the processes a lease's marker names -- below a
verified root (:func:`plan_tree_kill`) or anywhere in the table (:func:`marked_survivors`)
-- in the order they must be signalled: each before its ancestors. A marker only makes a
process a candidate; each is still signalled through
:func:`tether.supervise.verify.signal_verified`, and where a claim alone is not enough,
:mod:`.proof` decides membership.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from tether._os import ProcessTable

__all__ = ["carries", "marked_survivors", "order_children_first", "plan_tree_kill"]


def carries(table: ProcessTable, pid: int, marker: tuple[bytes, bytes]) -> bool:
    """Whether ``pid`` carries ``marker`` (``(key, value)``) in its environment."""
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
        if not carries(table, pid, marker):
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
