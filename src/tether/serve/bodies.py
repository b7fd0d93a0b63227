"""Request bodies and query parameters, checked against small declarative specs. No I/O.

Every route that takes a body names its fields here (type, required, what it means);
the same table is the body's schema in the OpenAPI document. A body is refused, with a
:class:`tether.errors.UsageError` whose ``detail_code`` the problem mapper turns into a
4xx status, when it is:

========================  ==========================  ======
not UTF-8 JSON            ``BAD_JSON``                400
not a JSON object         ``WRONG_TYPE``              422
a field we do not know    ``UNKNOWN_FIELD``           422
a field of another type   ``WRONG_TYPE``              422
a required field missing  ``MISSING_FIELD``           422
a value out of range      ``BAD_VALUE``               422
longer than the limit     ``BODY_TOO_LARGE``          413
not ``application/json``  ``UNSUPPORTED_MEDIA_TYPE``  415
========================  ==========================  ======

Nothing that comes in is trusted past this module: handlers read fields that exist
and have the documented types.
"""

from __future__ import annotations

import math
from typing import Any, Final

from tether import _fastjson
from tether.errors import UsageError

# JSON type names -> Python checks. bool is not an integer here (JSON says so).
_CHECKS: Final = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


class Field:
    """One body field: its JSON types (one or more), whether required, what it means."""

    __slots__ = ("doc", "required", "types")

    def __init__(self, *types: str, required: bool = False, doc: str = "") -> None:
        self.types = types
        self.required = required
        self.doc = doc

    def schema(self) -> dict[str, Any]:
        if len(self.types) == 1:
            return {"type": self.types[0], "description": self.doc}
        return {"oneOf": [{"type": t} for t in self.types], "description": self.doc}


Spec = dict[str, Field]

ENSURE: Final[Spec] = {
    "agent": Field(
        "string", required=True, doc="a registry name (mock, claude...) or a config agent"
    ),
    "cwd": Field("string", required=True, doc="the agent's working directory (absolute)"),
    "name": Field("string", doc="the session's name within its scope (default: unnamed)"),
    "fresh": Field("boolean", doc="close an existing session of that scope first"),
    "permissions": Field("string", doc="approve-all | approve-reads | deny-all"),
    "ttl": Field("number", doc="owner idle TTL in seconds (0 = forever)"),
}
PROMPT: Final[Spec] = {
    "prompt": Field("string", "array", required=True, doc="text, or a list of ACP content blocks"),
    "timeoutMs": Field("integer", doc="give up on the turn after this long (it is cancelled)"),
    "permissions": Field("string", doc="this turn's permission mode"),
}
CANCEL: Final[Spec] = {
    "requestId": Field("string", doc="remove this queued request (default: the running turn)"),
    "wait": Field(
        "boolean",
        doc="answer once the cancelled turn has ended (at most its cancelGrace), saying"
        " whether the agent honoured the cancel",
    ),
}
MODE: Final[Spec] = {"modeId": Field("string", required=True, doc="session/set_mode's modeId")}
CONFIG: Final[Spec] = {
    "configId": Field("string", required=True, doc="the option's id (model, ...)"),
    "value": Field("string", "boolean", required=True, doc="its new value"),
}
ANSWER: Final[Spec] = {
    "answer": Field(
        "string",
        required=True,
        doc="allow | always | deny | deny-always | an offered optionId;"
        " elicitations: accept | decline | cancel",
    ),
    "content": Field("object", doc="an accepted elicitation form's values"),
}
PERMISSION_MODES: Final = ("approve-all", "approve-reads", "deny-all")


def _bad(detail_code: str, message: str, **fields: Any) -> UsageError:
    return UsageError(message, detail_code=detail_code, origin="http", **fields)


def check_media_type(content_type: str | None, body: bytes) -> None:
    """An empty body needs no type; any other must say ``application/json``."""
    if not body:
        return
    media = (content_type or "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise _bad(
            "UNSUPPORTED_MEDIA_TYPE",
            f"the body must be application/json, not {media or 'untyped'}",
        )


def too_large(size: int, limit: int) -> UsageError:
    return _bad("BODY_TOO_LARGE", f"the body is over the limit of {limit} bytes", limit=limit)


def parse(body: bytes, spec: Spec) -> dict[str, Any]:
    """The body as a dict holding only fields of ``spec``, with the documented types.

    An empty body is ``{}`` (then only a spec without required fields accepts it).

    Raises:
        UsageError: ``detail_code`` as in the module's table.
    """
    if body.strip():
        try:
            value = _fastjson.loads_unicode(body)
        except ValueError as exc:  # UnicodeDecodeError is one
            raise _bad("BAD_JSON", f"the body is not valid JSON: {exc}") from None
    else:
        value = {}
    if not isinstance(value, dict):
        raise _bad("WRONG_TYPE", "the body must be a JSON object")
    for name in value:
        if name not in spec:
            allowed = ", ".join(sorted(spec)) or "none"
            raise _bad("UNKNOWN_FIELD", f"unknown field {name!r} (allowed: {allowed})", field=name)
    for name, field in spec.items():
        if name not in value:
            if field.required:
                raise _bad("MISSING_FIELD", f"missing field {name!r}", field=name)
            continue
        if value[name] is None and not field.required:
            continue  # null means "not given" for an optional field
        if not any(_CHECKS[t](value[name]) for t in field.types):
            raise _bad(
                "WRONG_TYPE",
                f"field {name!r} must be {' or '.join(field.types)}",
                field=name,
            )
    return {k: v for k, v in value.items() if v is not None}


def bad_value(field: str, message: str) -> UsageError:
    return _bad("BAD_VALUE", message, field=field)


def prompt_blocks(value: str | list[Any]) -> list[dict[str, Any]]:
    """The ``prompt`` field as ACP content blocks.

    Raises:
        UsageError: ``BAD_VALUE`` -- empty text, or a block that is not an object with a
            string ``type``.
    """
    if isinstance(value, str):
        if not value.strip():
            raise bad_value("prompt", "the prompt is empty")
        return [{"type": "text", "text": value}]
    if not value:
        raise bad_value("prompt", "the prompt has no content blocks")
    for index, block in enumerate(value):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise bad_value("prompt", f"prompt[{index}] is not a content block with a type")
    return list(value)


def permission_mode(body: dict[str, Any]) -> str | None:
    mode = body.get("permissions")
    if mode is not None and mode not in PERMISSION_MODES:
        raise bad_value("permissions", f"permissions takes {', '.join(PERMISSION_MODES)}")
    return mode


def query_int(params: Any, name: str, *, minimum: int = 0) -> int | None:
    """An integer query parameter (None when absent).

    Raises:
        UsageError: ``BAD_VALUE`` -- not a whole number, or below ``minimum``.
    """
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        number = int(raw)
    except ValueError:
        raise bad_value(name, f"{name} must be a whole number, got {raw!r}") from None
    if number < minimum:
        raise bad_value(name, f"{name} must be at least {minimum}")
    return number


def query_choice(params: Any, name: str, choices: tuple[str, ...]) -> str | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if raw not in choices:
        raise bad_value(name, f"{name} takes {', '.join(choices)}")
    return str(raw)


def check_query(params: Any, allowed: tuple[str, ...]) -> None:
    """Unknown query parameters are refused like unknown body fields."""
    for name in params:
        if name not in allowed:
            raise _bad(
                "UNKNOWN_FIELD",
                f"unknown query parameter {name!r} (allowed: {', '.join(allowed) or 'none'})",
                field=name,
            )
