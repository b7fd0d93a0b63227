"""Every exception Tether raises, in one tree.

::

    TetherError                         exit 1   code RUNTIME
    ├── ProtocolError
    │   ├── LocalProtocolError          we broke ACP/IPC framing or ordering (a bug on our side)
    │   │   └── InvalidTransition       a state-table miss: machine, state, input
    │   └── RemoteProtocolError         the agent or the owner broke it (malformed, oversized frame)
    │       └── FrameTooLarge           a line over the reader's limit (the limit in ``fields``)
    ├── AgentRequestError               the agent answered one of our requests with a JSON-RPC error
    │   └── RateLimited                 exit 6   code RATE_LIMITED: retryable, the provider's
    │                                   usage/rate limit (reset time when the agent gave one)
    ├── AgentOptionUnsupported          the agent has no way to apply a session option (--model)
    ├── AuthRequired                    --auth-policy fail: auth methods advertised, no credential
    ├── NotAdvertised                   the agent does not offer that ACP method (nothing sent)
    ├── ResourceError
    │   ├── ClosedResourceError         we already closed it
    │   └── BrokenResourceError         it died under us
    │       ├── AgentExited             the agent process ended (exit code, signal, stderr tail)
    │       ├── AgentUnresponsive       an abandoned turn never answered: the connection is retired
    │       ├── OwnerLost               the session owner vanished mid-request: outcome unknown
    │       └── ServerUnreachable       exit 7   retryable: no remote Tether (--server) answers
    ├── TetherTimeout (+TimeoutError)   exit 3   code TIMEOUT
    │   ├── HandshakeTimeout            initialize / authenticate / session/new never answered
    │   ├── PromptTimeout               a turn hit its ceiling (--timeout, turn_timeout)
    │   ├── StopTimeout                 a graceful stop did not finish in time
    │   └── CallTimeout                 the caller's --timeout passed (``phase`` says where)
    ├── SupervisionError
    │   ├── SpawnError                  the agent (or its keeper) could not be started
    │   ├── ProcessGone                 the process named by a lease no longer exists
    │   ├── IdentityUnverified          live evidence does not prove ownership: never signalled
    │   └── EscalationFailed            the tree survived SIGKILL (should not happen; reported)
    ├── SessionError
    │   ├── NoSession                   exit 4   code NO_SESSION
    │   ├── OwnerUnavailable            no owner could be reached or started
    │   ├── QueueOverloaded             retryable: the owner's FIFO is full
    │   ├── RequestCancelled            a queued request was removed by `cancel`
    │   ├── OwnerShuttingDown           the owner stopped admitting (close, TTL, signal)
    │   ├── SessionClosed               the session was closed while this request waited or ran
    │   ├── OwnerUnresponsive           an owner holds the session but does not answer
    │   ├── GenerationMismatch          the request named another owner generation
    │   ├── WatchLagged                 a watcher fell behind and was dropped (resume at lastSeq+1)
    │   └── AlreadyAnswered             an interaction was resolved before this answer arrived
    ├── FleetError                      the fleet's shared index or a host cannot serve this
    │   ├── IndexUnavailable            retryable: the index (PostgreSQL) cannot be reached
    │   ├── HostSuperseded              this host's epoch is stale: another registration won
    │   └── HostUnavailable             retryable: the session's host is down or unresponsive
    │       └── HostDraining            retryable: the host drains (admits nothing new; retry)
    ├── StateError                      the state directory (TETHER_HOME) cannot be used
    │   ├── StateCorrupt                the state database is not a database / is malformed
    │   │   └── JournalDamaged          a reader skipped damaged journal chunks (seq ranges)
    │   ├── StateFull                   the disk is full (or failed) under the state directory
    │   ├── StateLost                   state.db was removed/replaced under a live owner
    │   └── StatePermission             the state directory belongs to someone else
    ├── InternalError                   an unexpected failure (a bug): details in a log file
    ├── PermissionDenied                exit 5   code PERMISSION_DENIED
    │   └── VisibilityDenied            the visibility rules forbid this requester that session
    ├── Interrupted                     exit 130 (Ctrl-C)
    │   └── OutputClosed                exit 141 the reader of our stdout went away (`| head`)
    └── UsageError                      exit 2   code USAGE
        ├── ConfigError                 a config file is malformed or holds a bad value
        └── UnknownInteraction          no open or recent interaction has that id

Why one module: the CLI maps exceptions to acpx's exit codes in exactly one place
(``exit_code``), and the IPC hop between an owner and its callers carries errors as
JSON (``to_wire`` / ``from_wire``), so a caller re-raises the very class the owner
raised. The HTTP hop does the same: a gateway's or a router's problem document goes
through the same ``error_from_wire`` and comes back as the class it was raised as.
Classes carry structured fields (``session_id``, ``pid``, ``lease_id``...) in
``fields`` and render them in ``__str__``.

Foreign exceptions (``OSError``, ``json.JSONDecodeError``...) are translated only at
boundaries; nothing here imports anything heavier than the standard library, so the
thin CLI path can import this module for free.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds on the thin CLI path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any, ClassVar

__all__ = [
    "AgentExited",
    "AgentOptionUnsupported",
    "AgentRequestError",
    "AgentUnresponsive",
    "AlreadyAnswered",
    "AuthRequired",
    "BrokenResourceError",
    "CallTimeout",
    "ClosedResourceError",
    "ConfigError",
    "EscalationFailed",
    "FleetError",
    "FrameTooLarge",
    "GenerationMismatch",
    "HandshakeTimeout",
    "HostSuperseded",
    "HostUnavailable",
    "IdentityUnverified",
    "IndexUnavailable",
    "InternalError",
    "Interrupted",
    "InvalidTransition",
    "JournalDamaged",
    "LocalProtocolError",
    "NoSession",
    "OutputClosed",
    "OwnerLost",
    "OwnerShuttingDown",
    "OwnerUnavailable",
    "OwnerUnresponsive",
    "PermissionDenied",
    "ProcessGone",
    "PromptTimeout",
    "ProtocolError",
    "QueueOverloaded",
    "RateLimited",
    "RemoteProtocolError",
    "RequestCancelled",
    "ResourceError",
    "ServerUnreachable",
    "SessionClosed",
    "SessionError",
    "SpawnError",
    "StateCorrupt",
    "StateError",
    "StateFull",
    "StateLost",
    "StatePermission",
    "StopTimeout",
    "SupervisionError",
    "TetherError",
    "TetherTimeout",
    "UnknownInteraction",
    "UsageError",
    "VisibilityDenied",
    "WatchLagged",
    "agent_request_error",
    "error_from_wire",
]


class TetherError(Exception):
    """Base of every Tether error.

    Attributes:
        message: a sentence for humans.
        fields: structured context (``session_id``, ``pid``, ``lease_id``...), JSON-safe.
        exit_code: the CLI exit code (acpx's table: 1 runtime, 2 usage, 3 timeout,
            4 no session, 5 permission denied, 130 interrupted).
        code: acpx's coarse error code, carried in ``--format json`` envelopes.
        detail_code: a finer, stable identifier (``QUEUE_OVERLOADED``...).
        origin: where it arose: ``queue``, ``runtime``, ``protocol``, ``permission``, ``cli``.
        retryable: whether submitting the same request again may succeed.
    """

    exit_code: ClassVar[int] = 1
    code: ClassVar[str] = "RUNTIME"
    default_detail_code: ClassVar[str] = "RUNTIME_ERROR"
    default_origin: ClassVar[str] = "runtime"
    retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str = "",
        *,
        detail_code: str | None = None,
        origin: str | None = None,
        acp: dict[str, Any] | None = None,
        **fields: Any,
    ) -> None:
        super().__init__(message)
        self.message = message or self.__class__.__doc__ or self.__class__.__name__
        self.detail_code = detail_code or self.default_detail_code
        self.origin = origin or self.default_origin
        self.acp = acp
        self.fields: dict[str, Any] = fields

    def __str__(self) -> str:
        if not self.fields:
            return self.message
        context = ", ".join(
            f"{k}={v!r}" for k, v in sorted(self.fields.items()) if k != "stderr_tail"
        )
        return f"{self.message} ({context})" if context else self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep structured fields across pickling (psutil's habit), e.g. in multiprocessing.
        return (error_from_wire, (self.to_wire(),))

    def to_wire(self) -> dict[str, Any]:
        """The IPC form: ``{code, detailCode, origin, retryable, message, type, fields, acp?}``."""
        wire: dict[str, Any] = {
            "code": self.code,
            "detailCode": self.detail_code,
            "origin": self.origin,
            "retryable": self.retryable,
            "message": self.message,
            "type": self.__class__.__name__,
            "fields": self.fields,
        }
        if self.acp is not None:
            wire["acp"] = self.acp
        return wire


def error_from_wire(wire: dict[str, Any]) -> TetherError:
    """Rebuild the exception an owner sent over IPC; unknown types become ``TetherError``.

    An HTTP problem document (RFC 9457, with ``status``) from a gateway or a fleet router
    is rebuilt too -- the one mapping under the remote CLI and the remote library: its
    ``title`` names the class when a gateway raised one of ours (:mod:`tether.serve.
    problems`), else its Tether code (``detailCode``, or a router's ``code``) names the
    class that defines it, else its status decides (:data:`_BY_STATUS`: a refused token
    is :class:`PermissionDenied` with ``detail_code`` ``UNAUTHORIZED``).
    """
    if "status" in wire and "message" not in wire:
        return _from_problem(wire)
    cls = _BY_NAME.get(str(wire.get("type", "")), TetherError)
    fields = wire.get("fields")
    return cls(
        str(wire.get("message", "")),
        detail_code=wire.get("detailCode"),
        origin=wire.get("origin"),
        acp=wire.get("acp") if isinstance(wire.get("acp"), dict) else None,
        **(fields if isinstance(fields, dict) else {}),
    )


# --- protocol -------------------------------------------------------------------


class ProtocolError(TetherError):
    """A protocol rule was broken."""

    default_origin = "protocol"
    default_detail_code = "PROTOCOL_ERROR"


class LocalProtocolError(ProtocolError):
    """We broke a protocol rule: a bug on Tether's side."""


class InvalidTransition(LocalProtocolError):
    """A state machine was asked for a transition its table does not have."""

    default_detail_code = "INVALID_TRANSITION"


class RemoteProtocolError(ProtocolError):
    """The peer (agent or owner) broke a protocol rule: malformed or oversized frame."""

    default_detail_code = "REMOTE_PROTOCOL_ERROR"


class FrameTooLarge(RemoteProtocolError):
    """A frame longer than the reader's bound; ``fields["limit"]`` is the limit in bytes."""

    default_detail_code = "FRAME_TOO_LARGE"


class AgentRequestError(TetherError):
    """The agent answered a request with a JSON-RPC error (code and data kept in ``acp``)."""

    default_origin = "runtime"
    default_detail_code = "ACP_ERROR"


class AgentOptionUnsupported(TetherError):
    """The agent offers no way to apply a session option (``--model``, ``--system-prompt``,
    ``--allowed-tools``, ``--max-turns``); ``fields["option"]`` names the flag."""

    default_detail_code = "AGENT_OPTION_UNSUPPORTED"


class AuthRequired(TetherError):
    """``--auth-policy fail``: the agent advertised auth methods and none has a credential
    configured (``auth`` in the config, or ``TETHER_AUTH_<METHOD>``)."""

    default_detail_code = "AUTH_REQUIRED"


class RateLimited(AgentRequestError):
    """The agent's model provider refused the turn: a usage or rate limit was hit.

    Retryable once the limit resets. ``fields``: ``limit_kind`` (the agent's marker,
    ``rate_limit`` or ``usageLimitExceeded``...), ``resets`` (the agent's own words for when,
    e.g. ``"3:30am"``, when it said); the owner adds ``resets_at`` (Unix seconds) and
    ``limit_type`` (``five_hour``...) when the agent reported them as usage data
    (claude-agent-acp's ``_claude/rateLimit``).
    """

    exit_code = 6  # not one of acpx's codes (0-5, 130)
    code = "RATE_LIMITED"
    default_detail_code = "RATE_LIMITED"
    retryable = True


# How today's adapters mark a provider limit in a JSON-RPC error (both send -32603):
# claude-agent-acp 0.101.0 data {"errorKind": "rate_limit"}, message "Internal error: You've
# hit your 5-hour limit · resets 3:16pm (UTC)"; codex-acp 2.6.0 data {"codexErrorInfo":
# "usageLimitExceeded", "message": "You've hit your usage limit. ... try again at 3:23 PM."}.
_RATE_LIMIT_KINDS = frozenset({"rate_limit", "usageLimitExceeded", "rateLimitExceeded"})
_RESET_MARKERS = ("resets ", "try again at ")


def _reset_phrase(text: str) -> str | None:
    """``"3:16pm (UTC)"`` out of ``"... · resets 3:16pm (UTC)"`` (None when not said)."""
    for marker in _RESET_MARKERS:
        at = text.rfind(marker)
        if at >= 0:
            phrase = text[at + len(marker) :].strip().rstrip(".").strip()
            return phrase[:80] or None
    return None


def agent_request_error(method: str, error: dict[str, Any]) -> AgentRequestError:
    """The exception for the JSON-RPC ``error`` object an agent answered ``method`` with."""
    message = error.get("message", "error")
    text = f"{method} failed: {message} (code {error.get('code')})"
    data = error.get("data")
    kind = None
    if isinstance(data, dict):
        kind = data.get("errorKind") or data.get("codexErrorInfo")
    if isinstance(kind, str) and kind in _RATE_LIMIT_KINDS:
        said = " ".join(
            str(m) for m in (message, data.get("message") if isinstance(data, dict) else None) if m
        )
        return RateLimited(
            text, acp=error, method=method, resets=_reset_phrase(said), limit_kind=kind
        )
    return AgentRequestError(text, acp=error, method=method)


# --- resources ------------------------------------------------------------------


class ResourceError(TetherError):
    """A resource (agent connection, socket, process) is not usable."""


class ClosedResourceError(ResourceError):
    """We already closed it."""

    default_detail_code = "CLOSED"


class BrokenResourceError(ResourceError):
    """It died under us."""

    default_detail_code = "BROKEN"


class AgentExited(BrokenResourceError):
    """The agent process ended; ``fields`` carry exit_code, signal and stderr_tail."""

    default_detail_code = "AGENT_EXITED"


class AgentUnresponsive(BrokenResourceError):
    """The agent did not answer an abandoned turn within the grace: we retired its connection.

    Its updates could still arrive at any time and would look like the next turn's, so
    the connection is not used again; the owner restarts the agent and resumes the session.
    """

    default_detail_code = "AGENT_UNRESPONSIVE"


class OwnerLost(BrokenResourceError):
    """The session owner vanished before answering: the outcome is unknown, do not resubmit."""

    default_origin = "queue"
    default_detail_code = "QUEUE_DISCONNECTED_BEFORE_COMPLETION"


class ServerUnreachable(BrokenResourceError):
    """The remote Tether (``--server``, ``TETHER_SERVER``) could not be reached: the
    connection was refused or timed out, or broke before a read was answered.
    Retryable: nothing was changed (a change whose answer was lost is a plain
    :class:`BrokenResourceError`: its outcome is unknown)."""

    exit_code = 7  # not one of acpx's codes (0-5, 130); 6 is "rate limited"
    code = "UNREACHABLE"
    default_origin = "remote"
    default_detail_code = "SERVER_UNREACHABLE"
    retryable = True


# --- timeouts -------------------------------------------------------------------


class TetherTimeout(TetherError, TimeoutError):
    """Something did not happen before its deadline."""

    exit_code = 3
    code = "TIMEOUT"
    default_detail_code = "TIMEOUT"


class HandshakeTimeout(TetherTimeout):
    """An ACP handshake step (initialize, authenticate, session/new) was not answered in time."""

    default_detail_code = "HANDSHAKE_TIMEOUT"


class PromptTimeout(TetherTimeout):
    """A turn reached its ceiling and was abandoned (session/cancel sent once)."""

    default_detail_code = "PROMPT_TIMEOUT"


class StopTimeout(TetherTimeout):
    """A graceful stop did not complete in time."""

    default_detail_code = "STOP_TIMEOUT"


class CallTimeout(TetherTimeout):
    """The caller's whole-call deadline passed; ``fields["phase"]`` names the phase."""

    default_detail_code = "CALL_TIMEOUT"


# --- supervision ----------------------------------------------------------------


class SupervisionError(TetherError):
    """Starting, watching or ending a process failed."""

    default_detail_code = "SUPERVISION_ERROR"


class SpawnError(SupervisionError):
    """The agent or its keeper could not be started."""

    default_detail_code = "SPAWN_ERROR"


class ProcessGone(SupervisionError):
    """The process a lease names no longer exists."""

    default_detail_code = "PROCESS_GONE"


class IdentityUnverified(SupervisionError):
    """Live evidence does not prove that we own this process, so it is never signalled."""

    default_detail_code = "IDENTITY_UNVERIFIED"


class EscalationFailed(SupervisionError):
    """A process tree survived SIGKILL."""

    default_detail_code = "ESCALATION_FAILED"


# --- sessions and the owner queue -------------------------------------------------


class SessionError(TetherError):
    """A session-level failure."""

    default_origin = "queue"
    default_detail_code = "SESSION_ERROR"


class NoSession(SessionError):
    """No session exists for this agent, cwd and name; run `sessions new` or `sessions ensure`."""

    exit_code = 4
    code = "NO_SESSION"
    default_detail_code = "NO_SESSION"


class OwnerUnavailable(SessionError):
    """No session owner could be reached or started."""

    default_detail_code = "QUEUE_OWNER_UNAVAILABLE"


class QueueOverloaded(SessionError):
    """The owner's queue is full; retry later."""

    retryable = True
    default_detail_code = "QUEUE_OVERLOADED"


class RequestCancelled(SessionError):
    """A queued request was cancelled before it ran."""

    default_detail_code = "QUEUE_REQUEST_CANCELLED"


class OwnerShuttingDown(SessionError):
    """The owner is shutting down and no longer admits or finishes requests."""

    default_detail_code = "QUEUE_OWNER_SHUTTING_DOWN"


class SessionClosed(SessionError):
    """The session was closed (by another caller) while this request waited or ran."""

    default_detail_code = "SESSION_CLOSED"


class OwnerUnresponsive(OwnerUnavailable):
    """An owner holds the session's lock but does not answer (stopped, hung)."""

    default_detail_code = "QUEUE_OWNER_UNRESPONSIVE"


class GenerationMismatch(SessionError):
    """The request was addressed to another owner generation."""

    retryable = True
    default_detail_code = "QUEUE_OWNER_GENERATION_MISMATCH"


# --- the fleet -----------------------------------------------------------------------
# Raised by ``tether.fleet`` (psycopg errors are translated at its one boundary).


class FleetError(TetherError):
    """The fleet's shared index or one of its hosts cannot serve this request."""

    default_origin = "fleet"
    default_detail_code = "FLEET_ERROR"


class IndexUnavailable(FleetError):
    """The fleet index (PostgreSQL) cannot be reached; retry once it is back."""

    retryable = True
    default_detail_code = "INDEX_UNAVAILABLE"


class HostSuperseded(FleetError):
    """This host's registration epoch is stale: it was fenced or registered again elsewhere."""

    default_detail_code = "HOST_SUPERSEDED"


class HostUnavailable(FleetError):
    """The host that owns this session is down or unresponsive; retry later."""

    retryable = True
    default_detail_code = "HOST_UNAVAILABLE"


class HostDraining(HostUnavailable):
    """This host is draining: it admits no new session or prompt; retry (a router places
    new sessions elsewhere, and the host's own sessions resume once it is back)."""

    code = "HOST_DRAINING"
    default_detail_code = "HOST_DRAINING"


# --- the state directory -------------------------------------------------------------
# Raised by one translation point per layer: ``registry`` (sqlite3 errors) and ``paths``
# (OS errors on TETHER_HOME and run/). Messages name the file and the way out.


class StateError(TetherError):
    """The state directory or its database cannot be used (``fields["path"]`` names it)."""

    default_detail_code = "STATE_ERROR"

    def __str__(self) -> str:
        return self.message  # the message already names the path and the way out


class StateCorrupt(StateError):
    """The state database is damaged; `tether doctor --repair` moves it aside."""

    default_detail_code = "STATE_CORRUPT"


class JournalDamaged(StateCorrupt):
    """Some of a session's journal could not be read: damaged chunks were skipped.

    Raised by a reader at its end, after delivering every readable entry, so the exit
    status says the output is incomplete; ``fields["ranges"]`` lists the skipped
    ``[first seq, last seq]`` ranges.
    """

    default_detail_code = "JOURNAL_DAMAGED"


class StateFull(StateError):
    """The disk under the state directory is full or failed; nothing was half-written."""

    default_detail_code = "STATE_FULL"


class StateLost(StateError):
    """The state database was removed, replaced or truncated while an owner used it.

    The owner stops: what it would record would land in a file nobody reads (or in a
    fresh one it did not create). Its turn ends with this error; ``tether doctor``
    reports the event.
    """

    default_detail_code = "STATE_LOST"


class StateBusy(StateError):
    """A write waited out its busy timeout: another process holds the database's write
    lock (the message names it, and says if it is stopped); nothing was changed."""

    default_detail_code = "STATE_BUSY"


class StatePermission(StateError):
    """The state directory (or a file in it) belongs to another user or is not writable."""

    default_detail_code = "STATE_PERMISSION"


class InternalError(TetherError):
    """Something unexpected failed (a bug in Tether); the details are in a log file."""

    default_detail_code = "INTERNAL_ERROR"

    @classmethod
    def of(cls, exc: BaseException, where: str) -> InternalError:
        """What to tell of ``exc``: its type always (a bare ``assert`` has no message),
        its message when it has one, and ``where`` the details are."""
        said = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return cls(f"unexpected error: {said} ({where})")


# --- the rest -----------------------------------------------------------------------


class WatchLagged(SessionError):
    """A watcher fell behind its bounded buffer and was dropped; ``last_seq`` in fields.

    Nothing is lost: the journal has every entry, so the watcher resumes from
    ``last_seq + 1``.
    """

    retryable = True
    default_detail_code = "WATCH_LAGGED"


class PermissionDenied(TetherError):
    """A permission request was denied and the run cannot go on."""

    exit_code = 5
    code = "PERMISSION_DENIED"
    default_origin = "permission"
    default_detail_code = "PERMISSION_DENIED"


class VisibilityDenied(PermissionDenied):
    """The visibility rules forbid this requester that session (``fields``: rule, session)."""

    default_origin = "visibility"
    default_detail_code = "VISIBILITY_DENIED"


class Interrupted(TetherError):
    """The user interrupted (Ctrl-C)."""

    exit_code = 130
    code = "INTERRUPTED"
    default_origin = "cli"
    default_detail_code = "INTERRUPTED"


class OutputClosed(Interrupted):
    """Our stdout was closed by its reader (``| head -1``): handled like Ctrl-C.

    Exit status 141 (128 + SIGPIPE), what a shell reports for a tool killed by SIGPIPE, so
    ``set -o pipefail`` scripts treat Tether as they treat ``yes | head -1``.
    """

    exit_code = 141
    default_detail_code = "OUTPUT_CLOSED"


class UsageError(TetherError):
    """The command line or a request was not valid."""

    exit_code = 2
    code = "USAGE"
    default_origin = "cli"
    default_detail_code = "USAGE"


class InvalidName(UsageError):
    """A session name holds characters that would forge output (``tether.names``)."""

    default_detail_code = "BAD_VALUE"


class ConfigError(UsageError):
    """A configuration file is malformed or holds a value that is not allowed."""

    default_detail_code = "CONFIG_INVALID"


class AlreadyAnswered(SessionError):
    """An interaction (a question for a human) was already resolved: the first valid
    answer won, and this one never reached the agent. ``fields`` say how it was
    resolved (``answer``, ``how``, ``by``)."""

    default_detail_code = "ALREADY_ANSWERED"


class UnknownInteraction(UsageError):
    """No open (or recently resolved) interaction of this session has that id."""

    default_detail_code = "UNKNOWN_INTERACTION"


class NotAdvertised(TetherError):
    """The agent does not advertise the ACP method asked for (``session/fork``,
    ``session/list``, ``session/delete``, ``logout``...); nothing was sent to it.
    ``fields["method"]`` names the method."""

    default_detail_code = "ACP_NOT_ADVERTISED"


def _all_subclasses(cls: type[TetherError]) -> list[type[TetherError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(_all_subclasses(sub))
    return out


_BY_NAME: dict[str, type[TetherError]] = {c.__name__: c for c in _all_subclasses(TetherError)}
# A problem's detail code -> the class that defines it (a fleet router's problems carry
# only ``code``). Request-validation codes (UsageError's: ``BAD_VALUE``...) name no one
# class: their status makes them a UsageError with that code.
_BY_DETAIL: dict[str, type[TetherError]] = {}
for _cls in _all_subclasses(TetherError):
    if "default_detail_code" in _cls.__dict__ and not issubclass(_cls, UsageError):
        _BY_DETAIL.setdefault(_cls.default_detail_code, _cls)
# HTTP statuses of problems with no Tether error behind them (the gateway's 401, a
# proxy's 502, an unknown route...): the class a caller of a remote Tether gets, and
# its detail code.
_BY_STATUS: dict[int, tuple[type[TetherError], str | None]] = {
    401: (PermissionDenied, "UNAUTHORIZED"),
    403: (PermissionDenied, "FORBIDDEN"),
    404: (UsageError, "NOT_FOUND"),
    405: (UsageError, "METHOD_NOT_ALLOWED"),
    409: (SessionClosed, None),
    410: (SessionClosed, None),
    429: (QueueOverloaded, None),
    504: (TetherTimeout, None),
}


def _by_status(status: int) -> tuple[type[TetherError], str | None]:
    """The class (and detail code) of an HTTP problem that names no Tether error."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return (UsageError, f"HTTP_{status}") if 400 <= status < 500 else (TetherError, None)


def _from_problem(doc: dict[str, Any]) -> TetherError:
    status = doc.get("status")
    title, detail = str(doc.get("title", "")), doc.get("detail")
    code = doc.get("detailCode") or doc.get("code")
    cls = _BY_NAME.get(title) or _BY_DETAIL.get(str(code))
    message = str(detail or title or f"HTTP {status}")
    if cls is None:
        said = f": {detail}" if detail else ""
        message = f"HTTP {status} {title}{said}"
        cls, plain_code = _by_status(status) if isinstance(status, int) else (TetherError, None)
        code = code or plain_code
    fields = doc.get("fields")
    extra = {k: v for k, v in doc.items() if k in ("rehomedTo", "lastSeq", "durableSeq")}
    return cls(
        message,
        detail_code=str(code) if code else None,
        acp=doc.get("acp") if isinstance(doc.get("acp"), dict) else None,
        **(fields if isinstance(fields, dict) else {}),
        **extra,
    )
