"""A lost owner's records, corrected by whoever can prove it is dead.

An owner killed with SIGKILL (or by the OOM killer, or a power loss) writes nothing on
its way out: its session row keeps its pid and ``idle``/``running``, the turn it was
running has no ``turn_ended``, the agent run it supervised has no ``agent_run_ended``
in the journal (reconciliation records that run's end in the ``events`` table only).
Left alone, ``sessions history`` shows the turn ``running`` forever and ``status``
calls a dead session ``idle``.

Whoever can *prove* the owner is dead corrects them, once:

* the **next owner**, which holds the session's lock, at its start (after it reconciled
  the dead owner's leases), when its journal writer found the previous reservation
  never released (:func:`tether.state.journal.store.unreleased`);
* **any reader** (``status``, ``sessions show``) that finds an owner recorded as
  running and takes the session's lock itself: the lock is a ``flock`` the owner holds
  for life and the kernel releases on any death, so a free lock is proof -- never a
  guess from a pid that may have been reused. The reader writes as the journal's
  writer (it holds the lock) and marks the owner ``dead``, which ``status`` reports
  until a new owner starts.

The corrections: every turn of the lost owner without an end gets ``turn_ended`` with
``stopReason`` ``owner-lost``; every agent run it started without an end gets its
``agent_run_ended`` (the reconciler's record when there is one). The journal's own
discontinuity is the ``journal_gap`` record (:mod:`tether.state.journal.gaps`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

from tether import _fastjson, sessions
from tether.errors import TetherError

__all__ = [
    "OWNER_LOST",
    "at_owner_start",
    "correct",
    "correct_if_dead",
    "correct_offline",
    "unfinished",
    "was_lost",
]

OWNER_LOST = "owner-lost"
_KINDS = ("owner_started", "prompt_queued", "turn_started", "turn_ended")
_RUN_KINDS = ("agent_run_started", "agent_run_ended")
logger = logging.getLogger("tether.owner")

# (seq, kind, request id, body) of the journal's control records, in seq order.
MarkRow = tuple[int, str, "str | None", str]
# Journal one control record: (kind, payload, request id).
Append = Callable[[str, dict[str, Any], "str | None"], object]


def unfinished(rows: Iterable[MarkRow]) -> tuple[dict[str, bool], dict[str, dict[str, Any]]]:
    """What the last owner in ``rows`` left open: its turns (request id -> whether it
    had started) and its agent runs (lease id -> the run's start record). No I/O.

    Only the records after the last ``owner_started`` count: turns and runs of earlier
    owners were ended (or corrected) by them.
    """
    turns: dict[str, bool] = {}
    runs: dict[str, dict[str, Any]] = {}
    for _seq, kind, rid, raw in rows:
        if kind == "owner_started":
            turns.clear()
            runs.clear()
        elif kind in ("prompt_queued", "turn_started") and rid:
            turns[rid] = kind == "turn_started" or turns.get(rid, False)
        elif kind == "turn_ended" and rid:
            turns.pop(rid, None)
        elif kind in _RUN_KINDS:
            body = _fastjson.loads(raw)
            lease = body.get("leaseId") if isinstance(body, dict) else None
            if isinstance(lease, str) and kind == "agent_run_started":
                runs[lease] = body
            elif isinstance(lease, str):
                runs.pop(lease, None)
    return turns, runs


def correct(registry: Any, key: str, append: Append, *, before: int | None = None) -> int:
    """Journal the ends the lost owner never wrote; returns how many. The caller holds
    the session's lock (it is the journal's writer) and appends with ``append``;
    ``before``: only records below this seq are the lost owner's (a new owner's own
    records may already be stored)."""
    rows: list[MarkRow] = registry.journal_marks(key, (*_KINDS, *_RUN_KINDS), before=before)
    turns, runs = unfinished(rows)
    for rid, started in turns.items():
        append(
            "turn_ended",
            {
                "stopReason": OWNER_LOST,
                "error": "the session's owner was lost (killed) "
                + ("during this turn" if started else "before this turn started"),
            },
            rid,
        )
    ended = {
        e["payload"].get("leaseId"): e["payload"]
        for e in registry.events(key, kind="agent_run_ended", limit=50)
    }
    for lease in runs:
        append("agent_run_ended", ended.get(lease) or _run_lost(lease), None)
    return len(turns) + len(runs)


def _run_lost(lease: str) -> dict[str, Any]:
    return {
        "reason": "terminated",
        "terminatedBy": "daemon",
        "message": f"{OWNER_LOST}: the owner died during this run; its keeper ends the tree",
        "exitCode": None,
        "signal": None,
        "stderrTail": "",
        "leaseId": lease,
    }


def at_owner_start(registry: Any, key: str, journal: Any, append: Append) -> None:
    """A new owner's start (it holds the lock): reconcile the previous owner's leases;
    if that owner was lost (``journal.lost_after``), correct its records."""
    from tether.supervise.reconcile import reconcile

    try:
        reconcile(registry, session_key=key)
        if journal is not None and journal.lost_after is not None:
            correct(registry, key, append, before=journal.first_seq)
    except Exception:
        logger.exception("reconcile at owner start failed")


def was_lost(registry: Any, key: str, session: Any) -> bool:
    """Whether the session's last owner was lost, for a caller that holds the lock (so
    no owner runs): its row still names it running, or its journal reservation was
    never released."""
    if session.owner_pid is not None and session.owner_status not in ("stopped", "dead"):
        return True
    return registry.journal_unreleased(key) is not None


def correct_offline(registry: Any, key: str) -> int:
    """:func:`correct` by a writer that runs no owner (it holds the session's lock):
    each record in a transaction of its own, the first after the journal's gap record."""

    def append(kind: str, payload: dict[str, Any], rid: str | None) -> None:
        registry.journal_append(key, kind, payload, request_id=rid)

    return correct(registry, key, append)


def correct_if_dead(registry: Any, key: str) -> bool:
    """A reader's correction: if the session records a running owner and its lock is
    free (proof that owner is dead), correct its records and mark it ``dead``; True if
    we did. Never waits: an owner holding the lock is alive, and we leave it alone."""
    session = registry.session(key)
    if session is None or session.owner_pid is None or session.owner_status in ("stopped", "dead"):
        return False
    try:
        fd = sessions.try_lock(key)
    except OSError:  # no lock file we may open (another user's home): cannot prove it
        return False
    if fd is None:
        return False  # an owner holds it: alive (or starting); not ours to judge
    try:
        return _correct_dead(registry, key)
    except (TetherError, *registry.ERRORS) as exc:  # a full disk: the reader still answers
        logger.warning("could not correct a lost owner's records: %s", exc)
        return False
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def _correct_dead(registry: Any, key: str) -> bool:
    """:func:`correct_if_dead` once the lock is ours."""
    session = registry.session(key)  # under the lock: no owner can change it now
    if session is None or session.owner_pid is None:
        return False
    if session.owner_status in ("stopped", "dead"):
        return False
    from tether.supervise.reconcile import reconcile

    # The dead owner's leases first (its keeper ends the tree; we verify and close
    # the records), so the run's end is the reconciler's record.
    try:
        reconcile(registry, session_key=key)
    except Exception:  # the records are still corrected; `tether reap` retries
        logger.exception("reconcile after a lost owner failed")

    correct_offline(registry, key)  # its first append is the journal's gap record
    registry.update_session(
        key,
        owner_status="dead",
        owner_pid=None,
        owner_socket=None,
        queue_depth=0,
        current_request=None,
    )
    return True
