"""Start a session owner daemon and wait for its readiness, under a deadline.

``spawn_owner_daemon`` outlives its caller by design (the house naming: ``spawn_*``).
The owner is a fresh interpreter started with ``posix_spawn`` in a new session -- never
a ``fork()`` of a process that runs an event loop -- and it forks once more at start so
that it is not our child: a long-lived library process never accumulates its zombies.

Readiness is one JSON line on an inherited pipe. If the owner dies before saying it,
we show what it wrote on stderr. If another caller won the race for the session's
lock, the owner we started says ``busy`` and exits; we then connect to the winner.

How the owner process comes to be is a strategy (:data:`Launcher`): by default
:func:`exec_owner` (``posix_spawn`` of ``python -m tether.owner``); the HTTP gateway
installs its owner fork server's (:mod:`tether.forkserver`) with :func:`set_launcher`,
which forks owners from one process that imported their modules once and falls back to
:func:`exec_owner` when the fork server fails. Either way the launcher only starts the
process: readiness, ``busy``, the stderr tail and the deadline are handled here, once.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

from tether import _fdwait, paths
from tether.errors import FrameTooLarge, NoSession, OwnerUnavailable, error_from_wire
from tether.ipc.lines import LineReader

TYPE_CHECKING = False  # typing costs every CLI call that may start an owner ~2 ms
if TYPE_CHECKING:
    from typing import Any

READY_DEADLINE_S = 15.0  # owner interpreter + registry + socket; generous for loaded CI

# (key, the owner's environment, readiness pipe's write end, stderr's write end) ->
# the pid of our child to collect once readiness is said, or None (nothing to collect).
# The launcher must not close the two fds: the caller does, once it has returned.
Launcher = Callable[[str, dict[str, str], int, int], "int | None"]


def exec_owner(key: str, env: dict[str, str], ready_w: int, err_w: int) -> int | None:
    """Start the owner as a fresh interpreter (``python -m tether.owner KEY FD``) in a
    new session; it forks once more (detaching), so the pid returned is collected soon.

    Raises:
        OwnerUnavailable: ``posix_spawn`` failed.
    """
    os.set_inheritable(ready_w, True)
    try:
        return os.posix_spawn(
            sys.executable,
            [sys.executable, "-P", "-m", "tether.owner", key, str(ready_w)],
            env,
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
        raise OwnerUnavailable(f"cannot start the session owner: {exc}") from exc


_launcher: Launcher = exec_owner


def or_exec(
    start: Callable[[], bool],
    failed: Callable[[OwnerUnavailable], None],
    key: str,
    env: dict[str, str],
    ready_w: int,
    err_w: int,
) -> int | None:
    """A launcher's own way (``start``: True once it started the owner, False when the
    start is not its to serve), else :func:`exec_owner` -- quietly when refused, after
    ``failed`` (counted, logged) when ``start`` raised. The pid to collect, or None."""
    try:
        started = start()
    except OwnerUnavailable as exc:
        failed(exc)
        return exec_owner(key, env, ready_w, err_w)
    return None if started else exec_owner(key, env, ready_w, err_w)


def set_launcher(launcher: Launcher | None) -> None:
    """Start owners with ``launcher`` from now on (None: :func:`exec_owner` again)."""
    global _launcher
    _launcher = launcher or exec_owner


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
    # The owner shares our home; `env` (the library's) reaches it and its agents.
    # TETHER_OWNER_OF: what is below an owner is the agent's side (tether.policy.access).
    owner_env = {**os.environ, **(env or {}), "TETHER_HOME": paths.home(), "TETHER_OWNER_OF": key}
    try:
        pid = _launcher(key, owner_env, ready_w, err_w)
    except BaseException:
        for fd in (ready_r, ready_w, err_r, err_w):
            os.close(fd)
        raise
    os.close(ready_w)
    os.close(err_w)
    try:
        line = _read_line(ready_r, time.monotonic() + deadline_s)
        # The intermediate process exits right after its fork; collect it (a fork
        # server collects its own).
        if pid is not None:
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
