"""The blocking IPC client: standard library only (socket, json), for the thin CLI path.

One connection serves one request: connect, read ``hello``, send the envelope, read
frames until exactly one terminal frame. The caller never waits forever: if the owner
dies the kernel closes the socket and we read EOF -- before the ack that is
``OwnerUnavailable`` (safe to retry), after it ``OwnerLost`` (outcome unknown: do not
resubmit automatically). A ``deadlineMs`` is enforced by the owner, which answers
``TIMEOUT``; the socket read timeout is a backstop a little beyond it.
"""

from __future__ import annotations

# ``_socket``, the C module, not ``socket``: socket.py converts four IntEnums and imports
# selectors at import time (~3-5 ms of a ~50 ms warm prompt); we need only AF_UNIX,
# connect, sendall and recv.
import _socket
import os
import time
from collections.abc import Callable

from tether import _fastjson
from tether.errors import (
    CallTimeout,
    OwnerLost,
    OwnerUnavailable,
    OwnerUnresponsive,
    RemoteProtocolError,
    TetherError,
    UsageError,
    WatchLagged,
    error_from_wire,
)
from tether.ipc import protocol
from tether.ipc.lines import LineReader

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

CONNECT_TIMEOUT_S = 5.0
# The owner answers TIMEOUT at the deadline; our socket backstop waits this much longer
# for that answer (an owner that is stopped or hung never sends it).
DEADLINE_SLACK_S = 2.0
FrameHandler = Callable[[dict[str, "Any"]], None]
RawHandler = Callable[[bytes], bool]
# A block of complete lines -> how many of its leading bytes it consumed (0: none).
BlockHandler = Callable[[bytes], int]


def new_request_id() -> str:
    return "r-" + os.urandom(8).hex()


_decode = _fastjson.loads


def check_size(kind: str, data: bytes, max_bytes: int | None) -> None:
    """Raise UsageError if the encoded request ``data`` is over ``max_bytes``."""
    if max_bytes is not None and len(data) > max_bytes:
        raise UsageError(
            f"the {kind} is too large: its request is {len(data)} bytes, over the limit"
            f" of {max_bytes} bytes (config promptMaxBytes)",
            limit=max_bytes,
        )


