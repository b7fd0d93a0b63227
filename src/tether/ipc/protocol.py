"""IPC protocol v2 between callers and a session owner: framing, envelopes, validation.

Theory of operation
-------------------
A caller connects to the owner's Unix socket (0600, in a 0700 directory). The owner
speaks first::

    owner -> {"type":"hello","v":2,"generation":G,"ownerPid":P,"sessionKey":K,…}

Then each request is one line, an envelope::

    caller -> {"v":2,"requestId":"r-...","kind":K,"deadlineMs":D|null,
               "ownerGeneration":G?,"payload":{...}}

and the owner answers, for *every* request, in this order::

    {"type":"ack","requestId":R,"queuePosition":N,"seq":S?} once, when admitted (S: a
                                                             prompt's first journal entry)
    {"type":"update","requestId":R,"frame":{...raw ACP...}}  zero or more
    {"type":"permission","requestId":R,"request":{...}}      zero or more (escalations)
    {"type":"interaction","requestId":R,"interaction":{...}}  to controllers: a question
    {"type":"interaction_resolved","requestId":R,...}        to controllers: its answer
    {"type":"client_request","requestId":R,"relayId":X,      to a prompter that serves
     "method":M,"params":{...}}                              fs/terminal: answer it with
                                                             a ``relay_answer`` request
    {"type":"relay_expired","requestId":R,"relayId":X}     the owner stopped waiting for
                                                             that answer (timeout, the
                                                             agent's $/cancel_request)
    {"type":"agent_run_ended","requestId":null,"event":{...}} the agent run ended meanwhile
    {"type":"session_ended","requestId":null,"event":{...}}   the session was closed: it comes
                                                               before the SESSION_CLOSED error
    {"type":"result","requestId":R,"result":{...}}           \\ exactly one terminal frame,
    {"type":"error","requestId":R,"error":{...}}             /  also on shutdown and deadline

Kinds: ``prompt``, ``set_mode``, ``set_config_option`` (queued), ``cancel``, ``status``,
``watch``, ``close`` and ``terminate`` (``{"by": {...}}`` optional: who asks, recorded
with the peer's credentials in the session's ``session_ended``), ``answer`` and
``relay_answer`` (``{relayId, result | error}``: a prompter's answer to a
``client_request``, on the prompt's own connection; :mod:`tether.owner.relays`).

Additions stay within v2: a new payload field is ignored by an owner that predates it
(a ``relay`` prompt then gets no ``client_request``: the owner serves fs and terminals),
and the hello's ``features`` list says what this owner understands (``relay``).
A prompt's ``"updates": false`` asks for no ``update`` frames (its ack and its terminal
frame still come): a caller that reads the turn elsewhere -- the HTTP gateway's ``202``
prompts, followed on the journal -- spares the owner relaying and itself reading them.

An error carries ``{code, detailCode, origin, retryable, message, type, fields, acp?}``
(:meth:`tether.errors.TetherError.to_wire`), so the caller re-raises the owner's class.

Validation is strict and total: a frame that is not JSON, not an object, larger than
``max_frame_bytes``, of an unknown kind, or with a field of the wrong type is rejected
with an :class:`IpcRejected` carrying a ``detailCode``; the owner answers it with an
``error`` frame (``requestId`` null when it could not be read) and keeps serving.

This module has no I/O and imports only ``json``: the blocking client (thin CLI path)
and the owner's asyncio server share it.
"""

from __future__ import annotations

from tether import _fastjson
from tether.ipc.payloads import payload_problem

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any, Final

VERSION: Final = 2
# Per request frame (config ``promptMaxBytes``): users pipe logs and diffs into prompts,
# and acpx accepts 64 MiB messages. Every reader holds at most this plus one chunk.
DEFAULT_MAX_FRAME_BYTES: Final = 64 * 1024 * 1024
MAX_QUEUE_DEPTH: Final = 16  # acpx's queueMaxDepth default
# The largest frame an agent may send (config ``frameMaxBytes``), never below the prompt
# limit: an agent echoing or quoting a prompt it accepted must not have its answer cut.
# The owner announces it in its hello (``frameMaxBytes``).
DEFAULT_AGENT_FRAME_BYTES: Final = 64 * 1024 * 1024
# An owner-to-caller frame wraps one agent frame (an ``update``, or a journal ``entry``
# holding it): callers accept the announced agent frame limit plus this much wrapping.
ENVELOPE_SLACK: Final = 1024 * 1024

