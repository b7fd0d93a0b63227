"""What a JSON-RPC 2.0 server answers to a message it cannot take as a request.

A client waiting for an answer must get one, whatever it sent (issue 21 item 11). The
core (:class:`tether.jsonrpc.JsonRpcConnection`) reports such a line as an
``invalid-message`` :class:`~tether.jsonrpc.ProtocolViolation` carrying the decoded
value; :func:`reply_to_invalid` turns that value into the answer JSON-RPC 2.0 asks for:

* not an object (``42``, ``"x"``, ``true``), or an object that is neither a request, a
  notification nor a response (``{}``), or a request whose ``jsonrpc`` or ``method`` is
  wrong: ``-32600`` Invalid Request;
* ``params`` that is neither an object nor an array: ``-32602`` Invalid params;
* each carries the request's ``id`` when it has a valid one (a string, an integer),
  else ``null`` (``1.5``, ``{"a":1}``, ``true`` are not ids);
* a batch (an array): we serve no batches; an empty one gets one ``-32600``, otherwise
  the answer is an array with a ``-32600`` for each member that is not a notification;
* an otherwise valid request whose id is still unanswered (a reused id): ``-32600``
  with ``null``, since an answer under that id would read as the first request's;
* a (malformed) response or a notification is never answered;
* a line over the reader's limit cannot be decoded: :func:`reply_to_oversized` answers
  it ``-32600`` under the id its first bytes show (``{"jsonrpc":"2.0","id":7,...``:
  clients write it before ``params``) rather than an id-less parse error.

No I/O: bytes out, for the caller to write.
"""

from __future__ import annotations

import re
from typing import Any

from tether.jsonrpc.messages import INVALID_PARAMS, INVALID_REQUEST, encode, is_valid_id

__all__ = ["reply_to_invalid", "reply_to_oversized"]

# A top-level "id" member before any nested value: `{"jsonrpc":"2.0","id":7,"method":...`.
_HEAD_ID = re.compile(
    rb'^\s*\{(?:\s*"(?:jsonrpc|method)"\s*:\s*"[^"\\]*"\s*,)*'  # members before it
    rb'\s*"id"\s*:\s*(-?\d+|"[^"\\]*")\s*[,}]'
)


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _answer(raw: Any, detail: str, *, in_batch: bool = False) -> dict[str, Any] | None:
    """The error answer to one decoded message, or None when none is due."""
    if type(raw) is not dict:
        kind = "an array" if type(raw) is list else f"a {type(raw).__name__}"
        return _error(None, INVALID_REQUEST, f"invalid request: {kind}, not an object")
    has_id = "id" in raw
    request_id = raw["id"] if has_id and is_valid_id(raw["id"]) else None
    if "method" not in raw:
        if "result" in raw or "error" in raw:
            return None  # a response, however malformed: a client's answer, never answered
        return _error(request_id, INVALID_REQUEST, "invalid request: no method")
    method = raw["method"]
    if type(method) is not str:
        return _error(request_id, INVALID_REQUEST, "invalid request: method is not a string")
    if not has_id:
        return None  # a notification: JSON-RPC never answers one, not even a bad one
    if raw.get("jsonrpc") != "2.0":
        return _error(request_id, INVALID_REQUEST, 'invalid request: jsonrpc is not "2.0"')
    if not is_valid_id(raw["id"]):
        return _error(None, INVALID_REQUEST, f"invalid request: bad id {raw['id']!r}")
    if "result" in raw or "error" in raw:
        return _error(request_id, INVALID_REQUEST, "invalid request: a call with a result")
    params = raw.get("params")
    if params is not None and type(params) is not dict and type(params) is not list:
        return _error(request_id, INVALID_PARAMS, f"invalid params for {method}: not an object")
    if in_batch:
        return _error(request_id, INVALID_REQUEST, "invalid request: batches are not supported")
    # Looks valid: the core refused it for its id, still unanswered (reused).
    return _error(None, INVALID_REQUEST, f"invalid request: {detail}")


def reply_to_invalid(raw: Any, detail: str) -> bytes | None:
    """The line to send for a message the core refused as ``invalid-message`` (``raw``:
    its decoded value, ``detail``: the core's reason), or None when none is due."""
    if type(raw) is list:
        if not raw:
            return encode(_error(None, INVALID_REQUEST, "invalid request: an empty batch"))
        answers = [a for item in raw if (a := _answer(item, detail, in_batch=True)) is not None]
        return encode(answers) if answers else None
    answer = _answer(raw, detail)
    return encode(answer) if answer is not None else None


def reply_to_oversized(excerpt: bytes, limit: int, seen: int, limit_name: str = "") -> bytes | None:
    """The answer to a request longer than ``limit`` (``seen`` bytes of it were read)
    whose first bytes are ``excerpt``: ``-32600`` under the id those bytes show; None
    when they show no request id (the caller answers a parse error, as for any line
    it cannot read). ``limit_name``: how the user sets the limit, for the message."""
    match = _HEAD_ID.match(excerpt)
    if match is None or b'"method"' not in excerpt:
        return None
    token = match.group(1)
    request_id: Any = int(token) if token[:1] != b'"' else token[1:-1].decode("utf-8", "replace")
    message = f"invalid request: a message of at least {seen} bytes, over the limit of {limit}"
    if limit_name:
        message += f" ({limit_name})"
    return encode(_error(request_id, INVALID_REQUEST, message))
