"""A sans-IO JSON-RPC 2.0 endpoint: bytes in, events out; calls in, bytes out.

Theory of operation
-------------------

``JsonRpcConnection`` knows nothing about asyncio, pipes or clocks. The async shell feeds it
whatever it read (``receive_data``), drains ``next_event`` until ``NEED_DATA``, and writes the
bytes that the ``send_*`` / ``cancel_turn`` / ``abandon`` calls return. Time is an argument
(``now``, monotonic seconds), so every timeout race is a plain unit test.

Two tables carry all the state:

``_ours`` (our requests, keyed by int id: :class:`tether.jsonrpc.pending.Outstanding`)
    An entry is created by ``send_request`` and removed by exactly one of: the peer's
    answer, ``abandon`` (the caller gave up), or ``fail_all`` (the peer died). Ids count up
    from 0 and are never reused, so once an entry is gone its id can never match anything
    again: a late answer is *stale*. Stale answers are dropped, counted and logged at DEBUG,
    and never surface as events. This is the whole defence against the stale-id cascade
    (openabdev/openab#732, #760), in which a timed-out prompt's late answer resolved the
    *next* prompt and every later turn got its predecessor's result.

``_incoming`` (the peer's requests we have not answered)
    ``send_result`` / ``send_error`` answer each exactly once; a second answer, or an answer
    to an id the peer never sent, is our bug and raises ``LocalProtocolError``.

Turn cancellation follows acp-protocol.md section 9: ``cancel_turn`` emits ``session/cancel``
at most once per prompt and leaves the prompt pending, because the agent MUST still answer
it (with ``stopReason: "cancelled"``). ``abandon`` is for when we stop waiting: it removes the
entry and, for a prompt whose cancel was not sent yet, emits that one ``session/cancel``.

Classification of an inbound object is lenient where real agents are sloppy (a missing
``"jsonrpc"``, JSON-RPC 1.0's ``"error": null`` next to a result) and strict where a mistake
could misroute an answer (id types, result *and* error, a method on a response).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from tether.errors import LocalProtocolError
from tether.jsonrpc import inbound
from tether.jsonrpc.framing import DEFAULT_MAX_FRAME_BYTES, LineFramer, Oversized
from tether.jsonrpc.messages import (
    EOF,
    EXCERPT_BYTES,
    NEED_DATA,
    Event,
    Notification,
    ProtocolViolation,
    Request,
    RequestId,
    Response,
    ViolationReason,
    _Sentinel,
    encode,
    is_valid_id,
)
from tether.jsonrpc.pending import Outstanding, PendingRequest
from tether.jsonrpc.views import ExactIdView

__all__ = ["JsonRpcConnection", "PendingRequest", "Stats"]

_log = logging.getLogger("tether.jsonrpc")

PROMPT_METHOD: Final = "session/prompt"
CANCEL_METHOD: Final = "session/cancel"


@dataclass(slots=True)
class Stats:
    """Counters for one connection; ``peer_errors`` counts error responses with a null id."""

    frames_in: int = 0
    frames_out: int = 0
    malformed: int = 0
    oversized: int = 0
    stale_responses: int = 0
    cancels_sent: int = 0
    abandoned: int = 0
    peer_errors: int = 0


class JsonRpcConnection:
    """One JSON-RPC 2.0 peer over NDJSON, with no I/O of its own.

    Args:
        max_frame_bytes: the longest inbound line accepted; longer ones become an
            ``oversized`` violation and are skipped.
    """

    def __init__(self, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._framer = LineFramer(max_frame_bytes)
        self._ours = Outstanding()
        self._incoming: dict[RequestId, Request] = {}
        self.stats = Stats()

    @property
    def max_frame_bytes(self) -> int:
        """The longest inbound line accepted."""
        return self._framer.max_frame_bytes

    # --- inbound -------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the peer; ``b""`` means the peer closed its end.

        Raises:
            LocalProtocolError: data after EOF.
        """
        self._framer.feed(data)

    def next_event(self) -> Event | Literal[_Sentinel.NEED_DATA, _Sentinel.EOF]:
        """The next event, ``NEED_DATA`` when the buffer holds no complete line, or ``EOF``
        once the peer closed and every buffered line was delivered (and on every call after).

        Never raises on anything the peer sent: bad input becomes a ``ProtocolViolation``.
        Stale responses are consumed silently, so one call may eat several lines.
        """
        while True:
            frame = self._framer.next_frame()
            if frame is None:
                return NEED_DATA
            if frame is EOF:
                return EOF
            self.stats.frames_in += 1
            if isinstance(frame, Oversized):
                self.stats.oversized += 1
                return ProtocolViolation(
                    "oversized",
                    f"line of at least {frame.length} bytes exceeds max_frame_bytes "
                    f"({self._framer.max_frame_bytes}); skipped to the next newline",
                    frame.excerpt,
                    length=frame.length,
                )
            event = self._process(frame)
            if event is not None:
                return event

    def _violation(
        self, reason: ViolationReason, detail: str, frame: bytes, raw: Any = None
    ) -> ProtocolViolation:
        if reason == "peer-error":
            self.stats.peer_errors += 1
        else:
            self.stats.malformed += 1
        return ProtocolViolation(reason, detail, frame[:EXCERPT_BYTES], raw)

    def _process(self, frame: bytes) -> Event | None:
        obj = inbound.decode_object(frame)
        if isinstance(obj, tuple):
            return self._violation(*obj[:2], frame, obj[2])
        if "method" in obj:
            return self._process_call(obj, frame)
        if "id" in obj:
            return self._process_response(obj, frame)
        return self._violation("invalid-message", "neither a method nor an id", frame, obj)

    def _process_call(self, obj: dict[str, Any], frame: bytes) -> Event:
        problem = inbound.call_problem(obj)
        if problem is not None:
            return self._violation(*problem[:2], frame, problem[2])
        if "id" not in obj:
            return Notification(obj["method"], obj.get("params"), obj, frame)
        request_id = obj["id"]
        if request_id in self._incoming:
            # Reusing an id we have not answered yet would make our answer ambiguous.
            detail = f"request id {request_id!r} reused while still unanswered"
            return self._violation("invalid-message", detail, frame, obj)
        request = Request(request_id, obj["method"], obj.get("params"), obj, frame)
        self._incoming[request_id] = request
        return request

    def _process_response(self, obj: dict[str, Any], frame: bytes) -> Event | None:
        problem = inbound.response_problem(obj)
        if problem is not None:
            return self._violation(*problem[:2], frame, problem[2])
        request_id = obj["id"]
        error = obj.get("error")
        pending, why = self._ours.resolve(request_id)
        if pending is None:
            self.stats.stale_responses += 1
            _log.debug("dropped stale response to id %r (%s)", request_id, why or "not pending")
            return None
        return Response(
            request_id,
            None if error is not None else obj["result"],
            error,
            pending.method,
            pending.session_id,
            obj,
            frame,
        )

    # --- outbound ------------------------------------------------------------------

    def _out(self, message: dict[str, Any]) -> bytes:
        data = encode(message)
        self.stats.frames_out += 1
        return data

    def send_request(
        self,
        method: str,
        params: Any = None,
        *,
        now: float,
        deadline: float | None = None,
        session_id: str | None = None,
    ) -> tuple[int, bytes]:
        """Start a request; returns its id and the line to write.

        Args:
            method: the JSON-RPC method.
            params: an object or array, or None to omit ``params``.
            now: the current monotonic time, recorded as ``sent_at``.
            deadline: the monotonic time at which ``expired`` will name this request.
            session_id: the ACP session it belongs to; for ``session/prompt`` it defaults
                to ``params["sessionId"]``.

        Raises:
            LocalProtocolError: params cannot be encoded, or a ``session/prompt`` has no
                session id (``cancel_turn`` could never build its ``session/cancel``).
        """
        if session_id is None and method == PROMPT_METHOD and isinstance(params, dict):
            candidate = params.get("sessionId")
            session_id = candidate if isinstance(candidate, str) else None
        if method == PROMPT_METHOD and session_id is None:
            raise LocalProtocolError("session/prompt needs a sessionId")
        request_id = self._ours.next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        # Encode before touching the table: a request we could not send must not linger.
        data = self._out(message)
        self._ours.add(method, session_id, now, deadline)
        return request_id, data

    def send_notification(self, method: str, params: Any = None) -> bytes:
        """The line for a notification (no answer expected).

        Raises:
            LocalProtocolError: params cannot be encoded.
        """
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        return self._out(message)

    def _answer(self, request_id: RequestId, message: dict[str, Any], *, allow_none: bool) -> bytes:
        known = is_valid_id(request_id) and request_id in self._incoming
        if not known and not (allow_none and request_id is None):
            raise LocalProtocolError(
                f"no unanswered incoming request with id {request_id!r}", request_id=request_id
            )
        data = self._out(message)
        if known:
            del self._incoming[request_id]
        return data

    def send_result(self, request_id: RequestId, result: Any) -> bytes:
        """Answer the peer's request ``request_id`` with a result, exactly once.

        Raises:
            LocalProtocolError: no such unanswered incoming request, or result cannot be
                encoded (the request then stays unanswered).
        """
        message = {"jsonrpc": "2.0", "id": request_id, "result": result}
        return self._answer(request_id, message, allow_none=False)

    def send_error(self, request_id: RequestId, code: int, message: str, data: Any = None) -> bytes:
        """Answer the peer's request ``request_id`` with an error, exactly once.

        ``request_id`` None is also allowed when no such request is pending: that is how
        JSON-RPC reports a line whose id could not be read (``PARSE_ERROR``,
        ``INVALID_REQUEST``).

        Raises:
            LocalProtocolError: no such unanswered incoming request, or ``code`` is not an int.
        """
        if type(code) is not int:
            raise LocalProtocolError(f"error code must be an int, not {code!r}")
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        reply = {"jsonrpc": "2.0", "id": request_id, "error": error}
        return self._answer(request_id, reply, allow_none=True)

    def _cancel_once(self, pending: PendingRequest) -> bytes:
        if pending.method != PROMPT_METHOD or pending.cancel_sent:
            return b""
        data = self._out(
            {"jsonrpc": "2.0", "method": CANCEL_METHOD, "params": {"sessionId": pending.session_id}}
        )
        pending.cancel_sent = True
        self.stats.cancels_sent += 1
        return data

    def cancel_turn(self, request_id: int) -> bytes:
        """Ask the agent to stop a prompt turn: the ``session/cancel`` line, or ``b""``.

        The first call for a pending ``session/prompt`` returns the notification; later calls,
        and calls for a prompt that is no longer pending (it was answered or abandoned: the
        race is harmless), return ``b""``. The prompt stays pending: the agent must still
        answer it, normally with ``stopReason: "cancelled"``.

        Raises:
            LocalProtocolError: ``request_id`` is pending but is not a ``session/prompt``.
        """
        pending = self._ours.get(request_id)
        if pending is None:
            return b""
        if pending.method != PROMPT_METHOD:
            raise LocalProtocolError(
                f"cancel_turn on a {pending.method} request", request_id=request_id
            )
        return self._cancel_once(pending)

    def abandon(self, request_id: int, *, reason: str) -> bytes:
        """Stop waiting for a request: remove it, so its late answer is dropped as stale.

        Returns the ``session/cancel`` line for a ``session/prompt`` whose cancel was not sent
        yet, else ``b""``. Idempotent: an unknown or already-removed id returns ``b""``.

        Args:
            reason: why (``deadline``, ``ceiling``, ``cancelled``...), for logs.
        """
        pending = self._ours.abandon(request_id, reason)
        if pending is None:
            return b""
        self.stats.abandoned += 1
        _log.debug("abandoned request %d (%s): %s", request_id, pending.method, reason)
        return self._cancel_once(pending)

    # --- deadlines and teardown -------------------------------------------------------

    def was_answered_late(self, request_id: int) -> bool:
        """Whether the (dropped) late answer to abandoned ``request_id`` has arrived.

        Only the last few hundred abandoned ids are remembered; older ones report False.
        """
        return self._ours.was_answered_late(request_id)

    def expired(self, now: float) -> list[int]:
        """Ids of pending requests whose deadline is at or before ``now``, oldest first.

        They stay pending: the caller decides (``cancel_turn``, ``abandon``...).
        """
        return self._ours.expired(now)

    def next_deadline(self) -> float | None:
        """The earliest deadline among pending requests, or None if none has one."""
        return self._ours.next_deadline()

    def fail_all(self) -> list[PendingRequest]:
        """The peer is dead: remove and return every pending request, oldest first.

        Returns no bytes, since nothing can be written to a dead peer. Unanswered incoming
        requests are left alone; answering them is harmless and the shell stops writing.
        """
        return self._ours.fail_all()

    # --- views -------------------------------------------------------------------------

    @property
    def pending(self) -> Mapping[int, PendingRequest]:
        """Our unanswered requests by id (a read-only view; only ``int`` keys match)."""
        return self._ours.view()

    def incoming_pending(self) -> Mapping[RequestId, Request]:
        """The peer's requests we have not answered yet, by id.

        A read-only view that matches ids by exact JSON type: ``True``, ``1.0`` or a list
        taken from peer input are simply not in it (a dict would match or raise).
        """
        return ExactIdView(self._incoming, is_valid_id)

    @property
    def next_id(self) -> int:
        """The id the next ``send_request`` will use."""
        return self._ours.next_id