# ``start_agent``: bring the session's agent up now (queued like a prompt) and say which
# ACP session it opened -- how `sessions fork` and `sessions new --resume-session` report
# a refused fork or resume at once instead of at the first prompt.
KINDS: Final = frozenset(
    {
        "prompt",
        "cancel",
        "set_mode",
        "set_config_option",
        "status",
        "close",
        "watch",
        "answer",
        "terminate",
        "start_agent",
        "relay_answer",
    }
)
# ``lagged`` ends a request whose connection fell behind its bounded output buffer.
TERMINAL_TYPES: Final = frozenset({"result", "error", "lagged"})


class IpcRejected(Exception):
    """A request frame failed validation; ``detail_code`` says how."""

    def __init__(self, detail_code: str, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.detail_code = detail_code
        self.message = message
        self.request_id = request_id

    def to_wire(self) -> dict[str, Any]:
        # A request over the size limit is the caller's usage error (exit 2), not a
        # protocol violation: the limit is configurable and named in the message.
        too_large = self.detail_code == "QUEUE_REQUEST_TOO_LARGE"
        return {
            "code": "USAGE" if too_large else "RUNTIME",
            "detailCode": self.detail_code,
            "origin": "protocol",
            "retryable": False,
            "message": self.message,
            "type": "UsageError" if too_large else "RemoteProtocolError",
            "fields": {},
        }


class Envelope:
    """One validated request (immutable).

    A plain class, not a dataclass: ``dataclasses`` pulls in ``inspect`` (and with it
    ``dis``, ``ast``, ``tokenize``), ~10 ms on the thin CLI path that imports this module.
    """

    __slots__ = ("deadline_ms", "kind", "owner_generation", "payload", "request_id")
    request_id: str
    kind: str
    payload: dict[str, Any]
    deadline_ms: int | None
    owner_generation: int | None

    def __init__(
        self,
        request_id: str,
        kind: str,
        payload: dict[str, Any],
        deadline_ms: int | None = None,
        owner_generation: int | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "request_id", request_id)
        set_(self, "kind", kind)
        set_(self, "payload", payload)
        set_(self, "deadline_ms", deadline_ms)
        set_(self, "owner_generation", owner_generation)

    def _astuple(self) -> tuple[Any, ...]:
        return (self.request_id, self.kind, self.payload, self.deadline_ms, self.owner_generation)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: Envelope is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: Envelope is immutable")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Envelope)
        return self._astuple() == other._astuple()

    __hash__ = None  # type: ignore[assignment]  # payload is a dict, as with the dataclass

    def __repr__(self) -> str:
        return (
            f"Envelope(request_id={self.request_id!r}, kind={self.kind!r}, "
            f"payload={self.payload!r}, deadline_ms={self.deadline_ms!r}, "
            f"owner_generation={self.owner_generation!r})"
        )


def prompt_max_bytes(cfg: dict[str, Any]) -> int:
    """The request size limit: config ``promptMaxBytes``, else the 64 MiB default."""
    value = cfg.get("promptMaxBytes")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return DEFAULT_MAX_FRAME_BYTES


def agent_frame_max_bytes(cfg: dict[str, Any]) -> int:
    """The agent frame limit: config ``frameMaxBytes`` (64 MiB by default), and never
    below the prompt limit (:func:`prompt_max_bytes`)."""
    value = cfg.get("frameMaxBytes")
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        value = DEFAULT_AGENT_FRAME_BYTES
    return max(value, prompt_max_bytes(cfg))


def caller_line_bound(hello: dict[str, Any], current: int) -> int:
    """How long a line a caller accepts from the owner that sent ``hello``: the owner's
    announced agent frame limit plus the wrapping, or ``current`` if that is larger."""
    announced = hello.get("frameMaxBytes")
    if isinstance(announced, int) and not isinstance(announced, bool) and announced > 0:
        return max(current, announced + ENVELOPE_SLACK)
    return current


def encode(obj: dict[str, Any]) -> bytes:
    """One frame's line. A string that is not Unicode (a lone surrogate an agent's or a
    client's JSON escaped) goes out escaped, as it came: never an encoding crash."""
    return _fastjson.text_utf8(_fastjson.dumps(obj) + "\n")


def parse_request(line: bytes, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Envelope:
    """Validate one request line (without or with its trailing newline).

    Raises:
        IpcRejected: with detailCode ``QUEUE_REQUEST_TOO_LARGE``,
            ``QUEUE_PROTOCOL_INVALID_JSON``, ``QUEUE_PROTOCOL_MALFORMED_MESSAGE``,
            ``QUEUE_PROTOCOL_UNSUPPORTED_VERSION`` or ``QUEUE_PROTOCOL_UNKNOWN_KIND``.
    """
    if len(line) > max_frame_bytes:
        raise IpcRejected(
            "QUEUE_REQUEST_TOO_LARGE",
            f"request frame of {len(line)} bytes exceeds the limit of {max_frame_bytes}",
        )
    try:
        obj = _fastjson.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):
        raise IpcRejected(
            "QUEUE_PROTOCOL_INVALID_JSON", "request frame is not valid JSON"
        ) from None
    if not isinstance(obj, dict):
        raise IpcRejected("QUEUE_PROTOCOL_MALFORMED_MESSAGE", "request frame must be a JSON object")
    rid = obj.get("requestId")
    if not isinstance(rid, str) or not rid or len(rid) > 200:
        raise IpcRejected(
            "QUEUE_PROTOCOL_MALFORMED_MESSAGE", "requestId must be a non-empty string"
        )
    if obj.get("v") != VERSION:
        raise IpcRejected(
            "QUEUE_PROTOCOL_UNSUPPORTED_VERSION",
            f"unsupported IPC version {obj.get('v')!r}; this owner speaks {VERSION}",
            rid,
        )
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise IpcRejected("QUEUE_PROTOCOL_UNKNOWN_KIND", f"unknown request kind {kind!r}", rid)
    deadline = obj.get("deadlineMs")
    if deadline is not None and (
        not isinstance(deadline, int) or isinstance(deadline, bool) or deadline < 0
    ):
        raise IpcRejected(
            "QUEUE_PROTOCOL_MALFORMED_MESSAGE",
            "deadlineMs must be a non-negative integer or null",
            rid,
        )
    generation = obj.get("ownerGeneration")
    if generation is not None and (not isinstance(generation, int) or isinstance(generation, bool)):
        raise IpcRejected(
            "QUEUE_PROTOCOL_MALFORMED_MESSAGE", "ownerGeneration must be an integer", rid
        )
    payload = obj.get("payload", {})
    if not isinstance(payload, dict):
        raise IpcRejected("QUEUE_PROTOCOL_MALFORMED_MESSAGE", "payload must be an object", rid)
    problem = payload_problem(kind, payload)
    if problem is not None:
        raise IpcRejected("QUEUE_PROTOCOL_MALFORMED_MESSAGE", problem, rid)
    return Envelope(rid, kind, payload, deadline, generation)


def request_frame(
    request_id: str,
    kind: str,
    payload: dict[str, Any],
    *,
    deadline_ms: int | None = None,
    owner_generation: int | None = None,
) -> bytes:
    env: dict[str, Any] = {
        "v": VERSION,
        "requestId": request_id,
        "kind": kind,
        "deadlineMs": deadline_ms,
        "payload": payload,
    }
    if owner_generation is not None:
        env["ownerGeneration"] = owner_generation
    return encode(env)


# --- the caller's side: what may arrive, in which order ------------------------------


class ResponseTracker:
    """Checks the owner's frames for one request: ack first, one terminal, nothing after.

    ``feed`` returns the frame when it belongs to this request, None when it is to be
    ignored (another request's frame, which a one-request connection never sees), and
    raises ``ValueError`` on an ordering violation. (A plain class: see ``Envelope``.)
    """

    __slots__ = ("acked", "finished", "frames", "request_id", "seen_types")

    def __init__(
        self,
        request_id: str,
        acked: bool = False,
        finished: bool = False,
        frames: int = 0,
        seen_types: list[str] | None = None,
    ) -> None:
        self.request_id = request_id
        self.acked = acked
        self.finished = finished
        self.frames = frames
        self.seen_types: list[str] = [] if seen_types is None else seen_types

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, ResponseTracker)
        return (
            self.request_id,
            self.acked,
            self.finished,
            self.frames,
            self.seen_types,
        ) == (other.request_id, other.acked, other.finished, other.frames, other.seen_types)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"ResponseTracker(request_id={self.request_id!r}, acked={self.acked!r}, "
            f"finished={self.finished!r}, frames={self.frames!r}, "
            f"seen_types={self.seen_types!r})"
        )

    def feed(self, frame: dict[str, Any]) -> dict[str, Any] | None:
        kind = frame.get("type")
        if kind == "hello":
            return frame
        rid = frame.get("requestId")
        if rid is not None and rid != self.request_id:
            return None
        if self.finished:
            raise ValueError(f"frame {kind!r} after the terminal frame")
        if kind == "ack":
            if self.acked:
                raise ValueError("second ack")
            self.acked = True
        elif kind in TERMINAL_TYPES:
            self.finished = True
        elif not self.acked and rid is not None:
            raise ValueError(f"frame {kind!r} before the ack")
        self.frames += 1
        self.seen_types.append(str(kind))
        return frame
