"""``python -m tether.owner.host FD PER_HOST``: a session host, several owners on one loop.

See :mod:`tether.sessionhost` for why and for the contract. Here: the process's setup
(subreaper of last resort, one malloc arena, its log), the request channel read on the
event loop, one task per hosted owner (:func:`tether.owner.daemon.run_owner`, the same
start and teardown as an owner of its own process), signals that stop every owner, and
the end: once the last owner has ended and no more can come.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from tether import sessionhost

if TYPE_CHECKING:
    import asyncio

    from tether.owner.compose import Owner
    from tether.owner.host_logs import SessionLogs

__all__ = ["SessionHost", "main"]

logger = logging.getLogger("tether.owner")


class SessionHost:
    """The host's loop-side state: its channel, its owners, when it ends."""

    def __init__(
        self,
        sock: socket.socket,
        per_host: int,
        env: dict[str, str],
        logs: SessionLogs | None = None,
    ) -> None:
        import asyncio

        from tether.owner.hosting import Shared

        self.logs = logs
        self.shared = Shared()  # one memory trim and state watch for all our owners
        self.sock: socket.socket | None = sock
        self.per_host = per_host
        self.env_id = sessionhost.environment_id(env)
        self.tasks: dict[asyncio.Task[int], str] = {}  # one per hosted owner: its key
        self.owners: dict[str, Owner] = {}  # those started, by session key
        self.stopping: str | None = None  # a signal's name: every owner was told to stop
        self.taken = 0  # owners started here, ever
        self.ended = asyncio.Event()
        sock.setblocking(False)

    # --- the channel ----------------------------------------------------------------

    def open(self) -> None:
        """Say hello and start reading requests on the running loop."""
        import asyncio

        assert self.sock is not None
        self.sock.send(json.dumps({"hello": True, "pid": os.getpid()}).encode())
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._on_request)

    def _on_request(self) -> None:
        sock = self.sock
        if sock is None:
            return
        try:
            message, fds, _flags, _addr = socket.recv_fds(sock, sessionhost.MAX_REQUEST, 2)
        except BlockingIOError:
            return
        except OSError:
            message, fds = b"", []
        if not message:  # the launcher let go of us (it stopped, or died): no more starts
            for fd in fds:
                os.close(fd)
            self.let_go()
            return
        reply = self._take(message, fds)
        with contextlib.suppress(OSError):  # a launcher gone since: it execs that owner
            sock.send(json.dumps(reply).encode())

    def let_go(self) -> None:
        """Take no more sessions; end once the hosted ones have."""
        import asyncio

        sock, self.sock = self.sock, None
        if sock is not None:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
        self._end_if_empty()

    def _take(self, message: bytes, fds: list[int]) -> dict[str, Any]:
        """Start the owner one request asks for (it says its readiness on the caller's
        pipe); the answer to send back."""
        try:
            request = json.loads(message)
            key, env = request["key"], request["env"]
            if not (isinstance(key, str) and isinstance(env, dict)) or len(fds) != 2:
                return {"ok": False, "error": "a malformed request"}
            if self.stopping is not None:
                return {"ok": False, "retiring": True}
            if sessionhost.environment_id(env) != self.env_id:
                return {"ok": False, "refused": True, "error": "another environment"}
            if len(self.tasks) >= self.per_host:
                return {"ok": False, "full": True, "sessions": len(self.tasks)}
            self._start(key, fds[0])
            return {"ok": True, "sessions": len(self.tasks)}
        except (ValueError, KeyError, TypeError) as exc:
            return {"ok": False, "error": f"a malformed request: {exc}"}
        except OSError as exc:  # out of descriptors, say: as good as full
            return {"ok": False, "full": True, "error": str(exc)}
        finally:
            for fd in fds:  # ours are dup'd where kept: the request's copies go
                with contextlib.suppress(OSError):
                    os.close(fd)

    # --- the owners -----------------------------------------------------------------

    def _start(self, key: str, ready_fd: int) -> None:
        from tether import _aio
        from tether.owner.daemon import run_owner, say_readiness

        ready_w = os.dup(ready_fd)
        os.set_inheritable(ready_w, False)

        def ready(message: dict[str, Any]) -> None:
            nonlocal ready_w
            if ready_w >= 0:
                say_readiness(ready_w, message)
                ready_w = -1

        def started(owner: Owner) -> None:
            self.owners[key] = owner
            if self.stopping is not None:  # a signal came while it was starting
                _stop(owner, self.stopping)

        async def hosted() -> int:
            try:
                return await run_owner(key, ready, host=self.shared, started=started)
            except BaseException as exc:  # the caller reads why, as an exec'd owner's stderr
                ready({"ready": False, "error": f"the session's owner failed to start: {exc}"})
                raise
            finally:
                ready({"ready": False, "error": "owner exited"})

        task = _aio.spawn(hosted(), name=f"owner {key[:12]}")  # held in self.tasks
        self.tasks[task] = key
        self.taken += 1
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[int]) -> None:
        key = self.tasks.pop(task)
        owner = self.owners.pop(key, None)
        if not task.cancelled() and task.exception() is not None:
            logger.error("owner of %s failed", key, exc_info=task.exception())
            if owner is not None:
                _let_go_of(owner)
        if self.logs is not None and key not in self.tasks.values():
            self.logs.forget(key)
        self._end_if_empty()

    def stop_all(self, reason: str) -> None:
        """A signal: every owner stops (its session stays, resumable); no more starts."""
        if self.stopping is None:
            self.stopping = reason
        for owner in list(self.owners.values()):
            _stop(owner, reason)
        self.let_go()

    def _end_if_empty(self) -> None:
        """A host whose owners have all ended leaves (the launcher starts another when
        it needs one): never an idle process of ours that no session needs."""
        if self.tasks or (self.sock is not None and self.taken == 0):
            return
        if self.sock is not None:
            self.let_go()  # a start on its way finds our end closed: it goes elsewhere
        self.ended.set()


