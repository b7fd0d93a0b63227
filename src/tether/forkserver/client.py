"""The gateway's handle on its owner fork server: start, the launcher, stop.

:meth:`ForkServer.launch` is a :data:`tether.owner_launch.Launcher`: the gateway installs
it with :func:`tether.owner_launch.set_launcher`. Requests come from the gateway's
worker threads; one lock serialises them (a fork is a few milliseconds). Any failure of
the fork server makes that one start an exec (:func:`tether.owner_launch.exec_owner`),
logged; the broken fork server is ended and reaped, and a new one is started on the next
request -- or, when the one before exited by itself before its hello (it cannot start:
say, a broken install), no sooner than :data:`RESTART_AFTER_S` later, so a fork server
that cannot start is not tried again on every request.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tether import paths
from tether.errors import OwnerUnavailable
from tether.forkserver import MAX_REQUEST, OWNER_MARKER, REPLY_TIMEOUT_S
from tether.owner_launch import or_exec

__all__ = ["ForkServer"]

logger = logging.getLogger("tether.forkserver")

RESTART_AFTER_S = 1.0  # a fork server failing at start is not retried on every request
STOP_GRACE_S = 3.0  # after EOF, how long it may take to exit before it is killed
_REPLY_MAX = 64 * 1024


class ForkServer:
    """One fork server, started by :meth:`start`, ended by :meth:`stop` (idempotent)."""

    def __init__(self, log: Callable[[str], None] | None = None) -> None:
        self._log = log or logger.warning
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._hello = False
        self._not_before = 0.0
        self._stopped = False
        self.starts = 0  # fork servers started
        self.forks = 0  # owners forked
        self.fallbacks = 0  # owners exec'd because the fork server failed

    def start(self) -> None:
        """Start the fork server now (the gateway's startup); a failure is logged and
        left to the lazy restart."""
        with self._lock:
            try:
                self._start_locked()
            except OSError as exc:
                self._log(f"owner fork server: cannot start it ({exc}); owners are exec'd")
                self._not_before = time.monotonic() + RESTART_AFTER_S

    def launch(self, key: str, env: dict[str, str], ready_w: int, err_w: int) -> int | None:
        """Fork the owner of ``key`` from the fork server; exec it if that fails.

        Returns: None (the fork server collects its own), or the exec'd child's pid.
        Raises: OwnerUnavailable: the exec failed too.
        """
        return or_exec(
            lambda: self._fork(key, env, ready_w, err_w), self._failed, key, env, ready_w, err_w
        )

    def _fork(self, key: str, env: dict[str, str], ready_w: int, err_w: int) -> bool:
        forked = self._request(key, env, ready_w, err_w)
        if forked:
            with self._lock:
                self.forks += 1
        return forked

    def _failed(self, exc: OwnerUnavailable) -> None:
        with self._lock:
            self.fallbacks += 1
        self._log(f"owner fork server: {exc}; starting this owner by exec")

    def status(self) -> dict[str, Any]:
        """For ``/v1/health``: the running fork server's pid (or None) and counts."""
        proc = self._proc
        running = proc is not None and proc.poll() is None
        return {
            "pid": proc.pid if running and proc is not None else None,
            "starts": self.starts,
            "forks": self.forks,
            "fallbacks": self.fallbacks,
        }

    def stop(self) -> None:
        """End the fork server: close our end (it exits on EOF), wait, kill past a grace.
        Idempotent; owners it forked are not its children and live on."""
        # A request in flight waits at most REPLY_TIMEOUT_S; we do not wait longer.
        locked = self._lock.acquire(timeout=REPLY_TIMEOUT_S + 1.0)
        try:
            self._stopped = True
            self._end_locked()
        finally:
            if locked:
                self._lock.release()

    def _start_locked(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {**os.environ, "TETHER_HOME": paths.home(), "TETHER_OWNER_OF": OWNER_MARKER}
        try:
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "tether.owner.fork_server", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # never the gateway's stdout (its announcement)
                env=env,
                start_new_session=True,  # a terminal's ^C is the gateway's to handle
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._proc, self._sock, self._hello = proc, ours, False
        self.starts += 1

    def _request(self, key: str, env: dict[str, str], ready_w: int, err_w: int) -> bool:
        """Whether the fork server forked the owner (False: refused, exec it).

        Raises: OwnerUnavailable: the fork server failed (it is ended if it broke).
        """
        try:
            cwd = os.getcwd()
        except OSError:  # removed under us: the owner keeps the fork server's, as an exec would
            cwd = ""
        payload = json.dumps({"key": key, "env": env, "cwd": cwd}).encode()
        if len(payload) > MAX_REQUEST:
            return False
        with self._lock:
            if self._stopped:
                return False  # the gateway is stopping
            if self._sock is None:
                if time.monotonic() < self._not_before:
                    raise OwnerUnavailable("not running (restarting after a failure)")
                try:
                    self._start_locked()
                except OSError as exc:
                    self._not_before = time.monotonic() + RESTART_AFTER_S
                    raise OwnerUnavailable(f"cannot start it: {exc}") from exc
            try:
                reply = self._exchange(payload, ready_w, err_w)
            except (OSError, ValueError) as exc:
                hello = self._hello
                code = self._end_locked()
                if not hello and code is not None and code > 0:
                    # It ended by itself before serving (it cannot start): wait a while.
                    self._not_before = time.monotonic() + RESTART_AFTER_S
                raise OwnerUnavailable(f"it failed ({str(exc) or type(exc).__name__})") from exc
        if reply.get("ok"):
            return True
        if reply.get("refused"):
            return False
        raise OwnerUnavailable(f"it refused: {reply.get('error')}")

    def _exchange(self, payload: bytes, ready_w: int, err_w: int) -> dict[str, Any]:
        """One request and its answer (the hello first, once per fork server)."""
        sock = self._sock
        assert sock is not None
        sock.settimeout(REPLY_TIMEOUT_S)
        if not self._hello:
            hello = json.loads(_receive(sock))
            if not isinstance(hello, dict) or not hello.get("hello"):
                raise ValueError(f"a bad hello: {hello!r}")
            self._hello = True
        socket.send_fds(sock, [payload], [ready_w, err_w])
        reply = json.loads(_receive(sock))
        if not isinstance(reply, dict):
            raise ValueError(f"a bad answer: {reply!r}")
        return reply

    def _end_locked(self) -> int | None:
        """Close our end and reap the fork server (our child: its pid cannot be reused
        before we reap it, so ``Popen.kill`` signals no one else); its return code."""
        sock, proc = self._sock, self._proc
        self._sock, self._proc = None, None
        if sock is not None:
            sock.close()
        if proc is None:
            return None
        try:
            return proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self._log(f"owner fork server {proc.pid} did not exit on EOF; killing it")
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_GRACE_S)
            return None


def _receive(sock: socket.socket) -> bytes:
    data = sock.recv(_REPLY_MAX)
    if not data:
        raise ConnectionResetError("the fork server closed its end")
    return data
