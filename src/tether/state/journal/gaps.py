"""Where a journal has holes, and why: the ``journal_gap`` record. No I/O.

Theory of operation
-------------------
Seqs increase by one, with three exceptions, each of which leaves a *discontinuity*:

* **owner-lost** -- an owner died (SIGKILL, OOM, power) without releasing its
  reservation (:func:`tether.state.journal.store.claim`): the seqs it may have handed out
  live are never reused, so the next writer starts past them;
* **entries-dropped** -- the owner could not store entries in time (a full or failing
  disk) and gave them up rather than grow without bound or stop the turn;
* **retention** -- the oldest entries were deleted (``journalMaxEntries``,
  ``journalMaxBytes``, ``journalMaxAge``, ``sessions prune``).

A reader must be able to tell a crash from a loss, so the first entry after each
discontinuity is a ``journal_gap`` record naming the seq the journal continues
``after`` and the ``reason``. For an owner lost it is the new writer's first entry;
for dropped or retained entries it takes the seq of the *last* entry it replaces (that
seq was handed out, so it cannot be given to anything else), and ``entries`` counts
what it stands for, itself included. Replays therefore stay in seq order with no
duplicate: a watcher that saw dropped entries live keeps them, a replay shows the
gap record at the last of their seqs.
"""

from __future__ import annotations

from typing import Any, Final

from tether import _fastjson
from tether.state.journal.entry import body_of, entry_line

__all__ = [
    "DROPPED",
    "GAP_KIND",
    "OWNER_LOST",
    "RETENTION",
    "drop_oldest",
    "gap_after",
    "gap_item",
    "gap_payload",
    "gap_text",
]

GAP_KIND: Final = "journal_gap"
OWNER_LOST: Final = "owner-lost"
DROPPED: Final = "entries-dropped"
RETENTION: Final = "retention"

_WHY: Final = {
    OWNER_LOST: "the previous owner was lost; entries it handed out may not be stored",
    DROPPED: "entries could not be stored in time and were dropped",
    RETENTION: "older entries were removed by retention",
}

# One entry as the writer keeps it: (seq, at, public line, (kind, request id, body) | None).
Item = tuple[int, float, bytes, "tuple[str, str | None, str] | None"]


def gap_payload(
    after: int, reason: str, *, entries: int | None = None, **extra: Any
) -> dict[str, Any]:
    """The body of a ``journal_gap`` record."""
    payload: dict[str, Any] = {
        "after": after,
        "reason": reason,
        "message": _WHY.get(reason, reason),
    }
    if entries is not None:
        payload["entries"] = entries
    payload.update(extra)
    return payload


def gap_text(entry: dict[str, Any]) -> str:
    """One line for a person (``sessions watch``, ``sessions read``)."""
    count = entry.get("entries")
    lost = f"; {count} entries" if isinstance(count, int) else ""
    return (
        f"[journal] continues after seq {entry.get('after')}: {entry.get('reason')}{lost}"
        f" ({entry.get('message') or ''})"
    ).replace(" ()", "")


def gap_after(kind: str, body: dict[str, Any], seq: int, reason: str) -> int:
    """The seq a run starting with this entry continues after: a gap record of the same
    ``reason`` carries its own ``after`` forward (two gaps in a row are one)."""
    after = body.get("after")
    if kind == GAP_KIND and body.get("reason") == reason and isinstance(after, int):
        return after
    return seq - 1


def gap_item(
    seq: int, at: float, after: int, reason: str, entries: int | None, **extra: Any
) -> Item:
    """A ``journal_gap`` record as the writer stores it."""
    body = body_of(gap_payload(after, reason, entries=entries, **extra))
    return seq, at, entry_line(seq, at, GAP_KIND, None, body).encode(), (GAP_KIND, None, body)


def _is_gap(item: Item, reason: str | None = None) -> bool:
    mark = item[3]
    if mark is None or mark[0] != GAP_KIND:
        return False
    return reason is None or _fastjson.loads(mark[2]).get("reason") == reason


def _kind_body(item: Item) -> tuple[str, dict[str, Any]]:
    mark = item[3]
    if mark is None or mark[0] != GAP_KIND:
        return (mark[0] if mark is not None else "acp"), {}
    body = _fastjson.loads(mark[2])
    return mark[0], body if isinstance(body, dict) else {}


def _entries_of(item: Item) -> int:
    count = _kind_body(item)[1].get("entries")
    return count if isinstance(count, int) and count > 0 else 1


MARKER_BYTES: Final = 256  # about what one gap record costs in memory


def drop_oldest(pending: list[Item], excess: int, **extra: Any) -> tuple[list[Item], int]:
    """Give up at least ``excess`` bytes of the oldest unstored entries.

    Each run of consecutive dropped entries becomes one ``journal_gap`` record
    (``entries-dropped``) at the seq of the run's last entry. ACP frames go first;
    control records (a turn's start and end: what history is built from) are kept
    unless dropping every frame was not enough. ``pending`` is in seq order, with no
    seq missing but those that earlier gap records stand for. ``extra`` goes into each
    gap record (``cause``: the error that made us drop).

    Returns the new pending list and how many entries were given up.
    """
    out, freed, lost = _drop(pending, excess, keep_marks=True, **extra)
    if freed < excess:
        out, _freed, more = _drop(out, excess - freed, keep_marks=False, **extra)
        lost += more
    return out, lost


def _drop(
    pending: list[Item], excess: int, *, keep_marks: bool, **extra: Any
) -> tuple[list[Item], int, int]:
    """One pass of :func:`drop_oldest`; returns (pending, bytes freed, entries lost)."""
    out: list[Item] = []
    run: list[Item] = []
    run_bytes = freed = lost = 0

    def close_run() -> None:
        nonlocal freed, lost, run_bytes
        if not run:
            return
        first, last = run[0], run[-1]
        kind, body = _kind_body(first)
        after = gap_after(kind, body, first[0], DROPPED)
        count = sum(_entries_of(i) for i in run)
        marker = gap_item(last[0], last[1], after, DROPPED, count, **extra)
        freed += run_bytes - len(marker[2])
        lost += sum(1 for i in run if not _is_gap(i, DROPPED))
        out.append(marker)
        run.clear()
        run_bytes = 0

    for index, item in enumerate(pending):
        if freed + run_bytes >= excess + MARKER_BYTES:
            close_run()
            out.extend(pending[index:])
            return out, freed, lost
        if item[3] is None or not keep_marks or _is_gap(item, DROPPED):
            run.append(item)
            run_bytes += len(item[2])
        else:
            close_run()
            out.append(item)
    close_run()
    return out, freed, lost
