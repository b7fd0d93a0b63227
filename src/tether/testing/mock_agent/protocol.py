"""The mock agent's wire vocabulary: error codes, framing, and what a turn is made of.

A turn runs as a generator (a :data:`Step`): it yields what it waits for — a
:class:`Sleep` or an :class:`Await` of the client's response — and is resumed with what
arrived. It returns an :class:`Outcome` to end the turn a particular way, or None to go on.
Standard library only, and no ``typing`` at run time (start-up stays lean).
"""

from __future__ import annotations

import json

# mypy treats a name called TYPE_CHECKING as true; at run time this avoids importing
# typing and collections.abc, which would cost a few milliseconds of start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Generator
    from typing import Any, TypeAlias

    Json: TypeAlias = Any
    Msg: TypeAlias = dict[str, Any]
    # A turn step yields what it waits for and is resumed with what arrived.
    Step: TypeAlias = Generator["Sleep | Await", object, "Outcome | None"]

AGENT_NAME = "tether-mock-agent"
AGENT_VERSION = "0.1.0"
PROTOCOL_VERSION = 1

# Error codes (ACP section 8).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
AUTH_REQUIRED = -32000
RESOURCE_NOT_FOUND = -32002


def dumps(obj: Json) -> bytes:
    """One NDJSON line: compact JSON plus the newline."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def key(req_id: Json) -> str:
    """Request ids match by exact JSON value: 1, 1.0, "1" and true are all different."""
    return json.dumps(req_id)


def error_code(response: Msg) -> object:
    """The code of an error response (or the error itself when it is not an object)."""
    err = response.get("error")
    return err.get("code") if isinstance(err, dict) else err


class Sleep:
    """Resume at ``deadline`` (monotonic); a cancellable sleep is cut short by a cancel."""

    __slots__ = ("cancellable", "deadline")

    def __init__(self, deadline: float, cancellable: bool) -> None:
        self.deadline = deadline
        self.cancellable = cancellable


class Await:
    """Resume with the client's response (the whole message) to our request ``key``."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key


class Outcome:
    """How a turn ends: a stopReason, a JSON-RPC error, or never (hang)."""

    __slots__ = ("code", "message", "stop_reason")

    def __init__(self, stop_reason: str | None, code: int = 0, message: str = "") -> None:
        self.stop_reason = stop_reason
        self.code = code
        self.message = message


HANG = Outcome(None)
CANCELLED = Outcome("cancelled")
INTERRUPT = object()  # what a cancellable sleep is resumed with on cancel


class Session:
    """One ACP session of this agent: its mode and config values."""

    __slots__ = ("closed", "fast", "forked_from", "mode", "model", "sid")

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.mode = "default"
        self.model = "mock-small"
        self.fast = False
        self.closed = False
        self.forked_from: str | None = None  # announced once, on the first prompt


class Turn:
    """One running prompt: its script generator and what it waits for."""

    __slots__ = (
        "cancel_error",
        "cancelled",
        "exit_code",
        "gen",
        "ignore_cancel",
        "key",
        "req_id",
        "session",
        "waiting",
    )

    def __init__(self, session: Session, req_id: Json) -> None:
        self.session = session
        self.req_id = req_id
        self.key = key(req_id)
        self.cancelled = False
        self.cancel_error = False  # cancelled by $/cancel_request: answer -32800
        self.ignore_cancel = False
        self.exit_code: int | None = None
        self.waiting: Sleep | Await | None = None
        self.gen: Step | None = None
