"""Start a session owner daemon and wait for its readiness, under a deadline.

``spawn_owner_daemon`` outlives its caller by design (the house naming: ``spawn_*``).
The owner is a fresh interpreter started with ``posix_spawn`` in a new session -- never
a ``fork()`` of a process that runs an event loop -- and it forks once more at start so
that it is not our child: a long-lived library process never accumulates its zombies.

Readiness is one JSON line on an inherited pipe. If the owner dies before saying it,
we show what it wrote on stderr. If another caller won the race for the session's
lock, the owner we started says ``busy`` and exits; we then connect to the winner.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from tether import _fdwait, paths
from tether.errors import FrameTooLarge, NoSession, OwnerUnavailable, error_from_wire
from tether.ipc.lines import LineReader

READY_DEADLINE_S = 15.0  # owner interpreter + registry + socket; generous for loaded CI


def spawn_owner_daemon(
    key: str, *, deadline_s: float = READY_DEADLINE_S, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Start the owner of session ``key``; return its readiness message.

    Returns:
        ``{"ready": True, "generation": G, "socket": path, "pid": P}``, or
        ``{"ready": False, "busy": True}`` when another owner holds the session's lock.

    Raises:
        OwnerUnavailable: the owner did not become ready in time, or failed to start
            (its stderr is in the message and in ``fields["stderr_tail"]``).
    """
    ready_r, ready_w = os.pipe()
    err_r, err_w = os.pipe()
    os.set_inheritable(ready_w, True)
    try:
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-m", "tether.owner", key, str(ready_w)],
            # The owner shares our home; `env` (the library's) reaches it and its agents.
            # TETHER_OWNER_OF: what is below an owner is the agent's side (tether.access).
            {**os.environ, **(env or {}), "TETHER_HOME": paths.home(), "TETHER_OWNER_OF": key},
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                # Never the caller's stdout: a long-lived owner holding it open would keep
                # `tether ... | cat` (or any caller reading our output to EOF) waiting
                # until the owner exits. Readiness has its own pipe.
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, err_w, 2),
            ],
            setsid=True,
        )
    except OSError as exc:
        for fd in (ready_r, ready_w, err_r, err_w):
            os.close(fd)
        raise OwnerUnavailable(f"cannot start the session owner: {exc}") from exc
    os.close(ready_w)
    os.close(err_w)
    try:
        line = _read_line(ready_r, time.monotonic() + deadline_s)
        # The intermediate process exits right after its fork; collect it.
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        if line is None:
            stderr = _drain(err_r)
            raise OwnerUnavailable(
                "the session owner failed to start"
                + (f": {stderr.strip()[-1500:]}" if stderr else ""),
                stderr_tail=stderr[-4000:],
            )
        try:
            message = json.loads(line)
        except ValueError:
            raise OwnerUnavailable(
                f"the session owner sent a bad readiness line: {line!r}"
            ) from None
        if not isinstance(message, dict):
            raise OwnerUnavailable("the session owner sent a bad readiness line")
        if message.get("noSession"):
            raise NoSession(str(message.get("error") or "no such session"), session_key=key)
        wire = message.get("errorWire")
        if isinstance(wire, dict):  # the owner's own error, e.g. a damaged state database
            raise error_from_wire(wire)
        if not message.get("ready") and not message.get("busy"):
            raise OwnerUnavailable(f"the session owner refused to start: {message.get('error')}")
        return message
    finally:
        os.close(ready_r)
        os.close(err_r)


READY_LINE_MAX = 64 * 1024  # a readiness line is a few hundred bytes


def _read_line(fd: int, deadline: float) -> str | None:
    """The first line on ``fd`` before ``deadline``; None on EOF, timeout or garbage."""
    lines = LineReader(READY_LINE_MAX, what="readiness line")
    while True:
        try:
            line = lines.next_line()
        except FrameTooLarge:
            return None
        if line is not None and not lines.at_eof:
            return line.decode(errors="replace")
        remaining = deadline - time.monotonic()
        if lines.at_eof or remaining <= 0:
            return None
        if not _fdwait.readable(fd, remaining):
            return None
        lines.feed(os.read(fd, 4096))


def _drain(fd: int) -> str:
    out = b""
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        if not _fdwait.readable(fd, max(0.0, end - time.monotonic())):
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out += chunk
    return out.decode(errors="replace")
