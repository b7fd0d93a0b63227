"""The CLI's last line of defence: an unexpected exception becomes one line and a log.

A traceback shown to a user is a bug report nobody can file: it scrolls, it hides the
one sentence that matters, and it is lost with the terminal. So ``main()`` hands any
exception that is not a :class:`~tether.errors.TetherError` to :func:`unexpected`:

- errors about the state database or directory that escaped their own translation
  (a ``sqlite3`` error, a full disk) are translated by the same functions the registry
  and ``paths`` use, so they read the same wherever they arose;
- anything else is written, traceback and all, to a log file (``TETHER_HOME/logs/``,
  or the temporary directory when that is not writable), and the user gets
  :class:`~tether.errors.InternalError` naming that file.
"""

from __future__ import annotations

import errno
import os
import sys
import time

from tether import paths
from tether.errors import InternalError, TetherError

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def unexpected(exc: BaseException) -> TetherError:
    """The Tether error to show for ``exc``; writes a crash log when it is a bug."""
    if type(exc).__module__ == "sqlite3":
        from tether.state.translate import translate_error

        return translate_error(exc, os.path.join(paths.home_path(), "state.db"))
    if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
        return paths.state_error(exc, str(exc.filename or paths.home_path()))
    log = write_crash_log(exc)
    where = f"details in {log}" if log else "no log could be written"
    return InternalError.of(exc, where)


def write_crash_log(exc: BaseException) -> str | None:
    """Write ``exc``'s traceback to a new 0600 file; return its path (None if nowhere)."""
    import tempfile
    import traceback

    from tether._version import __version__

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    text = f"tether {__version__} crashed at {stamp}\nargv: {sys.argv!r}\n\n" + "".join(
        traceback.format_exception(exc)
    )
    candidates = (
        (os.path.join(paths.home_path(), "logs"), f"crash-{stamp}-{os.getpid()}.log"),
        (tempfile.gettempdir(), f"tether-crash-{os.getuid()}-{stamp}-{os.getpid()}.log"),
    )
    for directory, name in candidates:
        path = os.path.join(directory, name)
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(text)
        return path
    return None
