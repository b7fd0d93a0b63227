"""Session ownership as data: the JSON fields, the ownership forest, the close order.

No I/O: everything here works on :class:`tether.state.registry.Session` rows (or anything
with the same attributes) that the caller has already read.

A row's *parent* is its ``parentSessionKey``, else its ``spawnedBy``, else its
``ownerSessionKey``; a row with none of them is operator-owned (every row created
before ownership existed is). The forest is drawn from parents; closing follows it
transitively, children first, so nothing a closed session started outlives it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs the CLI's close milliseconds; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any, Protocol

    from tether.policy.visibility import Row
    from tether.state.registry import Session as _SessionLike

    class _Linked(Protocol):
        """What the ownership forest reads of a row: the registry's ``Session``, or the
        family reader's lighter row (:mod:`tether.state.family`)."""

        @property
        def key(self) -> str: ...
        @property
        def state(self) -> str: ...
        @property
        def parent_session_key(self) -> str | None: ...
        @property
        def spawned_by(self) -> str | None: ...
        @property
        def owner_session_key(self) -> str | None: ...


__all__ = [
    "close_order",
    "descends_from",
    "ownership_json",
    "parent_of",
    "row_of",
    "tree_lines",
]

MAX_LINEAGE = 256  # a parent chain longer than this is a cycle in hand-edited rows


def row_of(session: _SessionLike) -> Row:
    """The visibility check's view of a session row."""
    # Imported here: closing a family (tether.policy.cascade) needs only the forest below, and
    # the visibility rules' dataclasses cost the CLI's close milliseconds (issue 23).
    from tether.policy.visibility import Row

    return Row(
        key=session.key,
        agent_id=session.agent_id or session.agent_label,
        owner_session_key=session.owner_session_key,
        spawned_by=session.spawned_by,
        parent_session_key=session.parent_session_key,
    )


def ownership_json(session: _SessionLike, instance_id: str) -> dict[str, Any]:
    """The ownership fields of a ``--format json`` session row, under the seed's names."""
    return {
        "agentId": session.agent_id or session.agent_label,
        "ownerSessionKey": session.owner_session_key,
        "spawnedBy": session.spawned_by,
        "parentSessionKey": session.parent_session_key,
        "instanceId": instance_id,
        "createdAt": session.created_at,
        "sandboxed": bool(session.sandboxed),
    }


def parent_of(session: _Linked) -> str | None:
    """The key this row hangs under in the ownership forest (None: operator-owned)."""
    return session.parent_session_key or session.spawned_by or session.owner_session_key


def descends_from(
    session: _SessionLike, root: str, lookup: Callable[[str], _SessionLike | None]
) -> bool:
    """Whether ``root`` is a (transitive) parent of ``session``; ``lookup`` reads a row.

    Bounded (:data:`MAX_LINEAGE`): a cycle in hand-edited rows ends the walk with False.
    """
    current: _SessionLike | None = session
    for _ in range(MAX_LINEAGE):
        if current is None:
            return False
        parent = parent_of(current)
        if parent is None or parent == current.key:
            return False
        if parent == root:
            return True
        current = lookup(parent)
    return False


def _children_map(
    pairs: Iterable[tuple[str, str | None]],
) -> tuple[list[str], dict[str, list[str]]]:
    """Roots and children from ``(key, parent)`` pairs, in the given order."""
    items = list(pairs)
    keys = {k for k, _ in items}
    roots: list[str] = []
    children: dict[str, list[str]] = {}
    for key, parent in items:
        if parent is None or parent not in keys or parent == key:
            roots.append(key)  # operator-owned, or its parent is not in the listing
        else:
            children.setdefault(parent, []).append(key)
    return roots, children


def tree_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ownership forest of described rows (``sessions list`` records), roots first."""
    by_key = {r["key"]: r for r in records}
    roots, children = _children_map(
        (r["key"], r.get("parentSessionKey") or r.get("spawnedBy") or r.get("ownerSessionKey"))
        for r in records
    )
    lines: list[str] = []
    seen: set[str] = set()

    def walk(key: str, prefix: str, last: bool, top: bool) -> None:
        if key in seen:  # a cycle in hand-edited rows: draw each row once
            return
        seen.add(key)
        r = by_key[key]
        branch = "" if top else ("└── " if last else "├── ")
        label = f"{r['name'] or '(default)'} [{r.get('agentId')}] {r['state']} {key[:12]}"
        lines.append(f"{prefix}{branch}{label}")
        kids = children.get(key, [])
        for i, kid in enumerate(kids):
            extension = "" if top else ("    " if last else "│   ")
            walk(kid, prefix + extension, i == len(kids) - 1, False)

    for root in roots:
        walk(root, "", True, True)
    for r in records:  # rows only reachable through a cycle
        walk(r["key"], "", True, True)
    return lines


def close_order(root: str, sessions: Iterable[_Linked]) -> list[str]:
    """Every open descendant of ``root`` (transitively), children before their parents.

    ``root`` itself is not included: the caller closes it last. Cycles in hand-edited
    rows are cut (each key appears once).
    """
    _roots, children = _children_map(
        (s.key, parent_of(s)) for s in sessions if s.state != "closed" or s.key == root
    )
    order: list[str] = []
    seen = {root}

    def walk(key: str) -> None:
        for kid in children.get(key, []):
            if kid not in seen:
                seen.add(kid)
                walk(kid)
                order.append(kid)

    walk(root)
    return order
