"""The rest of one turn, from the session's journal: how an async caller finishes a turn
its owner let go of it in.

An owner never slows a turn for a caller: one that falls behind its bounded output
buffer gets a terminal ``lagged`` frame (carrying the last ``seq`` it was given) and is
dropped, and one whose connection is cut learns nothing more. The turn goes on, and
every frame of it is journaled, so the caller reads the rest from there -- the stored
entries, then the live owner's, across owner restarts -- until the turn's
``turn_ended``. The operations layer's turn loop (:mod:`tether.operations.prompting`)
does this for every door: a blocking caller (``tether prompt``) through
:meth:`TurnRest.read`, over :func:`tether.operations.watch` in its own thread; an
asyncio one (the ACP door, the gateway's ``?wait=true``, the library's
``Session.prompt``) through :meth:`TurnRest.frames`, over
:func:`tether.operations.watch_batches` (the follower: the database read in a thread of
its own, the live owner on the loop), where what of each entry matters to the turn is
picked out as it is read and the turn's incoming ACP frames reach the event loop in
order.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from tether.errors import NoSession, OwnerLost, SessionClosed, error_from_wire
from tether.operations.watching import watch, watch_batches
from tether.state.journal.entry import parse_line
from tether.state.journal.follow import is_session_end

__all__ = ["TurnRest"]


class TurnRest:
    """Turn ``rid`` of session ``key`` after seq ``after``, from the journal.

    Args:
        follow: its owner still runs the turn (``lagged``), so wait for its end; else
            (the owner is gone) read only what is stored.
    """

    def __init__(
        self, key: str, rid: str, after: int, *, follow: bool, door: str | None = None
    ) -> None:
        self.key = key
        self.rid = rid
        self.after = after
        self.follow = follow
        self.door = door  # who reads it (``cli``...), shown in the owner's status
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
            door=self.door,
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

    def read(self, on_frame: Callable[[int, object, dict[str, Any]], None]) -> None:
        """The blocking flavour of :meth:`frames`: ``on_frame(seq, direction, frame)``
        for each ACP frame of the turn, either direction, in order; then ``outcome``.

        Runs in the caller's thread (a blocking caller, such as ``tether prompt``,
        calls it directly).
        """
        outcome = self.outcome
        stop = threading.Event()
        followers: list[Any] = []

        def emit(seq: int, line: str) -> None:
            if self.mark in line[:200]:
                entry = parse_line(line)
                kind = entry.get("kind")
                if kind == "acp":
                    frame = entry.get("frame")
                    if isinstance(frame, dict):
                        on_frame(seq, entry.get("direction"), frame)
                elif kind == "turn_ended":
                    outcome.update(entry)
            elif is_session_end(line):
                outcome["sessionEnded"] = parse_line(line)
            if outcome:  # the turn's end, or the session's: nothing more to read
                stop.set()
                for follower in followers:
                    follower.interrupt()

        with contextlib.suppress(NoSession):  # removed meanwhile: its outcome is unknown
            watch(
                self.key,
                emit,
                check=False,  # the turn's own caller: it prompted the session
                from_seq=self.after + 1,
                follow=self.follow,
                stop=stop,
                on_start=followers.append,
                door=self.door,
            )

    def _item(self, seq: int, line: str) -> tuple[int, str, dict[str, Any]] | None:
        """Where the follower reads: what of an entry matters to the turn, decoded."""
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
