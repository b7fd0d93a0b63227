"""Reading a session's journal from the state database, as a reader on the host does.

The owner answers a turn before its journal writer has committed the turn's last
entries (they reach the database within milliseconds: :mod:`tether.state.journal.writer`),
so a test that reads the database right after an answer waits, bounded, for what it is
about to assert on rather than racing the writer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Entries = list[dict[str, Any]]


def journal_entries(key: str) -> Entries:
    """The session's stored entries, oldest first."""
    from tether.state.journal import store
    from tether.state.journal.entry import parse_line
    from tether.state.registry import Registry

    with Registry() as registry:
        return [parse_line(line) for _, line in store.iter_lines(registry._db, key)]


def journal_when(key: str, done: Callable[[Entries], bool], timeout: float = 10.0) -> Entries:
    """The stored entries once ``done`` holds of them, or as they are after ``timeout``
    seconds (the caller's assertion then says what is missing)."""
    deadline = time.monotonic() + timeout
    while not done(entries := journal_entries(key)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return entries


def count(kind: str, at_least: int = 1) -> Callable[[Entries], bool]:
    """``done`` for :func:`journal_when`: at least ``at_least`` entries of ``kind``."""
    return lambda entries: sum(e.get("kind") == kind for e in entries) >= at_least
