"""Read-only looks at a state database for ``tether doctor``: nothing is changed.

The doctor must not open a :class:`tether.state.registry.Registry` to check a database (that
would migrate it, and a damaged one would fail before saying how), so it reads through
these, on a connection opened ``mode=ro``. SQLite's errors become Tether's here
(:func:`tether.state.translate.translate_error`), as everywhere in the state layer.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from tether.state.translate import translate_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.state.journal.store import Damage

__all__ = ["damaged_journal_chunks", "integrity"]


@contextmanager
def _read_only(path: str) -> Iterator[sqlite3.Connection]:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error as exc:
        raise translate_error(exc, path) from exc
    try:
        yield db
    except sqlite3.Error as exc:
        raise translate_error(exc, path) from exc
    finally:
        db.close()


def integrity(path: str) -> tuple[list[str], int]:
    """``(PRAGMA integrity_check's rows, the schema version)`` of the database at ``path``.

    Raises:
        StateError: the database cannot be opened or read (translated).
    """
    with _read_only(path) as db:
        rows = [str(r[0]) for r in db.execute("PRAGMA integrity_check").fetchall()]
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
    return rows, version


def damaged_journal_chunks(path: str) -> list[tuple[str, Damage]] | None:
    """``(session key, damage)`` for every damaged journal chunk, every line decoded
    (:func:`tether.state.journal.damage.damaged_chunks`); None when no journal is stored yet
    (an empty or older database).

    Raises:
        StateError: the database cannot be opened or read (translated).
    """
    from tether.state.journal.damage import damaged_chunks

    with _read_only(path) as db:
        tables = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'journal_chunks'")
        if tables.fetchone() is None:
            return None
        return list(damaged_chunks(db))
