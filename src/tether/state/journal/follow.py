"""Following a session's journal from outside its owner: the reader side of watchers.

A follower needs no owner and starts none. It reads the stored entries from its cursor;
when it has caught up it attaches to the live owner with an IPC ``watch`` request from
the same cursor and receives every new entry the moment it is journaled. When the owner
retires, is replaced, or drops the follower for lagging, the follower goes back to the
database from the last ``seq`` it delivered, then to whichever owner serves the session
next -- so it sees every entry across owner restarts with no gap and no duplicate,
until the session ends (its ``session_ended`` entry) or the caller stops it.

Blocking and standard-library based, like the CLI's IPC client. The asyncio flavour
(:mod:`tether.operations.watching`) runs it in a thread too, but follows a live owner on
its loop through :attr:`Follower.attach`, with the same request
(:meth:`Follower.watch_request`) and frame handlers (:meth:`Follower.live_handlers`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tether import sessions
from tether.errors import (
    OwnerLost,
    OwnerShuttingDown,
    OwnerUnavailable,
    RemoteProtocolError,
    WatchLagged,
)
from tether.ipc.client import (
    BlockHandler,
    FrameHandler,
    OwnerConnection,
    RawHandler,
    new_request_id,
)
from tether.state.journal import live_frames, store
from tether.state.journal.entry import entry_frame_prefix
from tether.state.journal.live_frames import SESSION_END as SESSION_END

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.state._registry_journal import JournalReads

POLL_S = 0.25  # with no owner serving, how often to look for new entries or a new owner
HELLO_TIMEOUT_S = 2.0

# (seq, public JSON line) -> None
Emit = Callable[[int, str], None]
# (first seq, last seq, the public lines of first..last, without newlines) -> None
EmitBlock = Callable[[int, int, list[bytes]], None]
BLOCK_RECV = 1 << 18  # bytes per read from a live owner when relaying blocks
# Frames of the live owner other than entries (a controller's questions) -> None
OnFrame = Callable[[dict[str, Any]], object]
# Follows the live owner for a follower; whether one served (see Follower.attach).
Attach = Callable[["Follower"], bool]
# What ends a live attachment and sends the follower back to the database from its
# cursor: the entries it missed are all stored there.
LIVE_ENDS = (
    WatchLagged,
    OwnerLost,
    OwnerUnavailable,
    OwnerShuttingDown,  # it began stopping after its hello: what it stored is there
    RemoteProtocolError,
    OSError,
)


class SinkFailed(Exception):
    """Our own output failed (a reader that left: ``| head``), not the owner's link.

    The IPC client takes any ``OSError`` inside its read loop for the owner going away;
    a ``BrokenPipeError`` from writing our stdout is one, and was taken for that (issue
    21 item 10): the follower re-attached and blocked for as long as the session lived.
    So the callbacks' errors travel wrapped in this (no ``OSError``) and
    :meth:`Follower.run` re-raises the original.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _guarded(call: Callable[..., None]) -> Callable[..., None]:
    """``call``, with an ``Exception`` it raises wrapped in :class:`SinkFailed`."""

    def guarded(*args: Any) -> None:
        try:
            call(*args)
        except Exception as exc:
            raise SinkFailed(exc) from exc

    return guarded


def is_session_end(line: str) -> bool:
    """Whether an entry line is a ``session_ended`` record (without decoding it)."""
    return '"kind":"session_ended"' in line[:120]