class OwnerConnection:
    """A connection to a session owner."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.lines = LineReader()  # received bytes not yet returned as frames
        self.hello: dict[str, Any] = {}
        self.before_block: Callable[[], None] | None = None
        # Called every ``idle_interval`` s while nothing arrives (the CLI's spinner).
        self.idle_tick: Callable[[], None] | None = None
        self.idle_interval = 0.2
        self.recv_size = 65536  # a follower of a fast stream reads more per call

    @classmethod
    def connect(cls, path: str, *, timeout: float = CONNECT_TIMEOUT_S) -> OwnerConnection:
        """Connect and read the owner's ``hello``.

        Raises:
            OwnerUnavailable: nobody listens there (no socket, refused, or no hello).
        """
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            raise no_owner(path, exc) from exc
        conn = cls(sock)
        try:
            conn.hello = check_hello(conn._read_frame(), path)
        except (OSError, TetherError) as exc:  # TimeoutError among them
            conn.close()
            raise no_hello(path, exc, timeout) from exc
        conn.lines.max_bytes = protocol.caller_line_bound(conn.hello, conn.lines.max_bytes)
        sock.settimeout(None)
        return conn

    @property
    def generation(self) -> int | None:
        value = self.hello.get("generation")
        return value if isinstance(value, int) else None

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> OwnerConnection:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _readline(self) -> bytes:
        """One line without its newline; at EOF what is left (b"" when nothing is).

        Raises:
            FrameTooLarge: the owner sent a line over the reader's bound.
        """
        lines = self.lines
        while True:
            line = lines.next_line()
            if line is not None:
                return line
            if lines.at_eof:
                return b""
            self._fill()

    def _fill(self) -> None:
        """Wait for the owner and add what it sent (``b""`` at EOF) to ``lines``."""
        if self.before_block is not None:
            # About to wait for the owner: let the caller flush what it rendered, so
            # output streams promptly yet is written once per batch, not per frame.
            self.before_block()
        if self.idle_tick is not None:
            self._wait_readable(self.idle_tick)
        self.lines.feed(self.sock.recv(self.recv_size))

    def _wait_readable(self, tick: Callable[[], None]) -> None:
        """Wait until the socket is readable, calling ``tick`` at each idle interval.

        The socket's own timeout (a deadline) still holds: it raises ``TimeoutError``.
        """
        from tether import _fdwait

        timeout = self.sock.gettimeout()
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            step = self.idle_interval
            if end is not None:
                step = max(0.0, min(step, end - time.monotonic()))
            if _fdwait.readable(self.sock, step):
                return
            if end is not None and time.monotonic() >= end:
                raise TimeoutError("timed out")
            tick()

    def _read_frame(self) -> dict[str, Any] | None:
        return decode_line(self._readline())

    def send(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        request_id: str | None = None,
        deadline_ms: int | None = None,
        max_bytes: int | None = None,
    ) -> str:
        """Send one request envelope; returns its requestId.

        Raises:
            UsageError: the encoded request is longer than ``max_bytes`` (nothing sent).
        """
        rid = request_id or new_request_id()
        data = protocol.request_frame(
            rid, kind, payload, deadline_ms=deadline_ms, owner_generation=self.generation
        )
        check_size(kind, data, max_bytes)
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            # The owner hung up mid-request (it refused the frame, or died): what it said
            # before going is still readable, and ``wait`` reports it (or EOF).
            pass
        return rid

    def wait(
        self,
        request_id: str,
        *,
        on_frame: FrameHandler | None = None,
        until_ack: bool = False,
        deadline_ms: int | None = None,
        on_raw: RawHandler | None = None,
        on_block: BlockHandler | None = None,
    ) -> dict[str, Any]:
        """Read frames for ``request_id`` until the terminal one (or the ack).

        Returns the ``result`` payload (or the ack frame when ``until_ack``).
        ``on_raw`` sees each line after the ack before it is decoded; a line it returns
        True for is consumed (a follower takes journal entries without decoding them).
        ``on_block`` sees, after the ack, every complete line already received as one
        block and says how many leading bytes of it it consumed; the rest is read line
        by line (a follower relays a run of entries with a few bytes operations).

        Raises:
            TetherError subclasses: the owner's terminal error, re-raised as its class.
            OwnerUnavailable / OwnerLost: the connection ended before the ack / the terminal.
        """
        tracker = protocol.ResponseTracker(request_id)
        if deadline_ms is not None:
            self.sock.settimeout(deadline_ms / 1000 + DEADLINE_SLACK_S)
        while True:
            result = pump(
                self.lines,
                tracker,
                on_frame=on_frame,
                until_ack=until_ack,
                on_raw=on_raw,
                on_block=on_block,
            )
            if result is not None:
                return result
            try:
                self._fill()
            except TimeoutError:
                raise CallTimeout(
                    "the owner did not answer within the deadline; the outcome is unknown",
                    request_id=request_id,
                    phase="waiting for the owner's answer",
                ) from None
            except OSError:
                self.lines.feed(b"")  # reset or broken socket: the owner is gone, like EOF

    def request(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        on_frame: FrameHandler | None = None,
        deadline_ms: int | None = None,
    ) -> dict[str, Any]:
        rid = self.send(kind, payload, deadline_ms=deadline_ms)
        return self.wait(rid, on_frame=on_frame, deadline_ms=deadline_ms)


def decode_line(line: bytes) -> dict[str, Any] | None:
    """One frame the owner sent (None for ``b""``: the connection ended)."""
    if not line:
        return None
    try:
        # Decoding str with the C scanner directly skips json.loads' per-call encoding
        # detection on bytes (and the `json` import): measurable when 10,000
        # updates stream through.
        frame = _decode(line.decode("utf-8"))
    except ValueError:
        raise RemoteProtocolError("the owner sent a malformed frame") from None
    if not isinstance(frame, dict):
        raise RemoteProtocolError("the owner sent a non-object frame")
    return frame


def no_owner(path: str, exc: OSError) -> OwnerUnavailable:
    """Nobody listens at ``path`` (no socket, or refused)."""
    return OwnerUnavailable(f"no owner at {path}: {exc.strerror or exc}", socket=path)


def no_hello(path: str, exc: BaseException, timeout: float) -> OwnerUnavailable:
    """Why the owner at ``path`` gave no hello we speak. Nothing within ``timeout``:
    someone holds the socket and accepted us but says nothing -- an owner that is
    stopped (SIGSTOP), hung, or starved, not the same as no owner."""
    if isinstance(exc, TimeoutError):
        return OwnerUnresponsive(
            f"the owner at {path} did not say hello within {timeout:g} s", socket=path
        )
    if isinstance(exc, OwnerUnavailable):
        return exc
    return OwnerUnavailable(f"the owner at {path} did not say hello: {exc}", socket=path)


def check_hello(hello: dict[str, Any] | None, path: str) -> dict[str, Any]:
    """The owner's first frame, if it is a hello we speak; else ``OwnerUnavailable``."""
    if hello is None or hello.get("type") != "hello":
        raise OwnerUnavailable(f"the owner at {path} did not say hello", socket=path)
    if hello.get("v") != protocol.VERSION:
        raise OwnerUnavailable(
            f"the owner speaks IPC v{hello.get('v')}, this client v{protocol.VERSION}",
            socket=path,
        )
    return hello


