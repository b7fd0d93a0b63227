"""The events a JSON-RPC connection produces, and the one way we turn objects into bytes.

Theory of operation
-------------------

Everything the peer can say to us becomes exactly one of four frozen events:

* ``Request``      it wants an answer from us (it has ``method`` and ``id``);
* ``Notification`` it does not (``method``, no ``id``);
* ``Response``     it answers one of *our* requests (``id`` plus ``result`` or ``error``);
* ``ProtocolViolation`` the line was not a message we can act on. This is an event, not an
  exception, because a noisy agent that prints one bad line must not take a whole session
  down: the caller decides whether a violation is fatal (``ProtocolViolation.to_error()``
  hands it a ``RemoteProtocolError`` to raise if so).

Two sentinels complete the vocabulary, as in h11: ``NEED_DATA`` (feed me more bytes) and
``EOF`` (the peer closed its stdout and every buffered frame has been delivered).

Every event keeps the decoded frame in ``raw`` (excluded from equality) so that a relay can
forward the exact object the agent sent, unknown fields and ``_meta`` included.

Outbound, ``encode`` is the single serialiser: compact separators, real UTF-8 rather than
``\\uXXXX`` escapes, no ``NaN``/``Infinity`` (not JSON), and one ``\\n`` per frame.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from tether import _fastjson
from tether.errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "EOF",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "NEED_DATA",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "Event",
    "Notification",
    "ProtocolViolation",
    "Request",
    "RequestId",
    "Response",
    "ViolationReason",
    "encode",
    "is_valid_id",
]

#: A JSON-RPC id. Matched by exact JSON value *and* type: ``1`` and ``"1"`` are different
#: ids, and ``true`` (a bool, which Python would happily hash like ``1``) is no id at all.
RequestId = int | str | None

# The JSON-RPC 2.0 error codes, plus -32800 (request cancelled) which ACP borrows from LSP
# for `$/cancel_request`. ACP's own codes (-32000 auth required, -32002 resource not found)
# belong to the acp layer, not here.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
REQUEST_CANCELLED: Final = -32800

# How much of an offending line a violation carries: enough to recognise a stray log line
# or a stack trace in a report, never a 16 MiB blob in memory twice.
EXCERPT_BYTES: Final = 200


class _Sentinel(enum.Enum):
    NEED_DATA = enum.auto()
    EOF = enum.auto()

    def __repr__(self) -> str:
        return self.name


NEED_DATA: Final = _Sentinel.NEED_DATA
EOF: Final = _Sentinel.EOF


def is_valid_id(value: object) -> bool:
    """Whether ``value`` may be a JSON-RPC id: an int (not a bool), a str, or None.

    Floats are refused even when integral: ``1.0 == 1`` and ``hash(1.0) == hash(1)`` in
    Python, so accepting them would let a float id match our integer id in a dict lookup,
    which breaks the exact-match rule.
    """
    # `type(...) is` rather than isinstance: bool is a subclass of int.
    return value is None or type(value) is int or type(value) is str


@dataclass(frozen=True, slots=True)
class Request:
    """The peer asks us to do something and expects exactly one answer."""

    id: RequestId
    method: str
    params: Any
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # The frame's bytes as received (no newline): relaying them saves a re-encode.
    line: bytes = field(default=b"", compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Notification:
    """The peer tells us something and expects no answer."""

    method: str
    params: Any
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # The frame's bytes as received (no newline): relaying them saves a re-encode.
    line: bytes = field(default=b"", compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Response:
    """The peer answered one of our requests.

    ``method`` and ``session_id`` come from our pending table, not from the wire: JSON-RPC
    responses do not repeat the method, and routing a turn's answer needs both.
    """

    id: RequestId
    result: Any = None
    error: dict[str, Any] | None = None
    method: str | None = None
    session_id: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # The frame's bytes as received (no newline): relaying them saves a re-encode.
    line: bytes = field(default=b"", compare=False, repr=False)

    @property
    def is_error(self) -> bool:
        """Whether the peer answered with a JSON-RPC error rather than a result."""
        return self.error is not None


ViolationReason = Literal[
    "malformed-json", "not-utf8", "oversized", "invalid-message", "peer-error"
]


@dataclass(frozen=True, slots=True)
class ProtocolViolation:
    """A line from the peer that is not a message we can act on; the connection stays usable.

    Attributes:
        reason: ``malformed-json``, ``not-utf8``, ``oversized``, ``invalid-message``, or
            ``peer-error`` (an error response with a null id: the peer could not parse
            something *we* sent).
        detail: a sentence for logs.
        excerpt: at most the first 200 bytes of the offending line.
        raw: the decoded JSON value when the line was valid JSON, else None.
        length: for ``oversized``, how many bytes of the line were seen (a lower bound).
    """

    reason: ViolationReason
    detail: str
    excerpt: bytes
    raw: Any = field(default=None, compare=False, repr=False)
    length: int = 0

    def to_error(self) -> RemoteProtocolError:
        """This violation as a ``RemoteProtocolError``, for callers that treat it as fatal."""
        return RemoteProtocolError(
            f"agent broke JSON-RPC framing: {self.detail}",
            detail_code="REMOTE_PROTOCOL_ERROR",
            reason=self.reason,
            excerpt=self.excerpt.decode("utf-8", "replace"),
        )


Event = Request | Notification | Response | ProtocolViolation


def encode(obj: Any) -> bytes:
    """Serialise one message as a single NDJSON line (compact, UTF-8, ``\\n``-terminated).

    Raises:
        LocalProtocolError: ``obj`` is not JSON-serialisable (a non-JSON type, NaN or
            infinity, a cycle). That is a bug on our side, so it is ours to report.
    """
    try:
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise LocalProtocolError(f"cannot encode message as JSON: {exc}") from exc
    # A lone surrogate (a "\ud800" escape the agent sent us, relayed back) has no UTF-8
    # form: it goes out as that escape, so the frame stays valid JSON and round-trips.
    return _fastjson.text_utf8(text) + b"\n"
