"""Read-only registry lookups on the gateway's hot paths, over one connection per thread.

Opening the state database costs about a millisecond (connect, WAL pragma, the schema
check); a prompt's round trip needs two lookups (the stream's start, the session's
state). The gateway's worker threads are long-lived, so each keeps one connection and
reuses it. A connection reads the newest committed data at every statement (autocommit,
WAL), so nothing goes stale; it is reopened if the database file was replaced, and
dropped after any error.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from tether import paths
from tether.errors import NoSession
from tether.state.registry import Registry

_FAILED: tuple[type[Exception], ...] = (
    *Registry.ERRORS,
    OSError,
)  # the lookup failed: start afresh next time

_local = threading.local()


def _identity(path: str) -> tuple[str, int]:
    try:
        return path, os.stat(path).st_ino
    except OSError:
        return path, -1


@contextlib.contextmanager
def registry() -> Iterator[Registry]:
    """This thread's registry connection (opened on first use)."""
    identity = _identity(paths.state_db())
    cached: tuple[tuple[str, int], Registry] | None = getattr(_local, "cached", None)
    if cached is None or cached[0] != identity:
        if cached is not None:
            cached[1].close()
        _local.cached = None
        reg = Registry(identity[0])
        cached = (_identity(identity[0]), reg)
        _local.cached = cached
    try:
        yield cached[1]
    except _FAILED:
        _local.cached = None  # whatever went wrong, the next lookup starts afresh
        cached[1].close()
        raise


def last_seq(key: str) -> int:
    """The last stored seq of session ``key`` (0 if none)."""
    with registry() as reg:
        return reg.journal_last_seq(key)


def stream_info(key: str) -> tuple[str, int]:
    """The session's state and its last stored seq. Raises NoSession."""
    with registry() as reg:
        session = reg.session(key)
        if session is None:
            raise NoSession("no such session", session_key=key)
        return session.state, reg.journal_last_seq(key)
