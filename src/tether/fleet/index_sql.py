"""The fleet index's connection: the one place psycopg's errors become Tether's, the
schema migrations, and the connection's settings (:class:`tether.fleet.index.FleetIndex`
wraps one such connection; the ``index_*`` modules are its SQL, by concept).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from tether.errors import FleetError, IndexUnavailable
from tether.fleet.schema import MIGRATIONS

# pg_advisory_xact_lock key for migrations: any constant shared by every Tether.
_MIGRATION_LOCK = 0x7E7E_0001
# How long one statement may run before the index counts as unavailable. A frozen
# server must not hang a router's request: routing falls back to its cached host table.
DEFAULT_STATEMENT_TIMEOUT_MS = 5_000
DEFAULT_CONNECT_TIMEOUT_S = 3

# One connection to the index (autocommit), what every ``index_*`` function runs over.
Conn = psycopg.Connection[Any]


def new_session_id() -> str:
    """A fleet-global session id: random, never derived from a host, a cwd or a name.

    The same shape as a host's own session key (64 hex digits), so a host can keep a
    fleet session under this id and every path derived from a key stays as it is.
    """
    return secrets.token_hex(32)


@contextmanager
def translated(what: str) -> Iterator[None]:
    """The one boundary where psycopg's errors become Tether's."""
    try:
        yield
    except psycopg.OperationalError as e:
        raise IndexUnavailable(f"the fleet index cannot be reached ({what}): {e}") from e
    except psycopg.errors.QueryCanceled as e:
        raise IndexUnavailable(f"the fleet index did not answer in time ({what})") from e
    except psycopg.Error as e:
        raise FleetError(f"the fleet index refused {what}: {e}") from e


def connect(dsn: str, *, statement_timeout_ms: int, connect_timeout_s: int) -> Conn:
    """An autocommit connection to the index, its statements bounded in time."""
    with translated("connect"):
        return psycopg.connect(
            dsn,
            autocommit=True,
            connect_timeout=connect_timeout_s,
            options=f"-c statement_timeout={int(statement_timeout_ms)}",
            application_name="tether",
        )


def migrate(conn: Conn) -> int:
    """Bring the index's schema up to date; returns the version. Safe to race."""
    with translated("migrate"), conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS fleet_migrations ("
            " version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT count(*) FROM fleet_migrations").fetchone()
        version = int(row[0]) if row else 0
        if version > len(MIGRATIONS):
            raise FleetError(
                f"the fleet index is at schema version {version}, newer than this Tether"
                f" knows ({len(MIGRATIONS)}): upgrade Tether on this machine"
            )
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            conn.execute(script.encode())
            conn.execute("INSERT INTO fleet_migrations (version) VALUES (%s)", (number,))
        return len(MIGRATIONS)


def schema_version(conn: Conn) -> int:
    """The number of migrations the index has applied."""
    with translated("schema version"):
        row = conn.execute("SELECT count(*) FROM fleet_migrations").fetchone()
    return int(row[0]) if row else 0
