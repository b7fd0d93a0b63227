"""The launcher's handle on its session hosts: place each owner start, start hosts, let go.

:meth:`HostPool.launch` is a :data:`tether.owner_launch.Launcher` (the gateway installs
it with ``serve --session-hosts N``). Each start goes to the first host of its
environment with room (first fit: hosts fill up, and a host whose sessions have all
ended leaves); when none has room a new host is started. Requests come from the
gateway's worker threads; one lock serialises them (one datagram each way).

A host is never signalled from here. One that fails (dead, silent past
:data:`~tether.sessionhost.REPLY_TIMEOUT_S`, a bad answer) is let go of -- our end of
its channel closed, so it takes no more sessions and ends once its own have -- and
that one start is exec'd (:func:`tether.owner_launch.exec_owner`), logged. A silent
host's sessions are the fence's to judge, by their heartbeats (:mod:`tether.owner_fence`).
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tether import paths
from tether.errors import OwnerUnavailable
from tether.owner_launch import or_exec
from tether.sessionhost import MAX_REQUEST, OWNER_MARKER, REPLY_TIMEOUT_S, environment_id

__all__ = ["HostPool"]

logger = logging.getLogger("tether.sessionhost")

_REPLY_MAX = 64 * 1024
RESTART_AFTER_S = 1.0  # a host failing at start is not retried on every request


@dataclass
class _Host:
    sock: socket.socket  # our end of its channel: the host is gone when it reads EOF
    env_id: tuple[tuple[str, str], ...]
    pid: int | None = None  # as its hello said
    sessions: int = 0  # as it last said

    @property
    def hello(self) -> bool:
        return self.pid is not None

    def ended(self) -> bool:
        """Whether the host closed its end (it left, or died), without waiting."""
        try:
            self.sock.setblocking(False)  # (an exchange sets its own timeout again)
            return self.sock.recv(1, socket.MSG_PEEK) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True


class HostPool:
    """Session hosts of up to ``per_host`` owners each; see the module docstring."""

    def __init__(self, per_host: int, log: Callable[[str], None] | None = None) -> None:
        self.per_host = max(1, per_host)
        self._log = log or logger.warning
        self._lock = threading.Lock()
        self._hosts: list[_Host] = []
        self._not_before = 0.0
        self._stopped = False
        self.starts = 0  # hosts started
        self.placed = 0  # owners started in a host
        self.fallbacks = 0  # owners exec'd because a host failed

    def launch(self, key: str, env: dict[str, str], ready_w: int, err_w: int) -> int | None:
        """Start the owner of ``key`` in a host; exec it if that fails.

        Returns: None (a host serves it), or the exec'd child's pid.
        Raises: OwnerUnavailable: the exec failed too.
        """
        return or_exec(
            lambda: self._place(key, env, ready_w, err_w), self._failed, key, env, ready_w, err_w
        )

    def _failed(self, exc: OwnerUnavailable) -> None:
        with self._lock:
            self.fallbacks += 1
        self._log(f"session host: {exc}; starting this owner by exec")

    def status(self) -> dict[str, Any]:
        """For ``/v1/health``: the hosts (pid, sessions as last said) and counts."""
        with self._lock:
            self._prune_locked()
            hosts = [{"pid": h.pid, "sessions": h.sessions} for h in self._hosts]
        return {
            "perHost": self.per_host,
            "hosts": hosts,
            "starts": self.starts,
            "placed": self.placed,
            "fallbacks": self.fallbacks,
        }

    def stop(self) -> None:
        """Offer no host more work: each ends once its sessions have (they outlive us,
        as every owner outlives the gateway). Idempotent; nothing is signalled."""
        locked = self._lock.acquire(timeout=REPLY_TIMEOUT_S + 1.0)
        try:
            self._stopped = True
            for host in list(self._hosts):
                self._let_go_locked(host)
        finally:
            if locked:
                self._lock.release()

    # --- placing --------------------------------------------------------------------

    def _place(self, key: str, env: dict[str, str], ready_w: int, err_w: int) -> bool:
        """Whether a host took the start (False: exec it).

        Raises: OwnerUnavailable: a host failed, or none could be started.
        """
        payload = json.dumps({"key": key, "env": env}).encode()
        if len(payload) > MAX_REQUEST:
            return False
        wanted = environment_id(env)
        with self._lock:
            if self._stopped:
                return False
            self._prune_locked()
            for host in [h for h in self._hosts if h.env_id == wanted]:
                if self._offer_locked(host, payload, ready_w, err_w):
                    return True
            if time.monotonic() < self._not_before:
                raise OwnerUnavailable("no host (restarting after a failure)")
            host = self._start_locked(env, wanted)
            if self._offer_locked(host, payload, ready_w, err_w):
                return True
            raise OwnerUnavailable("a new host did not take the start")

    def _offer_locked(self, host: _Host, payload: bytes, ready_w: int, err_w: int) -> bool:
        """Whether ``host`` took the start; a host that failed is let go of, one that is
        full or retiring passed over."""
        try:
            reply = self._exchange(host, payload, ready_w, err_w)
        except ConnectionError as exc:
            self._let_go_locked(host)
            if not host.hello:  # it ended before serving (it cannot start): say so, wait
                self._not_before = time.monotonic() + RESTART_AFTER_S
                self._log(f"a session host ended at its start: {exc}")
            return False  # else it left (its sessions all ended), as it should: quietly
        except (OSError, ValueError) as exc:
            if not host.hello:
                self._not_before = time.monotonic() + RESTART_AFTER_S
            self._let_go_locked(host)
            self._log(f"session host {host.pid}: {str(exc) or type(exc).__name__}")
            return False
        if reply.get("ok"):
            host.sessions = int(reply.get("sessions") or 0)
            self.placed += 1
            return True
        if reply.get("full"):
            host.sessions = self.per_host
        else:  # retiring (a signal ended it), refused, or an error: no more of ours
            self._let_go_locked(host)
        return False

    def _start_locked(self, env: dict[str, str], env_id: tuple[tuple[str, str], ...]) -> _Host:
        """Start a host: it detaches at once (a fork; the first process exits and is
        collected here), so it is nobody's child but init's or a subreaper's, as an
        owner is, and outlives us with its sessions."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        host_env = {**env, "TETHER_HOME": paths.home(), "TETHER_OWNER_OF": OWNER_MARKER}
        argv = [sys.executable, "-P", "-m", "tether.owner.host"]
        try:
            proc = subprocess.Popen(
                [*argv, str(theirs.fileno()), str(self.per_host)],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # never the gateway's stdout (its announcement)
                env=host_env,
                cwd="/",  # a host serves sessions of every directory; holds none
                start_new_session=True,  # a terminal's ^C is the gateway's to handle
            )
        except OSError as exc:
            ours.close()
            self._not_before = time.monotonic() + RESTART_AFTER_S
            raise OwnerUnavailable(f"cannot start a session host: {exc}") from exc
        finally:
            theirs.close()
        try:
            proc.wait(timeout=REPLY_TIMEOUT_S)  # the detaching process: it exits at once
        except subprocess.TimeoutExpired:
            ours.close()
            proc.kill()  # our own child, unreaped: its pid is still ours
            proc.wait()
            self._not_before = time.monotonic() + RESTART_AFTER_S
            raise OwnerUnavailable("a session host did not detach") from None
        host = _Host(ours, env_id)
        self._hosts.append(host)
        self.starts += 1
        return host

    @staticmethod
    def _exchange(host: _Host, payload: bytes, ready_w: int, err_w: int) -> dict[str, Any]:
        """One request and its answer (the hello first, once per host)."""
        sock = host.sock
        sock.settimeout(REPLY_TIMEOUT_S)
        if not host.hello:
            hello = json.loads(_receive(sock))
            if not isinstance(hello, dict) or not hello.get("hello"):
                raise ValueError(f"a bad hello: {hello!r}")
            host.pid = int(hello["pid"])
        socket.send_fds(sock, [payload], [ready_w, err_w])
        reply = json.loads(_receive(sock))
        if not isinstance(reply, dict):
            raise ValueError(f"a bad answer: {reply!r}")
        return reply

    def _let_go_locked(self, host: _Host) -> None:
        """Offer ``host`` nothing more: it ends once its sessions have."""
        if host in self._hosts:
            self._hosts.remove(host)
        host.sock.close()

    def _prune_locked(self) -> None:
        """Forget hosts that left (their sessions all ended) or died."""
        for host in [h for h in self._hosts if h.ended()]:
            self._let_go_locked(host)


def _receive(sock: socket.socket) -> bytes:
    data = sock.recv(_REPLY_MAX)
    if not data:
        raise ConnectionResetError("the session host closed its end")
    return data
