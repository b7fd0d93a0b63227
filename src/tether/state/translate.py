"""The one place where errors about the state database become Tether's ``StateError``s.

The registry wraps its opening, every transaction and every read in
:func:`translate_error`; the CLI's last line of defence uses it too, for a ``sqlite3``
error raised by code that reached the database some other way. It reads only the
exception's ``sqlite_errorname`` and the file system, so it imports no ``sqlite3``.
"""

from __future__ import annotations

import os

from tether import paths
from tether.errors import (
    StateBusy,
    StateCorrupt,
    StateError,
    StateFull,
    StatePermission,
    TetherError,
)

_CORRUPT = frozenset({"SQLITE_NOTADB", "SQLITE_CORRUPT"})
_FULL = frozenset({"SQLITE_FULL"})
_BUSY = frozenset({"SQLITE_BUSY", "SQLITE_LOCKED"})
_DENIED = frozenset({"SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM", "SQLITE_AUTH"})
_LOW_SPACE_BYTES = 1 << 20  # an I/O error with less than 1 MiB free is a full disk


def _free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(os.path.dirname(path) or ".")
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def translate_error(exc: BaseException, path: str) -> TetherError:
    """Turn a ``sqlite3`` (or OS) error on the database at ``path`` into a ``StateError``.

    The categories follow SQLite's primary result codes (``sqlite_errorname``):
    NOTADB/CORRUPT → :class:`StateCorrupt` (recovery: ``tether doctor --repair``);
    FULL, and an IOERR on a file system with almost no space left → :class:`StateFull`;
    CANTOPEN/READONLY/PERM where we lack access → :class:`StatePermission`, naming the
    owner; BUSY/LOCKED (the busy timeout ran out) → :class:`StateBusy`, naming the
    process that holds the write lock. Anything else is a plain :class:`StateError`
    with SQLite's message.
    """
    if isinstance(exc, TetherError):
        return exc
    if isinstance(exc, OSError):
        return paths.state_error(exc, path)
    name = str(getattr(exc, "sqlite_errorname", "")).split("_")
    primary = "_".join(name[:2])  # SQLITE_IOERR_SHMSIZE -> SQLITE_IOERR
    detail = str(exc)
    if primary in _CORRUPT or "not a database" in detail or "malformed" in detail:
        return StateCorrupt(
            f"the state database {path} is damaged ({detail}); nothing was changed."
            " Run `tether doctor` to check it and `tether doctor --repair` to move it"
            " aside and start a fresh one.",
            path=path,
        )
    if primary in _BUSY:
        return _busy(detail, path)
    free = _free_bytes(path)
    if primary in _FULL or (
        primary == "SQLITE_IOERR" and (free is None or free < _LOW_SPACE_BYTES)
    ):
        return StateFull(
            f"cannot write the state database {path}: {detail}"
            + (f" ({free // 1024} KiB free)" if free is not None else "")
            + ". The change was rolled back; free some space and retry.",
            path=path,
        )
    directory = os.path.dirname(path)
    if primary in _DENIED and not (
        os.access(directory, os.W_OK | os.X_OK)
        and (not os.path.exists(path) or os.access(path, os.R_OK | os.W_OK))
    ):
        who = paths.owner_of(path if os.access(directory, os.X_OK) else directory)
        return StatePermission(
            f"cannot open the state database {path}: {detail}; {who}. Use a TETHER_HOME"
            " of your own, or run as the user who owns it.",
            path=path,
        )
    return StateError(f"the state database {path} failed: {detail}", path=path)


def _busy(detail: str, path: str) -> StateBusy:
    from tether.state.lock_holders import describe_holders  # /proc reads: only here

    holders = describe_holders(path)
    held = f"held by {holders}" if holders else "its holder is not listed in /proc/locks"
    return StateBusy(
        f"the state database {path} stayed locked ({detail}): {held}; nothing was"
        " changed. Retry once that process continues or ends.",
        path=path,
    )
