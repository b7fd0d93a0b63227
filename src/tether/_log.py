"""Structured logging: one JSON object per decision, bound to lease and session.

Every supervision decision (spawn, output heartbeat, cancel, exit, cleanup, reconcile)
is logged as one event with its fields, through the stdlib ``logging`` module so that
library users can route it like any other log. ``event()`` is the only call sites use.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

logger = logging.getLogger("tether")


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured event; fields are JSON-serialised by the formatter."""
    if logger.isEnabledFor(level):
        logger.log(level, name, extra={"tether_fields": fields})


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
        if isinstance(fields, dict):
            data.update(fields)
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, separators=(",", ":"))


def configure(stream: TextIO | None = None, *, level: int = logging.INFO) -> None:
    """Send Tether's logs to ``stream`` (default stderr) as JSON lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("tether")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