def _stop(owner: Owner, reason: str) -> None:
    from tether.owner.lifecycle import StopReason

    owner.request_shutdown(StopReason(reason))


def _let_go_of(owner: Owner) -> None:
    """An owner whose teardown failed: whatever it still holds goes as on its process's
    death -- its keeper's channel (EOF: the keeper ends the agent's tree), its socket
    and lock, its threads."""
    owner.memory.cancel()
    live = owner.slot.live
    if live is not None:
        live.proc.abandon()
    with contextlib.suppress(Exception):
        owner.heartbeat.stop()
    if owner.state_watch is not None:
        with contextlib.suppress(Exception):
            owner.state_watch.stop()
    with contextlib.suppress(OSError):
        owner.lock.release()


async def _amain(host: SessionHost) -> int:
    import asyncio
    import signal

    from tether import metrics

    metrics.attach(metrics.Deferred())  # written by the owners' status writers
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, host.stop_all, f"signal-{signal.Signals(sig).name}")
    host.open()
    await host.ended.wait()
    return 0


#: Descriptors a hosted session holds (measured: ~15 -- its agent's pipes, keeper
#: channel and pidfd, socket, journal and registry connections -- plus its callers'
#: connections), and the host's own.
FDS_PER_SESSION = 24
FDS_BASE = 128


def _room_for(per_host: int) -> int:
    """Raise our soft limit on open files to what ``per_host`` sessions need (a default
    soft limit of 1,024 holds about forty), up to the hard limit; the sessions the
    limit then holds (a start past them is answered ``full``, and goes elsewhere)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = FDS_BASE + FDS_PER_SESSION * per_host
    if soft != resource.RLIM_INFINITY and soft < want:
        raised = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if raised > soft:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return per_host
    return max(1, min(per_host, (soft - FDS_BASE) // FDS_PER_SESSION))


def main(argv: list[str] | None = None) -> int:
    """``python -m tether.owner.host FD PER_HOST``: host owners until none is left."""
    from tether._nossl import import_asyncio_without_ssl

    import_asyncio_without_ssl()  # as an exec'd owner does (tether.owner.__main__)
    args = sys.argv[1:] if argv is None else argv
    # Detach: a second fork makes us nobody's child but init's (or a subreaper's), as
    # an owner is. Safe here: no loop, no threads yet.
    if os.fork() != 0:
        os._exit(0)
    sock = socket.socket(fileno=int(args[0]))
    per_host = _room_for(max(1, int(args[1])))
    env = dict(os.environ)
    # Ours only in /proc/<pid>/environ (the requester hint: tether.policy.access);
    # the keepers and agents we start need not inherit it.
    os.environ.pop("TETHER_OWNER_OF", None)
    from tether import _memory
    from tether.owner.daemon import exit_process
    from tether.owner.host_logs import route_logs
    from tether.supervise.adoption import become_last_resort

    become_last_resort()  # what a killed keeper leaves comes to us (tether.supervise.adoption)
    _memory.one_arena()  # before any thread of ours starts
    logs = route_logs()
    import asyncio

    code = 1
    try:
        code = asyncio.run(_amain(SessionHost(sock, per_host, env, logs)))
    except BaseException:
        logger.exception("session host failed")
    return exit_process(code)


if __name__ == "__main__":
    sys.exit(main())
