"""The IPC request payloads, kind by kind: what each may carry, checked strictly.

:func:`tether.ipc.protocol.parse_request` checks the envelope, then asks
:func:`payload_problem` about its payload, and rejects the request
(``QUEUE_PROTOCOL_MALFORMED_MESSAGE``) with the message returned. No I/O, no imports:
the thin CLI path and the owner's server share it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


def _wrong_type(payload: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> str | None:
    value = payload.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        return f"payload.{name} is missing or of the wrong type"
    return None


def _not_bool(payload: dict[str, Any], *names: str) -> str | None:
    for name in names:
        if name in payload and not isinstance(payload[name], bool):
            return f"payload.{name} must be a boolean"
    return None


def _not_object(payload: dict[str, Any], name: str) -> str | None:
    if payload.get(name) is not None and not isinstance(payload[name], dict):
        return f"payload.{name} must be an object"
    return None


def _prompt(payload: dict[str, Any]) -> str | None:
    prompt = payload.get("prompt")
    if not isinstance(prompt, list) or not prompt or not all(isinstance(b, dict) for b in prompt):
        return "payload.prompt must be a non-empty list of content blocks"
    return _not_bool(payload, "wait", "control", "updates")


def _cancel(payload: dict[str, Any]) -> str | None:
    target = payload.get("targetRequestId")
    if target is not None and not isinstance(target, str):
        return "payload.targetRequestId must be a string"
    return None


def _watch(payload: dict[str, Any]) -> str | None:
    start = payload.get("fromSeq")
    if start is not None and (not isinstance(start, int) or isinstance(start, bool) or start < 0):
        return "payload.fromSeq must be an integer >= 0"
    return _not_bool(payload, "follow", "control")


def _answer(payload: dict[str, Any]) -> str | None:
    # A controller's answer to an interaction (a question the agent asked).
    return (
        _wrong_type(payload, "interactionId", str)
        or _wrong_type(payload, "answer", str)
        or _not_object(payload, "content")
    )


def _relay_answer(payload: dict[str, Any]) -> str | None:
    # The prompter's answer to an agent request relayed to it (tether.owner.relays).
    return _wrong_type(payload, "relayId", str) or _not_object(payload, "error")


def _set_config_option(payload: dict[str, Any]) -> str | None:
    problem = _wrong_type(payload, "configId", str)
    if problem is None and not isinstance(payload.get("value"), str | bool | int | float):
        return "payload.value must be a string or boolean"
    return problem


def _close(payload: dict[str, Any]) -> str | None:
    return _not_bool(payload, "discard")  # session/delete the agent's session too


def _set_mode(payload: dict[str, Any]) -> str | None:
    return _wrong_type(payload, "modeId", str)


def _terminate(payload: dict[str, Any]) -> str | None:
    return _not_object(payload, "by")


# The kinds with a payload to check; the others (status, ...) carry none that matters.
_CHECKS = {
    "prompt": _prompt,
    "cancel": _cancel,
    "watch": _watch,
    "answer": _answer,
    "relay_answer": _relay_answer,
    "close": _close,
    "set_mode": _set_mode,
    "terminate": _terminate,
    "set_config_option": _set_config_option,
}


def payload_problem(kind: str, payload: dict[str, Any]) -> str | None:
    """What is wrong with a request's payload, or None when a ``kind`` request may carry it."""
    check = _CHECKS.get(kind)
    return None if check is None else check(payload)