def pump(
    lines: LineReader,
    tracker: protocol.ResponseTracker,
    *,
    on_frame: FrameHandler | None = None,
    until_ack: bool = False,
    on_raw: RawHandler | None = None,
    on_block: BlockHandler | None = None,
) -> dict[str, Any] | None:
    """Handle the frames of ``tracker``'s request that ``lines`` holds (no I/O): the one
    reading of a request's answer, under the blocking ``wait`` and the asyncio follower.

    Returns the ``result`` payload once the terminal frame came (the ack frame with
    ``until_ack``); None when it needs more bytes (feed ``lines``, then call again).
    ``on_raw``/``on_block``: see :meth:`OwnerConnection.wait`.

    Raises:
        TetherError subclasses: the owner's terminal error, re-raised as its class.
        WatchLagged: the owner dropped this watch for falling behind.
        OwnerUnavailable / OwnerLost: the bytes ended before the ack / the terminal.
        RemoteProtocolError: a malformed, oversized or out-of-order frame.
    """
    request_id = tracker.request_id
    while True:
        if on_block is not None and tracker.acked:
            block = lines.peek_block()
            if block is not None:
                used = on_block(block)
                lines.skip(used)
                if used:
                    continue
        line = lines.next_line()
        if line is None:
            if not lines.at_eof:
                return None
            line = b""
        elif on_raw is not None and tracker.acked and on_raw(line):
            continue
        frame = decode_line(line)
        if frame is None:
            if tracker.acked:
                raise OwnerLost(
                    "the owner went away before the request finished; the outcome is "
                    "unknown, do not resubmit automatically",
                    request_id=request_id,
                )
            raise OwnerUnavailable("the owner went away before acknowledging the request")
        try:
            mine = tracker.feed(frame)
        except ValueError as exc:
            raise RemoteProtocolError(f"the owner broke IPC ordering: {exc}") from None
        if mine is None:
            continue
        kind = frame.get("type")
        if kind == "ack" and until_ack:
            return frame
        if kind == "result":
            result = frame.get("result")
            return result if isinstance(result, dict) else {}
        if kind == "lagged":
            last = frame.get("lastSeq")
            raise WatchLagged(
                "this connection fell behind and was dropped; resume from the journal",
                request_id=request_id,
                last_seq=last if isinstance(last, int) else None,
            )
        if kind == "error":
            err = frame.get("error")
            raise error_from_wire(err if isinstance(err, dict) else {"message": "unknown error"})
        if on_frame is not None and kind != "ack":
            on_frame(frame)


def connect_with_retry(path: str, *, deadline: float) -> OwnerConnection:
    """Connect, retrying briefly while an owner that is known to be starting binds.

    Only used after we learned another caller is starting this owner (the flock race);
    the warm path connects once. Every wait, the hello included, ends by ``deadline``.
    """
    delay = 0.005
    while True:
        try:
            return OwnerConnection.connect(
                path, timeout=max(0.05, min(CONNECT_TIMEOUT_S, deadline - time.monotonic()))
            )
        except OwnerUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
