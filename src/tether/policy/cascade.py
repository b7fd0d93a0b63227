"""Ownership carries to the end: closing a session first closes what it spawned.

The process-tree promise (nothing an agent started outlives its run) lifted to
sessions: nothing a closed session started outlives it. :func:`close_tree` closes every
open descendant of the session -- transitively, deepest first, so a child is closed
before its parent and a grandchild before its child -- and then the session itself.

Why children first: a child spawned from inside the parent's agent tree (the parent ran
``tether ... sessions new`` or called ``sessions_spawn``) has its owner process below
the parent's keeper. Ending the parent first would end that owner by signal, and the
child's row would be left open with no proof of how its run ended. Closed first, each
child ends through its own owner, which proves its own tree gone.

Authority: whoever may close the parent may close everything it started; children are
not checked again (a grandchild is outside the requester's non-transitive ``tree`` view,
but it is inside the parent's lifetime). ``[sessions] closeChildren = false`` turns the
cascade off: children are then left open and listed as orphans (their parent closed).

A session spawned while the cascade runs is caught by a second pass; the passes are
bounded, and a child that cannot be closed is reported, not hidden. When the database
cannot be read at all, the session itself is still closed (through its owner, which
needs no database) and the result says its children are unknown (``childrenUnknown``).
"""

from __future__ import annotations

from tether.errors import NoSession, StateError, TetherError
from tether.policy import access, ownership

TYPE_CHECKING = False  # typing costs the CLI's close milliseconds; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["close_tree"]

MAX_PASSES = 3


def _descendants(key: str) -> list[str]:
    from tether.state.family import open_rows

    rows = open_rows()  # sqlite3 alone: the registry's import cost more than the query
    if rows is not None:
        return ownership.close_order(key, rows)
    from tether.state.registry import Registry

    with Registry() as reg:
        return ownership.close_order(key, reg.sessions(include_closed=False))


def close_tree(
    key: str,
    close_one: Callable[[str], dict[str, Any]],
    *,
    cfg: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Close ``key``'s open descendants children-first, then ``key``; return its result.

    The result gains ``closedChildren`` (each child's key, survivors, or error) and its
    ``survivors`` include any child's survivors, so "survivors: []" still means the
    whole family is proven gone.
    """
    children: list[dict[str, Any]] = []
    unknown: str | None = None  # why the children could not be looked up
    if access.close_children_enabled(cfg):
        done: set[str] = set()
        for _ in range(MAX_PASSES):
            try:
                found = _descendants(key)
            except StateError as exc:
                # The database cannot be read (removed or locked under a live owner):
                # the session itself still closes through its owner, which needs no
                # database; the children we cannot see are said to be unknown.
                unknown = str(exc)
                break
            pending = [k for k in found if k not in done]
            if not pending:
                break
            for child in pending:
                done.add(child)
                try:
                    res = close_one(child)
                except NoSession:
                    continue
                except TetherError as exc:
                    children.append({"sessionKey": child, "error": str(exc)})
                    continue
                children.append(
                    {"sessionKey": child, "survivors": list(res.get("survivors") or [])}
                )
    result = dict(close_one(key))
    survivors = list(result.get("survivors") or [])
    for entry in children:
        survivors.extend(entry.get("survivors") or [])
    result["survivors"] = survivors
    result["closedChildren"] = children
    if unknown is not None:
        result["childrenUnknown"] = unknown
    return result
