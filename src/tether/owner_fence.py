"""Seeing a silent owner, and replacing it: heartbeat age, identity proof, fencing.

An owner beats (``owner_heartbeat_at``) from a thread no blocking work can starve
(:mod:`tether.owner.heartbeat`). A caller that finds the session's socket held but no
``hello`` coming asks :func:`owner_silence` how long the owner has been silent; once
that exceeds the session's ``unresponsive_after`` (config ``ownerUnresponsiveAfter``,
default 30 s -- far above any legitimate stall), :func:`fence_if_silent` replaces it:

1. verify the owner's identity against what it recorded when it started (pid, start
   time, boot id): a pid reused by another process is never signalled;
2. open a pidfd, verify again (the pidfd pins the process), SIGKILL through it, and wait
   for the process to be gone -- the kernel then releases its session lock, and its
   keeper ends the agent tree as on any owner death;
3. record the takeover: the ``owner_takeover_total`` counter, a log line, and an
   ``owner_takeover`` event in the session's history.

The caller then starts a new owner (generation + 1), which reconciles the dead owner's
leases as on every start. Imported only on the cold path (it reads the registry).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

from tether import _fdwait, _log, _os, owner_lost, sessions
from tether.ipc.peer import peer_pidfd, wait_exit
from tether.state.registry import Registry

__all__ = [
    "DEFAULT_UNRESPONSIVE_AFTER_S",
    "fence_if_silent",
    "owner_silence",
    "peer_pidfd",
    "signal_owner",
    "wait_exit",
]

DEFAULT_UNRESPONSIVE_AFTER_S = 30.0
KILL_WAIT_S = 5.0  # SIGKILL is not refusable; this bounds a wait on a D-state exit


def owner_silence(key: str) -> dict[str, Any] | None:
    """The session's owner as the registry knows it, with its heartbeat age; None if
    no owner is recorded as running."""
    with Registry() as registry:
        return _silence(registry, key)


def _silence(registry: Registry, key: str) -> dict[str, Any] | None:
    session = registry.session(key)
    if session is None or session.owner_pid is None:
        return None
    beat = session.owner_heartbeat_at
    if beat is not None:
        # The owner also beats on its lock file's mtime, which needs no disk space: an
        # owner whose database writes fail (a full disk) is waiting, not silent.
        with contextlib.suppress(OSError):
            beat = max(beat, os.stat(sessions.lock_path(key)).st_mtime)
    after = session.options.get("unresponsive_after")
    return {
        "ownerPid": session.owner_pid,
        "ownerGeneration": session.owner_generation,
        "heartbeatAgeS": round(max(0.0, time.time() - beat), 3) if beat is not None else None,
        "unresponsiveAfterS": float(after) if after else DEFAULT_UNRESPONSIVE_AFTER_S,
    }


def fence_if_silent(key: str) -> bool:
    """Fence the session's owner if it has been silent too long; True if we did.

    Never signals a process whose identity does not match the owner's record.
    """
    with Registry() as registry:
        info = _silence(registry, key)
        if info is None or info["heartbeatAgeS"] is None:
            return False
        if info["heartbeatAgeS"] < info["unresponsiveAfterS"]:
            return False
        ident = registry.owner_identity(key)
        if ident is None or ident["pid"] != info["ownerPid"]:
            return False  # an owner from before boot ids were recorded: cannot prove it
        if ident["generation"] != info["ownerGeneration"]:
            return False
        if not _kill_verified(ident["pid"], ident["starttime"], ident["boot_id"]):
            return False
        # A session host's owners share its process (tether.sessionhost): each of its
        # sessions lost its owner with it, and each is told so, here and now.
        keys = registry.sessions_owned_by(ident["pid"], ident["starttime"], ident["boot_id"])
        payload = {
            "ownerPid": ident["pid"],
            "heartbeatAgeS": info["heartbeatAgeS"],
            "unresponsiveAfterS": info["unresponsiveAfterS"],
            "by": os.getpid(),
        }
        for each in [key] + [k for k in keys if k != key and _ran_in(registry, k, ident)]:
            _record_takeover(registry, each, payload)
    _log.event("owner_takeover", session_key=key, ownerGeneration=ident["generation"], **payload)
    return True


def _ran_in(registry: Registry, key: str, ident: dict[str, Any]) -> bool:
    """Whether session ``key``'s owner was still running in the fenced process (one that
    ended there earlier recorded its stop: no pid)."""
    session = registry.session(key)
    return session is not None and session.owner_pid == ident["pid"]


def _record_takeover(registry: Registry, key: str, payload: dict[str, Any]) -> None:
    """Session ``key``'s owner was fenced: say so in its history, and end its turn
    ``owner-lost`` (its lock went with the owner: while no new owner holds it, we are
    the journal's writer)."""
    ident = registry.owner_identity(key)
    payload = {**payload, "ownerGeneration": ident["generation"] if ident else None}
    registry.incr("owner_takeover_total")
    registry.add_event(key, "owner_takeover", payload)
    lock_fd = sessions.try_lock(key)
    if lock_fd is not None:
        try:
            registry.journal_append(key, "owner_takeover", payload)
            owner_lost.correct_offline(registry, key)  # its turn ends owner-lost
        finally:
            os.close(lock_fd)


def _kill_verified(pid: int, starttime: int | None, boot_id: str) -> bool:
    """SIGKILL ``pid`` through a pidfd if it is provably the recorded owner; wait for it."""
    fd = signal_owner(pid, starttime, boot_id, signal.SIGKILL)
    if fd is None:
        return False
    try:
        # A pidfd is readable once the process has exited (zombie or reaped alike).
        _fdwait.readable(fd, KILL_WAIT_S)
    finally:
        _os.current().close_fd(fd)
    return True


def signal_owner(pid: int, starttime: int | None, boot_id: str, sig: int) -> int | None:
    """Signal ``pid`` through a pidfd if it is provably the process recorded (an owner,
    or a fleet host: boot id and start time checked before and after the pidfd pins it);
    returns that pidfd, to wait on and close, or None when nothing was proven (and
    nothing was signalled)."""
    table = _os.current()
    if starttime is None or table.boot_id() != boot_id:
        return None

    def same() -> bool:
        st = table.stat(pid)
        return st is not None and st.starttime == starttime and not st.is_zombie

    if not same():
        return None
    try:
        fd = table.pidfd_open(pid)
    except OSError:
        return None
    try:
        if not same():  # the pidfd pins it now: is it still the one we verified?
            table.close_fd(fd)
            return None
        table.pidfd_send_signal(fd, sig)
    except BaseException:
        table.close_fd(fd)
        raise
    return fd
