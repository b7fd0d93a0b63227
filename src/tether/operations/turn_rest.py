"""The rest of one turn, from the session's journal: how an async caller finishes a turn
its owner let go of it in.

An owner never slows a turn for a caller: one that falls behind its bounded output
buffer gets a terminal ``lagged`` frame (carrying the last ``seq`` it was given) and is
dropped, and one whose connection is cut learns nothing more. The turn goes on, and
every frame of it is journaled, so the caller reads the rest from there -- the stored
entries, then the live owner's, across owner restarts -- until the turn's
``turn_ended``. ``tether prompt`` does this in its own thread; the ACP door, the
gateway's ``?wait=true`` and the library's ``Session.prompt`` use :class:`TurnRest`.

The follower is :func:`tether.operations.watch_batches` (in a thread of its own: it
blocks on the database and the owner's socket); what of each entry matters to the turn
is picked out in that thread, and the turn's incoming ACP frames reach the event loop
in order.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from tether.errors import NoSession, OwnerLost, SessionClosed, error_from_wire
from tether.journal.entry import parse_line
from tether.journal.follow import is_session_end
from tether.operations.watching import watch_batches

__all__ = ["TurnRest"]


class TurnRest:
    """Turn ``rid`` of session ``key`` after seq ``after``, from the journal.

    Args:
        follow: its owner still runs the turn (``lagged``), so wait for its end; else
            (the owner is gone) read only what is stored.
    """

    def __init__(self, key: str, rid: str, after: int, *, follow: bool) -> None:
        self.key = key
        self.rid = rid
        self.after = after
        self.follow = follow
        # The turn's ``turn_ended`` entry, or {"sessionEnded": entry}, or {} (neither
        # came: not stored and not followed, or stopped).
        self.outcome: dict[str, Any] = {}
        self.mark = '"requestId":"' + rid + '"'

    async def frames(self) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """``(seq, frame)`` of each ACP frame the agent sent in the rest of the turn, in
        order; ``outcome`` is set once it is exhausted.

        Cancellation (or the iterator closed early): the follower is stopped (bounded,
        :func:`tether.operations.watch_batches`) before it propagates.
        """
        batches = watch_batches(
            self.key,
            self._item,
            check=False,  # the turn's own caller: it prompted the session
            from_seq=self.after + 1,
            follow=self.follow,
        )
        try:
            async with contextlib.aclosing(batches):
                async for batch in batches:
                    for seq, what, entry in batch:
                        if what == "frame":
                            yield seq, entry
                        else:  # the turn's end, or the session's: nothing more to read
                            self.outcome.update(entry if what == "turn" else {what: entry})
                            return
        except NoSession:
            pass  # removed meanwhile: its outcome is unknown

    def _item(self, seq: int, line: str) -> tuple[int, str, dict[str, Any]] | None:
        """In the follower's thread: what of an entry matters to the turn, decoded."""
        if self.mark in line[:200]:
            entry = parse_line(line)
            kind = entry.get("kind")
            if kind == "acp" and entry.get("direction") == "in":
                frame = entry.get("frame")
                if isinstance(frame, dict):
                    return seq, "frame", frame
            elif kind == "turn_ended":
                return seq, "turn", entry
        elif is_session_end(line):
            return seq, "sessionEnded", parse_line(line)
        return None

    def stop_reason(self) -> str:
        """The turn's stop reason, once :meth:`frames` is exhausted.

        Raises:
            TetherError: the turn's own error, as journaled.
            SessionClosed: the session ended during the turn.
            OwnerLost: the journal has no end for it (its owner died): outcome unknown.
        """
        outcome = self.outcome
        if "stopReason" in outcome:
            return str(outcome["stopReason"] or "end_turn")
        if "error" in outcome:
            raise error_from_wire(
                {"message": str(outcome["error"]), "type": outcome.get("errorType")}
            )
        if "sessionEnded" in outcome:
            raise SessionClosed("the session ended during the turn", session_key=self.key)
        raise OwnerLost(
            "the owner went away before the turn finished; its outcome is unknown",
            request_id=self.rid,
        )