class Follower:
    """Deliver a session's entries from ``cursor`` on, in ``seq`` order, to ``emit``."""

    def __init__(
        self,
        journal: JournalReads,
        key: str,
        cursor: int,
        emit: Emit,
        *,
        stop: threading.Event | None = None,
        control: OnFrame | None = None,
        flush: Callable[[], None] | None = None,
        emit_block: EmitBlock | None = None,
        door: str | None = None,
        on_damage: store.OnDamage | None = None,
        attach: Attach | None = None,
    ) -> None:
        self.journal = journal  # the state layer's journal reads (a Registry)
        self.door = door  # which front door watches (cli, http...): the owner lists it
        # Told of each damaged stored chunk the follower skips (its entries are missing).
        self.on_damage = on_damage
        self._passed = 0  # past the last damaged chunk skipped
        # Set: runs of consecutive live entries go here as one block (a relay that
        # handles them with a few bytes operations), the rest to ``emit`` one by one.
        self.emit_block = None if emit_block is None else _guarded(emit_block)
        # Called before each wait for more (a CLI writes its output once per batch).
        self.flush = None if flush is None else _guarded(flush)
        # Set: we attach as a controller, and the owner's question frames go here.
        self.control = control
        self.key = key
        self.cursor = cursor
        self.emit = _guarded(emit)
        self.stop = stop or threading.Event()
        self.ended = False  # the session's end was delivered
        self.conn: OwnerConnection | None = None
        # Set: follows the live owner instead of :meth:`_attach` (the asyncio flavour:
        # on the loop, while this thread waits), and says whether one served.
        self.attach = attach

    def deliver(self, seq: int, line: str) -> None:
        if seq < self.cursor:
            return  # already delivered (a replay overlapping what we had)
        self.cursor = seq + 1
        self.ended = is_session_end(line)
        self.emit(seq, line)

    def catch_up(self) -> None:
        """Deliver every stored entry from the cursor on."""
        lines = self.journal.journal_lines(self.key, self.cursor, on_damage=self._skipped)
        for seq, line in lines:
            if self.stop.is_set():
                break
            self.deliver(seq, line)
        self.cursor = max(self.cursor, self._passed)
        if self.flush is not None:
            self.flush()

    def _skipped(self, damage: store.Damage) -> None:
        """A damaged stored chunk: ``on_damage`` is told, and once the entries read with
        it are delivered, the cursor passes it for good (it is not met again)."""
        self._passed = max(self._passed, damage[1] + 1)
        if self.on_damage is not None:
            self.on_damage(damage)

    def run(self, *, follow: bool = True) -> int:
        """Deliver until the session ends (``follow``) or the stored entries run out.

        Returns the last ``seq`` delivered.

        Raises:
            Whatever ``emit``, ``emit_block`` or ``flush`` raised (``BrokenPipeError``:
            our reader left), unchanged.
        """
        try:
            while not self.stop.is_set():
                self.catch_up()
                if not follow or self.ended or self.stop.is_set():
                    break
                if not self._attach():
                    self.stop.wait(POLL_S)
        except SinkFailed as failed:
            raise failed.error from None
        return self.cursor - 1

    def _attach(self) -> bool:
        """Follow the live owner until it lets go; False if no owner serves now."""
        if self.attach is not None:
            return self.attach(self)
        try:
            conn = OwnerConnection.connect(sessions.socket_path(self.key), timeout=HELLO_TIMEOUT_S)
        except OwnerUnavailable:
            return False
        if conn.hello.get("stopping"):
            conn.close()
            return False
        self.conn = conn
        conn.before_block = self.flush
        try:
            if self.stop.is_set():
                return True  # interrupted while we connected: it saw no connection to wake
            rid, payload, prefix = self.watch_request()
            conn.send("watch", payload, request_id=rid)
            on_frame, on_raw, on_block = self.live_handlers(prefix)
            if on_block is not None:
                conn.recv_size = BLOCK_RECV
            result = conn.wait(rid, on_frame=on_frame, on_raw=on_raw, on_block=on_block)
            self.live_ended(result)
        except LIVE_ENDS:
            pass  # back to the database from our cursor; the entries are all there
        finally:
            self.conn = None
            conn.close()
        return True

    # --- one live attachment, read by either flavour -----------------------------------

    def watch_request(self) -> tuple[str, dict[str, object], bytes]:
        """The ``watch`` request from our cursor: its id, payload and entry prefix."""
        payload: dict[str, object] = {"fromSeq": self.cursor, "follow": True}
        if self.control is not None:
            payload["control"] = True
        if self.door:
            payload["client"] = self.door  # as a prompt names its door
        rid = new_request_id()
        return rid, payload, entry_frame_prefix(rid)

    def live_handlers(self, prefix: bytes) -> tuple[FrameHandler, RawHandler, BlockHandler | None]:
        """``on_frame``, ``on_raw`` and ``on_block`` for the watch's answer
        (:func:`tether.ipc.client.pump`)."""
        block = None if self.emit_block is None else live_frames.block_taker(self, prefix)
        return self._on_frame, live_frames.entry_taker(self, prefix), block

    def live_ended(self, result: dict[str, Any]) -> None:
        """The watch's terminal result: the owner let go (it retired), or the session ended."""
        if result.get("reason") == "session-ended":
            self.ended = True

    def deliver_to(self, emit: Emit, emit_block: EmitBlock | None) -> None:
        """Deliver to these from now on (the asyncio flavour's live phase delivers on
        the loop, its stored phase in the follower's thread)."""
        self.emit = _guarded(emit)
        self.emit_block = None if emit_block is None else _guarded(emit_block)

    def _on_frame(self, frame: dict[str, object]) -> None:
        if frame.get("type") != "entry":
            if self.control is not None:
                self.control(frame)
            return
        entry = frame.get("entry")
        if isinstance(entry, dict):
            seq = entry.get("seq")
            if isinstance(seq, int):
                from tether import _fastjson

                self.deliver(seq, _fastjson.dumps(entry))

    def interrupt(self) -> None:
        """Stop from another thread: wakes a blocked read."""
        self.stop.set()
        conn = self.conn
        if conn is not None:
            import socket

            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def follow_session(
    key: str,
    emit: Emit,
    *,
    from_seq: int | None = None,
    tail: int | None = None,
    follow: bool = True,
    stop: threading.Event | None = None,
    on_start: Callable[[Follower], None] | None = None,
    control: OnFrame | None = None,
    flush: Callable[[], None] | None = None,
    emit_block: EmitBlock | None = None,
    door: str | None = None,
    on_damage: store.OnDamage | None = None,
    attach: Attach | None = None,
) -> int:
    """Follow session ``key`` of the current home: the one implementation every door uses.

    Returns the last ``seq`` delivered. ``on_start`` receives the follower (a library
    keeps it to :meth:`Follower.interrupt` it from another thread). ``control``: attach
    to live owners as a controller; their question frames (``interaction``,
    ``interaction_resolved``) go to it. ``emit_block``: see :class:`Follower`. ``door``:
    which front door watches (``cli``, ``http``, ``acp``, ``library``), shown in status.
    ``on_damage``: told of each damaged stored chunk skipped (:func:`store.read`).
    ``attach``: follows the live owner instead (see :attr:`Follower.attach`).

    Raises:
        NoSession: no such session.
    """
    from tether.errors import NoSession
    from tether.state.journal.entry import start_seq
    from tether.state.registry import Registry

    with Registry() as registry:
        if registry.session(key) is None:
            raise NoSession("no such session", session_key=key)
        cursor = start_seq(registry.journal_last_seq(key), from_seq=from_seq, tail=tail)
        follower = Follower(
            registry,
            key,
            cursor,
            emit,
            stop=stop,
            control=control,
            flush=flush,
            emit_block=emit_block,
            door=door,
            on_damage=on_damage,
            attach=attach,
        )
        if on_start is not None:
            on_start(follower)
        return follower.run(follow=follow)
