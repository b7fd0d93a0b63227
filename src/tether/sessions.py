"""Session identity: the key, and where its owner's lock and socket live.

A session is keyed by (agent command, cwd, name), as in acpx. The key is a hash, so
every path derived from it is short and safe, and a caller can find a live owner's
socket by computing a path -- no database read, no directory scan -- which keeps the
warm path O(1) and free of sqlite3.

Standard library only: on the thin CLI path.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from tether import paths
from tether._fastjson import dumps
from tether._hash import sha256_hex

DEFAULT_NAME = ""  # the unnamed session of a scope, as acpx's


def agent_scope(label: str, argv: Sequence[str], *, named: bool) -> str:
    """What identifies the agent in a session key.

    A registry name (``claude``, ``mock``) identifies itself: its argv may legitimately
    differ between calls (an installed binary found later, another interpreter path
    for ``mock``), and it must still be the same session. A raw command is identified
    by its argv, as acpx stores the rendered command string.
    """
    return f"name:{label}" if named else "argv:" + dumps(list(argv))


def session_key(agent_scope: str, cwd: str, name: str = DEFAULT_NAME) -> str:
    blob = dumps([agent_scope, cwd, name])
    return sha256_hex(blob)


def socket_path(key: str) -> str:
    return os.path.join(paths.socket_dir(), f"{key[:24]}.sock")


def lock_path(key: str) -> str:
    return os.path.join(paths.run_dir(), f"{key[:24]}.lock")


def create_lock_path(key: str) -> str:
    """Held while a session of ``key`` is created or replaced (``operations.ensure_session``)."""
    return os.path.join(paths.run_dir(), f"{key[:24]}.create.lock")


def log_path(key: str) -> str:
    return os.path.join(paths.logs_dir(), f"owner-{key[:24]}.log")


def try_lock(key: str) -> int | None:
    """The session's lock, if no owner holds it (then we may write its journal), as an
    open descriptor to close when done; None if an owner holds it."""
    import fcntl

    fd = os.open(lock_path(key), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd
