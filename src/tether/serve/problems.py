"""Tether's errors as HTTP problem documents (RFC 9457, ``application/problem+json``).

One table, in one place: an error class (or a request-validation ``detail_code``) maps
to a status; the document carries Tether's own codes so an HTTP client can branch on
the same identifiers the CLI's ``--format json`` envelopes and the library use::

    {"type": "urn:tether:problem:NO_SESSION", "title": "NoSession", "status": 404,
     "detail": "no such session", "code": "NO_SESSION", "detailCode": "NO_SESSION",
     "retryable": false, "fields": {...}}

Bad input is always a 4xx; a 5xx means the gateway or the state directory failed.
A 401 says nothing but "Unauthorized".
"""

from __future__ import annotations

from typing import Any, Final

from tether import errors as e

PROBLEM_JSON: Final = "application/problem+json"

# Request validation (tether.serve.bodies) by detail code.
_BY_DETAIL: Final = {
    "BAD_JSON": 400,
    "USAGE": 400,
    "HOST_NOT_ALLOWED": 400,  # a Host header the gateway does not serve (DNS rebinding)
    "BODY_TOO_LARGE": 413,
    "UNSUPPORTED_MEDIA_TYPE": 415,
    "UNKNOWN_FIELD": 422,
    "WRONG_TYPE": 422,
    "MISSING_FIELD": 422,
    "BAD_VALUE": 422,
    "NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "QUEUE_REQUEST_TOO_LARGE": 413,
    "UNKNOWN_INTERACTION": 404,
    "INVALID_ANSWER": 422,
}
# Most specific first: the first class an error is an instance of decides.
_BY_CLASS: Final[tuple[tuple[type[e.TetherError], int], ...]] = (
    (e.NoSession, 404),
    (e.AlreadyAnswered, 409),
    (e.QueueOverloaded, 429),
    (e.SessionClosed, 409),
    (e.RequestCancelled, 409),
    (e.GenerationMismatch, 409),
    (e.OwnerUnavailable, 503),
    (e.OwnerShuttingDown, 503),
    (e.WatchLagged, 409),
    (e.TetherTimeout, 504),
    (e.PermissionDenied, 403),
    (e.AgentRequestError, 502),
    (e.BrokenResourceError, 502),
    (e.ConfigError, 422),
    (e.UsageError, 400),
    (e.SupervisionError, 502),
    (e.RemoteProtocolError, 502),
    (e.StateError, 503),
    (e.HostUnavailable, 503),  # a fleet host draining (HOST_DRAINING): retryable
)
ACP_INVALID_PARAMS: Final = -32602


def status_of(exc: e.TetherError) -> int:
    """The HTTP status for ``exc``."""
    if isinstance(exc, e.UsageError) and exc.detail_code in _BY_DETAIL:
        return _BY_DETAIL[exc.detail_code]
    if exc.detail_code == "QUEUE_REQUEST_TOO_LARGE":
        return 413
    if isinstance(exc, e.AgentRequestError) and (exc.acp or {}).get("code") == ACP_INVALID_PARAMS:
        return 422  # the agent refused the value we passed on (an unknown mode id...)
    for cls, status in _BY_CLASS:
        if isinstance(exc, cls):
            return status
    return 500


def problem(exc: e.TetherError) -> tuple[int, dict[str, Any]]:
    """``(status, document)`` for a Tether error."""
    status = status_of(exc)
    doc: dict[str, Any] = {
        "type": f"urn:tether:problem:{exc.detail_code}",
        "title": type(exc).__name__,
        "status": status,
        "detail": exc.message,
        "code": exc.code,
        "detailCode": exc.detail_code,
        "retryable": exc.retryable,
        "fields": _json_safe(exc.fields),
    }
    if exc.acp is not None:
        doc["acp"] = exc.acp
    return status, doc


def plain(status: int, title: str, detail: str | None = None) -> dict[str, Any]:
    """A problem with no Tether error behind it (401 carries no detail at all)."""
    doc: dict[str, Any] = {"type": "about:blank", "title": title, "status": status}
    if detail is not None:
        doc["detail"] = detail
    return doc


def _json_safe(fields: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key == "stderr_tail":
            continue  # an agent's stderr may hold secrets; the owner log has it
        out[key] = value if isinstance(value, str | int | float | bool | None) else str(value)
    return out
