"""Session identity: the key, and where its owner's lock and socket live.

A session is keyed by (agent command, cwd, name), as in acpx. The key is a hash, so
every path derived from it is short and safe, and a caller can find a live owner's
socket by computing a path -- no database read, no directory scan -- which keeps the
warm path O(1) and free of sqlite3.

Standard library only: on the thin CLI path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from tether import paths

DEFAULT_NAME = ""  # the unnamed session of a scope, as acpx's


def session_key(argv: Sequence[str], cwd: str, name: str = DEFAULT_NAME) -> str:
    blob = json.dumps([list(argv), cwd, name], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def socket_path(key: str) -> Path:
    return paths.socket_dir() / f"{key[:24]}.sock"


def lock_path(key: str) -> Path:
    return paths.run_dir() / f"{key[:24]}.lock"


def log_path(key: str) -> Path:
    return paths.logs_dir() / f"owner-{key[:24]}.log"
