"""A session host's logs: each hosted owner's lines to its session's log, the rest to
the host's own (``logs/host-PID.log``, which is also the host's stderr).

A line belongs to a session when its context names one (``sessionId``: bound by each
hosted owner for its tasks, :func:`tether._log.bind_task`, or given with the event);
so ``sessions logs`` and a reader of ``owner-KEY.log`` see what they saw of an owner of
its own process. A line a thread logs without naming its session goes to the host's.
"""

from __future__ import annotations

import logging
import os
from typing import IO

from tether import _log, paths, sessions

__all__ = ["SessionLogs", "route_logs"]


class SessionLogs(logging.Handler):
    """Writes each record to its session's log file, or to the host's."""

    def __init__(self, host_stream: IO[str]) -> None:
        super().__init__()
        self._host = host_stream
        self._files: dict[str, IO[str]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
            fields = getattr(record, "tether_fields", None)
            if not isinstance(fields, dict):
                fields = _log.context()
            key = fields.get("sessionId") or fields.get("session_key")
            stream = self._session(key) if isinstance(key, str) and key else self._host
            stream.write(line)
            stream.flush()
        except Exception:  # a log line must never break an owner (logging's own rule)
            self.handleError(record)

    def _session(self, key: str) -> IO[str]:
        stream = self._files.get(key)
        if stream is None:
            fd = os.open(
                sessions.log_path(key), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
            )
            stream = self._files[key] = os.fdopen(fd, "w")
        return stream

    def forget(self, key: str) -> None:
        """The session's owner ended here: close its file (a later line opens it again)."""
        self.acquire()
        try:
            stream = self._files.pop(key, None)
        finally:
            self.release()
        if stream is not None:
            stream.close()


def route_logs() -> SessionLogs:
    """Send this process's Tether logs through a :class:`SessionLogs`, and its stderr
    (a traceback nobody caught) to the host's log."""
    path = os.path.join(paths.logs_dir(), f"host-{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    handler = SessionLogs(os.fdopen(os.dup(fd), "w"))
    _log.configure(handler=handler, level=logging.INFO)
    os.dup2(fd, 2)
    os.close(fd)
    return handler
