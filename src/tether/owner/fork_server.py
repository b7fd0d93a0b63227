"""The fork server process: preload, freeze, then fork one detached owner per request.

Single-threaded by construction (it imports modules and blocks in ``recvmsg``; nothing
here starts a thread or an event loop), so ``fork()`` is safe: the child inherits no
lock held by another thread and no loop. See :mod:`tether.forkserver` for the contract.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import signal
import socket
import sys
import traceback
from typing import Any, NoReturn

from tether._nossl import import_asyncio_without_ssl
from tether.forkserver import MAX_REQUEST

__all__ = ["main"]

#: What an owner imports on its way to serving a turn (its start, the agent's start
#: under supervision, the ACP client, the journal): imported once here, shared by every
#: forked owner. The rest an owner imports later is its own (and small).
PRELOAD = (
    "asyncio",
    "sqlite3",
    "json",
    "tether.state.registry",
    "tether.state.journal.writer",
    "tether.acp.connection",
    "tether.live_agent",
    "tether.supervise.runner",
    "tether.supervise.adoption",
    "tether.supervise.reconcile",  # every owner's start reconciles its session's runs
    "tether.mcp_servers",  # every agent's start: the MCP servers it is given
    "tether.owner.compose",
    "tether.owner.daemon",
)

#: Environment read at import time by the preloaded modules (or by the interpreter at
#: its start): a request that differs from us in one of them is refused, and exec'd.
_IMPORT_TIME_ENV = ("TETHER_LEASE_HEARTBEAT_S", "TETHER_LEASE_TTL_S")


def _import_time_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON") or k in _IMPORT_TIME_ENV}


def main(argv: list[str] | None = None) -> int:
    """``python -m tether.owner.fork_server FD``: serve fork requests on socket FD until EOF."""
    args = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(args[0]))
    # Ours only in /proc/<pid>/environ (and so in every forked owner's, where it is
    # meant): see tether.forkserver. Nothing we run reads it.
    os.environ.pop("TETHER_OWNER_OF", None)
    import_asyncio_without_ssl()  # as an exec'd owner does (tether.owner.__main__)
    for name in PRELOAD:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()  # keep the imported objects out of every later collection's writes
    ours = _import_time_env(dict(os.environ))
    sock.send(json.dumps({"hello": True, "pid": os.getpid()}).encode())
    while True:  # until the gateway's end closes: it stopped, or died
        try:
            message, fds, _flags, _addr = socket.recv_fds(sock, MAX_REQUEST, 2)
        except ConnectionError:
            return 0
        if not message:
            for fd in fds:
                os.close(fd)
            return 0
        reply = _handle(sock, message, fds, ours)
        try:
            sock.send(json.dumps(reply).encode())
        except OSError:
            return 0


def _handle(sock: socket.socket, message: bytes, fds: list[int], ours: dict[str, str]) -> Any:
    """Fork the owner one request asks for; the answer to send back."""
    try:
        request = json.loads(message)
        key, env, cwd = request["key"], request["env"], request["cwd"]
        if not (isinstance(key, str) and isinstance(env, dict) and isinstance(cwd, str)):
            return {"ok": False, "error": "a malformed request"}
        if len(fds) != 2:
            return {"ok": False, "error": f"{len(fds)} fds passed, not 2"}
        if _import_time_env(env) != ours:
            return {"ok": False, "refused": True, "error": "another import-time environment"}
        pid = os.fork()
        if pid == 0:
            _child(sock, key, env, cwd, fds[0], fds[1])
        # The first child exits as soon as it has forked the owner: collect it here.
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            return {"ok": False, "error": f"the detaching child failed: status {status}"}
        return {"ok": True}
    except (ValueError, KeyError, TypeError) as exc:
        return {"ok": False, "error": f"a malformed request: {exc}"}
    except OSError as exc:  # fork: EAGAIN, ENOMEM
        return {"ok": False, "error": f"cannot fork: {exc}"}
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _child(
    sock: socket.socket, key: str, env: dict[str, str], cwd: str, ready_w: int, err_w: int
) -> NoReturn:
    """In the forked child: detach, shed the fork server, run the owner; never returns."""
    code = 1
    try:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)  # the first child: the fork server collects it
        sock.close()
        os.dup2(err_w, 2)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        _close_all_but({0, 1, 2, ready_w})
        os.set_inheritable(ready_w, False)  # received by recvmsg: inheritable until now
        _reset_signals()
        os.environ.clear()
        os.environ.update(env)
        if cwd:
            with contextlib.suppress(OSError):  # gone since: an exec'd owner would not mind
                os.chdir(cwd)
        sys.argv = [sys.argv[0], key]
        from tether.owner.daemon import serve

        code = serve(key, ready_w)
    except BaseException:  # whatever it is, this process must end here, never return
        with contextlib.suppress(BaseException):
            traceback.print_exc()
            sys.stderr.flush()
    finally:
        os._exit(code)


def _close_all_but(keep: set[int]) -> None:
    """Close every fd of this process not in ``keep`` (the fork server's, the gateway's)."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):  # the listing's own fd, already closed
                os.close(fd)


def _reset_signals() -> None:
    """Dispositions and mask as a fresh interpreter has them (an exec'd owner's)."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.set_wakeup_fd(-1)


if __name__ == "__main__":
    sys.exit(main())
