"""The rest of one turn, from the session's journal: how a caller finishes a turn its
owner let go of it in.

An owner never slows a turn for a caller: one that falls behind its bounded output
buffer gets a terminal ``lagged`` frame (carrying the last ``seq`` it was given) and is
dropped, and one whose connection is cut learns nothing more. The turn goes on, and
every frame of it is journaled, so the caller reads the rest from there -- the stored
entries, then the live owner's, across owner restarts (:func:`follow_session`) -- until
the turn's ``turn_ended``. The operations layer's turn loop (:mod:`tether.operations.prompting`)
does this for every door: a blocking caller through :meth:`TurnRest.read` in its own
thread, an asyncio one through :meth:`TurnRest.frames`, where the follower runs in a
thread of its own (it blocks on the database and the owner's socket) and hands each of
the turn's incoming ACP frames to the event loop in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

from tether import _aio
from tether.errors import NoSession, OwnerLost, SessionClosed, error_from_wire
from tether.state.journal.entry import parse_line
from tether.state.journal.follow import Follower, follow_session, is_session_end

__all__ = ["TurnRest"]

CLEANUP_S = 5.0  # how long a cancelled reader waits for the follower thread to let go
_DONE = object()


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
        self._stop = threading.Event()
        self._followers: list[Follower] = []

    async def frames(self) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """``(seq, frame)`` of each ACP frame the agent sent in the rest of the turn, in
        order; ``outcome`` is set once it is exhausted.

        Cancellation (or the iterator closed early): the follower is stopped (bounded)
        before it propagates.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        def on_frame(seq: int, direction: object, frame: dict[str, Any]) -> None:
            if direction == "in":
                loop.call_soon_threadsafe(queue.put_nowait, (seq, frame))

        def work() -> None:
            try:
                self.read(on_frame)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody reads
                    loop.call_soon_threadsafe(queue.put_nowait, _DONE)

        thread = _aio.spawn(asyncio.to_thread(work))
        try:
            while (item := await queue.get()) is not _DONE:
                yield item
            await thread  # its error, if the follower failed
        finally:
            if not thread.done():
                self._stop.set()
                for follower in self._followers:
                    follower.interrupt()
                await _aio.settle(thread, CLEANUP_S)  # its error dropped: we are leaving anyway

    def read(self, on_frame: Any) -> None:
        """The blocking read under :meth:`frames`: ``on_frame(seq, direction, frame)``
        for each ACP frame of the turn, either direction, in order; then ``outcome``.

        Runs in the caller's thread (a blocking caller, such as ``tether prompt``,
        calls it directly).
        """
        outcome = self.outcome
        mark = '"requestId":"' + self.rid + '"'

        def emit(seq: int, line: str) -> None:
            if mark in line[:200]:
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
            if outcome:
                for follower in self._followers:
                    follower.interrupt()

        with contextlib.suppress(NoSession):  # removed meanwhile: its outcome is unknown
            follow_session(
                self.key,
                emit,
                from_seq=self.after + 1,
                follow=self.follow,
                stop=self._stop,
                on_start=self._followers.append,
                door=self.door,
            )

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
