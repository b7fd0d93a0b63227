"""The journal's SQLite connections: how its writer and replay readers open one."""

from __future__ import annotations

import sqlite3


def open_db(path: str) -> sqlite3.Connection:
    """A connection for the journal's threads (writer, replay readers)."""
    db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA busy_timeout=10000")
    # Appends and chunked reads touch few pages: a small cache keeps a warm owner small.
    db.execute("PRAGMA cache_size=-512")
    return db
