"""Structured logging: one JSON object per decision, bound to lease and session.

Every supervision decision (spawn, output heartbeat, cancel, exit, cleanup, reconcile)
is logged as one event with its fields, through the stdlib ``logging`` module so that
library users can route it like any other log. Call sites use ``event()``, or a
:class:`Bound` logger that carries its context into every line (structlog's
``bind``): the seeds name the fields each kind of line must carry --

* supervision lines (seed 003): ``runId`` (the lease id) and ``reason``;
* owner lines (seed 001): ``sessionId``, ``requestId`` where there is one,
  ``ownerPid`` and ``ownerGeneration`` -- :func:`owner_context` binds them.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import Any, TextIO

logger = logging.getLogger("tether")
# A library's logs are its user's to route: without a handler of theirs (or
# configure()), warnings must not fall through to logging's last-resort stderr
# printer and land, bare, in a CLI user's terminal.
logger.addHandler(logging.NullHandler())


#: Context every line of this process carries (an owner binds its session, pid and
#: generation once it knows them: one session per owner process).
_process_context: dict[str, Any] = {}


def bind_process(**fields: Any) -> None:
    """Add ``fields`` to every later line of this process (``None`` removes a field)."""
    for key, value in fields.items():
        if value is None:
            _process_context.pop(key, None)
        else:
            _process_context[key] = value


#: Context of the current task and what it starts (a session host's owners, several in
#: one process, each bind their own: :func:`bind_task`). Threads start with none.
_task_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "tether_log_context", default=None
)


def bind_task(**fields: Any) -> None:
    """Add ``fields`` to every later line of this task and the tasks it starts (``None``
    removes a field); the task's own copy, never another's."""
    merged = dict(_task_context.get() or {})
    for key, value in fields.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    _task_context.set(merged)


def context() -> dict[str, Any]:
    """The context a line logged here and now carries: the process's, then the task's."""
    task = _task_context.get()
    return {**_process_context, **task} if task else _process_context


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured event; fields are JSON-serialised by the formatter."""
    if logger.isEnabledFor(level):
        logger.log(level, name, extra={"tether_fields": {**context(), **fields}})


class Bound:
    """A logger with context: every :meth:`event` carries the bound fields too.

    Fields given to :meth:`event` win over bound ones of the same name. Binding is
    cheap (a dict copy) and immutable: :meth:`bind` returns a new logger.
    """

    __slots__ = ("fields",)

    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    def bind(self, **fields: Any) -> Bound:
        """A new logger with ``fields`` added to this one's context."""
        return Bound(**{**self.fields, **fields})

    def event(self, name: str, level: int = logging.INFO, **fields: Any) -> None:
        """Log one structured event with the bound context and ``fields``."""
        if logger.isEnabledFor(level):
            merged = {**context(), **self.fields, **fields}
            logger.log(level, name, extra={"tether_fields": merged})


def bind(**fields: Any) -> Bound:
    """A :class:`Bound` logger carrying ``fields`` into every line."""
    return Bound(**fields)


def owner_context(
    *, session_id: str, owner_pid: int, owner_generation: int, request_id: str | None = None
) -> Bound:
    """The seed-001 context of an owner's lines: bind once, ``.bind(requestId=...)`` per request."""
    return Bound(
        sessionId=session_id,
        requestId=request_id,
        ownerPid=owner_pid,
        ownerGeneration=owner_generation,
    )


class JsonFormatter(logging.Formatter):
    """One JSON line per record: ``{ts, level, logger, event, ...fields}``."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(time.time(), 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "tether_fields", None)
        # Lines logged without event() (logger.exception) still carry the context.
        data.update(fields if isinstance(fields, dict) else context())
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, separators=(",", ":"))


def configure(
    stream: TextIO | None = None,
    *,
    level: int = logging.INFO,
    handler: logging.Handler | None = None,
) -> None:
    """Send Tether's logs to ``stream`` (default stderr) as JSON lines (or to
    ``handler``, which is given the JSON formatter)."""
    if handler is None:
        handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("tether")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
