"""Fixtures for the fleet tier: one real PostgreSQL per test session, a fresh database
per test. Where the server cannot be started the tier skips with the reason -- and fails
where the run requires it (``.ci/run`` does: ``TETHER_TEST_REQUIRE_TIERS``)."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import _tiers

psycopg = pytest.importorskip("psycopg", reason="the fleet needs the fleet extra (psycopg)")

from tests.fleet._pg import PostgresServer, find_bindir  # noqa: E402 -- after the importorskip

_db_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    bindir = find_bindir()
    if bindir is None:
        _tiers.unavailable(
            "fleet",
            "no PostgreSQL server binaries (Debian: `apt-get install postgresql`)",
        )
    # Not under pytest's own temporary directory: that is private to root (0700), and
    # the server runs as nobody when the tests run as root.
    base = Path(tempfile.mkdtemp(prefix="tether-test-pg-"))
    server = PostgresServer(base / "cluster", bindir)
    try:
        server.init()
        server.start()
    except (RuntimeError, OSError) as e:
        server.stop()
        _tiers.unavailable("fleet", f"cannot start PostgreSQL: {e}")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def fleet_dsn(postgres: PostgresServer) -> str:
    """A fresh, empty database on the session's server."""
    return postgres.create_database(f"t{next(_db_numbers)}")
