"""What an inbound JSON-RPC line is, or why it is not one: the checks with no state.

:class:`tether.jsonrpc.connection.JsonRpcConnection` asks these functions first and only
then consults its tables (is the id ours, is it reused). Each returns a :data:`Problem`
-- the violation's reason, a detail for logs and the decoded value when there is one --
or the decoded object / ``None`` when the line passes.

Lenient where real agents are sloppy (a missing ``"jsonrpc"``, JSON-RPC 1.0's
``"error": null`` next to a result), strict where a mistake could misroute an answer (id
types, result *and* error, a method on a response).
"""

from __future__ import annotations

import json
from typing import Any

from tether.jsonrpc.messages import ViolationReason, is_valid_id

# (reason, detail, the decoded value or None)
Problem = tuple[ViolationReason, str, Any]


def _reject_constant(name: str) -> Any:
    # NaN, Infinity and -Infinity are Python extensions, not JSON; refuse them so we never
    # hand the caller a value it could not send back.
    raise ValueError(f"{name} is not valid JSON")


# One decoder, built once: json.loads(..., parse_constant=...) would build a new one per call.
_decode_json = json.JSONDecoder(parse_constant=_reject_constant).decode


def decode_object(frame: bytes) -> dict[str, Any] | Problem:
    """The line as a JSON-RPC 2.0 object, or the problem with it."""
    # Decode explicitly as UTF-8: json.loads(bytes) would also guess UTF-16/32, which
    # ACP does not allow, and we want the two failures told apart.
    try:
        text = frame.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ("not-utf8", f"line is not valid UTF-8: {exc.reason}", None)
    try:
        obj = _decode_json(text)
    except (ValueError, RecursionError) as exc:
        # RecursionError: a few thousand nested brackets are enough to hit it, and a
        # hostile line must not escape as anything but a violation.
        detail = str(exc) if isinstance(exc, ValueError) else "nesting too deep"
        return ("malformed-json", f"line is not JSON: {detail}", None)
    if type(obj) is not dict:
        return ("invalid-message", f"expected an object, got {type(obj).__name__}", obj)
    version = obj.get("jsonrpc", "2.0")
    if version != "2.0":
        return ("invalid-message", f"jsonrpc is {version!r}", obj)
    return obj


def call_problem(obj: dict[str, Any]) -> Problem | None:
    """What is wrong with a request or notification (an object with a ``method``)."""
    if type(obj["method"]) is not str:
        return ("invalid-message", "method is not a string", obj)
    if "result" in obj or "error" in obj:
        return ("invalid-message", "a call with result or error", obj)
    params = obj.get("params")
    # JSON-RPC says params is structured; we accept null as "absent".
    if params is not None and type(params) is not dict and type(params) is not list:
        return ("invalid-message", "params is not an object", obj)
    if "id" in obj and not is_valid_id(obj["id"]):
        return ("invalid-message", f"bad id {obj['id']!r}", obj)
    return None


def response_problem(obj: dict[str, Any]) -> Problem | None:
    """What is wrong with a response (an object with an ``id`` and no ``method``)."""
    request_id = obj["id"]
    if not is_valid_id(request_id):
        return ("invalid-message", f"bad id {request_id!r}", obj)
    error = obj.get("error")
    if "result" in obj:
        # JSON-RPC 1.0 peers send the unused member as null; only both non-null is wrong.
        if error is not None and obj["result"] is not None:
            return ("invalid-message", "both result and error", obj)
    elif error is None:
        return ("invalid-message", "a response without result", obj)
    if error is not None and type(error) is not dict:
        return ("invalid-message", "error is not an object", obj)
    if request_id is None:
        if error is not None:
            # The peer could not even read the id of something we sent.
            return (
                "peer-error",
                f"peer reported an error with no id: {error.get('message')!r}",
                obj,
            )
        return ("invalid-message", "a result with a null id", obj)
    return None
