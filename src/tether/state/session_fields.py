"""A session row's columns and an owner's kept metrics, written in the caller's transaction.

Two writers use it: :meth:`tether.state.registry.Registry.update_session` (its own
transaction: the owner's heartbeat, the CLI) and the owner's journal writer, whose
batch commit carries the owner's status row when it has changed
(:func:`tether.state.journal.store.write_batch`): a quick turn's status then costs its
owner no write transaction of its own (issue 23).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable
from typing import Any

from tether.state.metric_rows import apply_metric_ops

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.metrics import MetricOp

__all__ = ["JSON_COLUMNS", "write_session_fields"]

JSON_COLUMNS = ("desired_config", "options", "last_end")


def write_session_fields(
    db: sqlite3.Connection, key: str, fields: dict[str, Any], metric_ops: Iterable[MetricOp]
) -> None:
    """Set columns of a session's row (and ``updated_at``), and write ``metric_ops``."""
    fields = dict(fields)
    for name in JSON_COLUMNS:
        if name in fields and not isinstance(fields[name], str) and fields[name] is not None:
            fields[name] = json.dumps(fields[name])
    fields["updated_at"] = time.time()
    sets = ", ".join(f"{k} = ?" for k in fields)
    db.execute(f"UPDATE sessions SET {sets} WHERE key = ?", (*fields.values(), key))  # noqa: S608 -- column names are ours
    apply_metric_ops(db, metric_ops)
