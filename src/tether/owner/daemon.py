"""``python -m tether.owner KEY READY_FD``: detach, take the session, say ready, serve.

The starter (:func:`tether.owner_launch.spawn_owner_daemon`) runs us as a fresh
interpreter in a new session and waits for one readiness line on ``READY_FD``. We fork
once more so that we are nobody's child but init's (or a subreaper's): a long-lived
library process that started us never collects our zombie. Then:

* no open session for KEY: ``{"ready": false, "noSession": true}``, exit 4;
* another owner holds the session's lock: ``{"ready": false, "busy": true}``, exit 0;
* the start failed: ``{"ready": false, "error": ...}``;
* else ``{"ready": true, "generation": G, "socket": PATH, "pid": P}``, and we serve.

The line is said once; then the starter's pipes are let go and stderr moves to the
owner's log file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from tether import _log, metrics, sessions
from tether.errors import TetherError, UsageError
from tether.owner.compose import Owner
from tether.owner.lifecycle import StopReason
from tether.state.registry import Registry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.owner.hosting import Shared

__all__ = ["main"]

logger = logging.getLogger("tether.owner")

Ready = Callable[[dict[str, Any]], None]


async def _amain(key: str, ready: Ready) -> int:
    # The owner's metrics are written by its status writer (owner.heartbeat), with its
    # status, never one transaction per change on the event loop.
    metrics.attach(metrics.Deferred())
    return await run_owner(key, ready)


async def run_owner(
    key: str,
    ready: Ready,
    *,
    host: Shared | None = None,
    started: Callable[[Owner], None] | None = None,
) -> int:
    """Take session ``key``, say readiness through ``ready`` once, serve until the owner
    ends; the exit code. The one start of an owner, in its own process (:func:`serve`)
    or one of several in a session host's (``host``: what its owners share; ``started``
    is told of each).

    Raises what ended the owner abnormally, after its shutdown ran (the tree ended).
    """
    try:
        registry = Registry()
    except TetherError as exc:  # a damaged, full or foreign state directory: say which
        ready({"ready": False, "error": str(exc), "errorWire": exc.to_wire()})
        return 1
    kept = metrics.kept()
    try:
        try:
            owner = Owner(key, registry, host=host)
        except UsageError as exc:
            ready({"ready": False, "noSession": True, "error": str(exc)})
            return 4
        if not owner.lock.acquire():
            ready({"ready": False, "busy": True})
            return 0
        if started is not None:
            started(owner)
        try:
            await owner.start()
        except BaseException as exc:
            metrics.incr("owner_spawn_failure_total")
            owner.heartbeat.stop()
            _write_kept(registry, kept)
            wire = exc.to_wire() if isinstance(exc, TetherError) else None
            ready({"ready": False, "error": f"owner start failed: {exc}", "errorWire": wire})
            raise
        ready(
            {
                "ready": True,
                "generation": owner.generation,
                "socket": owner.lock.socket_path,
                "pid": os.getpid(),
            }
        )
        try:
            await owner.run()
        except BaseException:
            logger.exception("owner loop failed")
            if not owner.stopping:
                owner.request_shutdown(StopReason.FATAL_ERROR)
            await owner.shutdown()
            raise
        finally:
            _write_kept(registry, kept)  # anything counted after the teardown's last write
    finally:
        registry.close()
    return 0


def _write_kept(registry: Registry, kept: metrics.Deferred | None) -> None:
    ops = kept.take() if kept is not None else None
    if ops:
        with contextlib.suppress(Exception):  # a metrics failure never breaks a lifecycle path
            registry.record_metrics(ops)


def main(argv: list[str] | None = None) -> int:
    """``python -m tether.owner KEY READY_FD``: run the owner of session KEY."""
    args = sys.argv[1:] if argv is None else argv
    key = args[0]
    ready_fd = int(args[1]) if len(args) > 1 else 1
    # Detach: a second fork makes us nobody's child but init's (or a subreaper's). Safe
    # here: no loop, no threads yet.
    if os.fork() != 0:
        os._exit(0)
    return serve(key, ready_fd)


def serve(key: str, ready_fd: int) -> NoReturn:
    """Run the owner of session ``key`` in this detached process; never returns.

    ``ready_fd``: the readiness pipe's write end. The owner fork server
    (:mod:`tether.forkserver`) calls this in a process it forked and detached.
    """
    # The subreaper of last resort for our runs: what a killed keeper leaves is re-parented
    # to us, and ended (tether.supervise.adoption). Not inherited across fork: set it here.
    from tether.supervise.adoption import become_last_resort

    become_last_resort()
    from tether import _memory

    _memory.one_arena()  # before any thread of ours starts
    # Our environment as exec'd still names us (/proc/PID/environ: the requester hint, see
    # tether.policy.access); our children -- keepers, agents -- need not inherit it.
    os.environ.pop("TETHER_OWNER_OF", None)
    log_fd = os.open(
        sessions.log_path(key), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
    )
    _log.configure(os.fdopen(os.dup(log_fd), "w", buffering=1), level=logging.INFO)

    def ready(message: dict[str, Any]) -> None:
        # Say it once, then let go of the starter's pipes: stderr moves to our log.
        nonlocal ready_fd
        if ready_fd < 0:
            return
        say_readiness(ready_fd, message)
        ready_fd = -1
        os.dup2(log_fd, 2)

    from tether import _profile

    dump_profile = _profile.start("owner")  # bench/turn_cpu.py --profile only
    try:
        code = asyncio.run(_amain(key, ready))
    finally:
        dump_profile()
        ready({"ready": False, "error": "owner exited"})
    exit_process(code)


def say_readiness(fd: int, message: dict[str, Any]) -> None:
    """Say the one readiness line on the starter's pipe ``fd``, and close it."""
    import json

    with contextlib.suppress(OSError):  # the starter gave up waiting: nobody to tell
        os.write(fd, (json.dumps(message) + "\n").encode())
    with contextlib.suppress(OSError):
        os.close(fd)


def exit_process(code: int) -> NoReturn:
    """End an owner's (or a session host's) process once its owners have ended."""
    from tether.state.registry import state_lost

    if state_lost() is not None:
        # Its connections to the lost database are kept open (tether.state.registry.
        # keep_if_lost): end without closing them, so no final checkpoint writes old
        # pages into whatever file is at the path now.
        logging.shutdown()
        os._exit(code)
    # Everything the owner wrote is written: its journal writer, heartbeat and lock were
    # closed by its teardown. What is left is the interpreter's own teardown (every
    # module's objects freed one by one, ~10 ms for an owner's ~250 modules), which a
    # closer waiting for this process to be gone would pay for nothing. Wait for any
    # thread still finishing its work, as a normal exit would, then leave.
    _join_threads()
    logging.shutdown()
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _join_threads() -> None:
    """What ``threading._shutdown`` does at a normal exit: wait for every live
    non-daemon thread (none should be left; a stuck one is waited for as before)."""
    import threading

    me = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not me and not thread.daemon:
            thread.join()
