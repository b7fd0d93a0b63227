"""One ACP client's attachment to one Tether session: the journal followed live.

While a client is attached (``session/new``, ``session/load``, ``session/resume``) the
door follows the session's journal from the attach point on
(:func:`tether.operations.watch_batches`: the follower -- the database in a thread of
its own, then the live owner's ``watch`` on the loop, across owner restarts), and hands
every entry to its handler on the loop. Two kinds
of entry matter to the client:

* ``session_ended`` -- the session ended, however (closed, terminated, offline): the
  client gets ``_tether/session/ended`` exactly once, and the attachment ends;
* the ACP frames of a turn *another party* prompted (a CLI, a second ACP client): the
  client sees its ``session/update`` s too (and the prompt as ``user_message_chunk`` s).
  The door's own turns are relayed from their IPC stream, in order and before their
  answer, so entries carrying one of this door's request ids are skipped here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from tether import _aio, operations
from tether.errors import NoSession
from tether.state.journal.entry import parse_line
from tether.state.journal.follow import Follower, is_session_end

__all__ = ["Attachment", "entries_between", "last_seq_of_open", "read_entries"]

logger = logging.getLogger("tether.acp_door")
RETRY_S = 1.0  # after an unexpected failure of the follower, before following on
STOP_S = 6.0  # an interrupted follower returns at once; this only bounds a stuck read
_FOLLOWING: set[asyncio.Task[None]] = set()  # attachments' follow tasks, held until they end
# A replay waits this long at most for entries the owner has handed out but not yet
# stored (it follows the live owner for them); they were relayed, so they do come.
REPLAY_WAIT_S = 10.0
CATCH_UP_S = 1.0  # how long a turn may wait for the follower to pass what came before it

# (attachment, parsed entry) -> None, called on the loop
EntryHandler = Callable[["Attachment", dict[str, Any]], None]


class Attachment:
    """This door's view of one session it serves. See the module docstring."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.own_requests: set[str] = set()  # IPC request ids of this door's turns
        self.running: list[str] = []  # those still waiting for their answer
        self.ended = False  # _tether/session/ended was sent
        self.cursor = 0  # the next seq to reach the loop (every one before it has)
        self._task: asyncio.Task[None] | None = None

    @property
    def following(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, from_seq: int, on_entry: EntryHandler) -> None:
        """Follow the journal from ``from_seq`` on; entries reach ``on_entry`` on the loop."""
        self.cursor = from_seq
        self._task = _aio.spawn(self._follow(on_entry), keep=_FOLLOWING, name="acp-follow")

    async def _follow(self, on_entry: EntryHandler) -> None:
        # Until the session ends or we stop: an unexpected failure (a database hiccup)
        # must not cost the client its ended notification, so we log it and follow on
        # from the next entry we have not delivered.
        while True:
            batches = operations.watch_batches(
                self.key, self._relevant, check=False, from_seq=self.cursor, door="acp"
            )
            try:
                async with contextlib.aclosing(batches):
                    async for batch in batches:
                        for seq, entry in batch:
                            self.cursor = seq + 1
                            if entry is not None:
                                on_entry(self, entry)
                return  # the session ended
            except NoSession:
                return  # removed (`sessions prune --closed`): nothing more to follow
            except Exception:  # a task has nobody to raise to: log, then go on
                logger.exception("following session %s failed; following on", self.key)
                await asyncio.sleep(RETRY_S)

    def _relevant(self, seq: int, line: str) -> tuple[int, dict[str, Any] | None]:
        """Where the follower reads (the loop, for a live owner): only what the client
        can use is decoded -- the session's end, and the ACP frames of other parties'
        turns. This door's own turns are relayed from their IPC stream: their entries
        pass undecoded (each frame of a turn decoded twice was the door's cost)."""
        if is_session_end(line):
            return seq, parse_line(line)
        head = line[:200]
        if '"kind":"acp"' not in head[:120]:
            return seq, None
        if self.own_requests and _request_id(head) in self.own_requests:
            return seq, None
        return seq, parse_line(line)

    async def caught_up(self, through: int, timeout: float = CATCH_UP_S) -> None:
        """Wait (bounded) until every entry up to ``through`` has reached the loop.

        A turn of this door is relayed from its own IPC stream, other parties' entries
        from this follower: so that the client sees them in journal order (and each
        event's id is its seq), a turn starts only once the follower has passed
        everything journaled before it (e.g. the agent's notes after ``session/new``).
        """
        deadline = asyncio.get_running_loop().time() + timeout
        while self.cursor <= through and self.following:
            if asyncio.get_running_loop().time() >= deadline:
                logger.warning("session %s: the journal follower lags; going on", self.key)
                return
            await asyncio.sleep(0.001)
        await asyncio.sleep(0)

    async def stop(self) -> None:
        """Stop following (idempotent); returns once the follower has let go (bounded)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await _aio.settle(task, STOP_S)


def _request_id(head: str) -> str | None:
    """The ``requestId`` of an entry line's head, undecoded (ids are plain tokens)."""
    at = head.find(_REQUEST_ID)
    if at < 0:
        return None
    start = at + len(_REQUEST_ID)
    end = head.find('"', start)
    return head[start:end] if end > 0 else None


_REQUEST_ID = '"requestId":"'


def last_seq_of_open(key: str, action: str) -> int:
    """The journal's last seq of the open session ``key`` (blocking), once the requester
    may ``action`` it (``history`` for a load, ``watch`` for a resume).

    Raises:
        NoSession: no such session, or it was closed.
        VisibilityDenied: the requester (an agent of a supervised tree) may not.
    """
    return int(operations.last_seq(key, action, open_only=True))


def read_entries(key: str, cursor: int, upto: int) -> list[tuple[int, dict[str, Any]]]:
    """One chunk of stored entries ``cursor <= seq <= upto``, parsed (blocking)."""
    return [(seq, parse_line(line)) for seq, line in operations.read_lines(key, cursor, upto=upto)]


def entries_between(key: str, after: int, upto: int) -> list[tuple[int, dict[str, Any]]]:
    """Session ``key``'s entries ``after < seq <= upto``, parsed (blocking).

    Followed rather than only read: the newest ones may still be in the owner's batch,
    not yet in the database; the follower gets them from the live owner. Bounded by
    ``REPLAY_WAIT_S`` (what arrived by then is returned).
    """
    out: list[tuple[int, dict[str, Any]]] = []
    if upto <= after:
        return out
    stop = threading.Event()
    followers: list[Follower] = []

    def emit(seq: int, line: str) -> None:
        if seq <= upto:
            out.append((seq, parse_line(line)))
        if seq >= upto:
            for follower in followers:
                follower.interrupt()

    def give_up() -> None:
        stop.set()
        for follower in followers:
            follower.interrupt()

    timer = threading.Timer(REPLAY_WAIT_S, give_up)
    timer.start()
    try:
        operations.watch(
            key,
            emit,
            check=False,  # the caller checked (last_seq_of_open)
            from_seq=after + 1,
            follow=True,
            stop=stop,
            on_start=followers.append,
            door="acp",
        )
    except NoSession:
        pass  # removed meanwhile: nothing to replay
    finally:
        timer.cancel()
    return out
