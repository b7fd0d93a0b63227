"""Creating (or reopening) a session and making sure its owner serves (``sessions new|ensure``)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

from tether import sessions
from tether.errors import UsageError
from tether.ipc.client import OwnerConnection
from tether.operations.closing import _close_live, _close_offline
from tether.operations.connecting import connect, connect_or_start
from tether.policy import access

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


def ensure_session(
    key: str,
    *,
    name: str,
    argv: list[str],
    label: str,
    cwd: str,
    options: dict[str, Any],
    fresh: bool = False,
    env: dict[str, str] | None = None,
    override: dict[str, Any] | None = None,
    sandboxed: bool = False,
    resume_session: str | None = None,
) -> tuple[OwnerConnection, bool]:
    """Create (or reopen) the session and make sure its owner serves.

    Args:
        resume_session: attach the session to this existing agent-side conversation
            (acpx's ``--resume-session``): its agent resumes it, strictly.
        options: the owner settings of a session created now.
        fresh: close an existing session of that key first (acpx's ``sessions new``).
        override: settings an owner started now must use although the session exists
            (flags given explicitly on this call, as ``connect_or_start``'s ``options``).
        sandboxed: create the session sandboxed: its agent's requests are clamped to its
            own tree (``--sandboxed``). Recorded when the session is created.

    Returns:
        (a connection to the serving owner, whether the session was created). Creating
        a session of one key is serialized: of concurrent calls, one creates it; a
        ``fresh`` call that finds it created after the call began (by a concurrent
        ``fresh`` call) keeps it and answers ``created`` false.

    Raises:
        VisibilityDenied: the requester may not replace or reuse this session, or may
            not spawn a session of this agent (the agent-to-agent policy).
        UsageError: ``sandboxed`` for an open session that is not sandboxed.
        InvalidName: ``name`` holds characters that would forge output
            (:func:`tether.names.check_name`; every door's names come here).
    """
    from tether.names import check_name

    check_name(name)
    with _creating(key, time.time()) as since:
        return _ensure_locked(
            key,
            since=since,
            name=name,
            argv=argv,
            label=label,
            cwd=cwd,
            options=options,
            fresh=fresh,
            env=env,
            override=override,
            sandboxed=sandboxed,
            resume_session=resume_session,
        )


def _ensure_locked(
    key: str,
    *,
    since: float,
    name: str,
    argv: list[str],
    label: str,
    cwd: str,
    options: dict[str, Any],
    fresh: bool,
    env: dict[str, str] | None,
    override: dict[str, Any] | None,
    sandboxed: bool,
    resume_session: str | None,
) -> tuple[OwnerConnection, bool]:
    from tether.state.registry import Registry

    with Registry() as registry:
        existing = registry.session(key)
        if (
            fresh
            and existing is not None
            and existing.state != "closed"
            and existing.created_at >= since
        ):
            # Created by a concurrent call of the same key that held the lock first
            # (while this one started, or waited for it). It is as fresh as ours would
            # be; replacing it would end what that caller was just told it created.
            fresh = False
        reused = existing is not None and existing.state != "closed" and not fresh
        if existing is not None and existing.state != "closed":
            # Reusing (ensure) or replacing (new) a session is driving it.
            access.authorize(key, "close" if fresh else "send", registry=registry)
            if resume_session and not fresh and existing.acp_session_id != resume_session:
                raise UsageError(
                    "the session is open on another conversation; `sessions new"
                    " --resume-session` replaces it"
                )
        requester = access.current_requester(registry)
        if reused and sandboxed and existing is not None and not existing.sandboxed:
            raise UsageError(
                "--sandboxed is recorded when a session is created; this one is open and"
                " not sandboxed (`sessions new --sandboxed` replaces it)",
                session_key=key,
            )
        if not reused:
            access.authorize_spawn(requester, label)
    if fresh:
        conn = connect(key)
        if conn is not None:
            _close_live(conn)  # its owner gone, the new one starts without a busy race
    with Registry() as registry:
        if fresh:
            _close_offline(registry, key, how="replaced by `sessions new`")
        _session, created = registry.upsert_session(
            key=key,
            name=name,
            agent_command=list(argv),
            agent_label=label,
            cwd=cwd,
            options=options,
            # Recorded only when the row is created: the requester owns what it spawns.
            owner=access.spawn_owner(requester, label, sandboxed=sandboxed),
        )
        if resume_session:
            merged = {**_session.options, "resume_session": resume_session}
            registry.update_session(key, acp_session_id=resume_session, options=merged)
    return connect_or_start(key, env=env, options=override), created


LOCK_WAIT_S = 60.0  # for a concurrent creation of the same key (it may close a live owner)
LOCK_POLL_S = 0.02


@contextlib.contextmanager
def _creating(key: str, started: float) -> Iterator[float]:
    """Hold the key's creation lock (a file lock beside the owner's, never the owner's):
    deciding whether to create, replacing and recording happen as one step.

    Yields the time from which a session of the key counts as created concurrently with
    this call: when this call started, or -- if it had to wait -- when the holder it
    waited for took the lock (each holder writes that time into the lock file).
    """
    import fcntl

    from tether.errors import CallTimeout

    fd = os.open(sessions.create_lock_path(key), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    since = started
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                since = min(since, _holder_since(fd))
                if time.monotonic() >= deadline:
                    raise CallTimeout(
                        f"another caller has been creating this session for {LOCK_WAIT_S:.0f} s",
                        phase="create",
                        session_key=key,
                    ) from None
                time.sleep(LOCK_POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, repr(time.time()).encode(), 0)
        yield since
    finally:
        os.close(fd)  # releases the lock


def _holder_since(fd: int) -> float:
    """When the lock's current holder took it (what it wrote; +inf if unreadable)."""
    try:
        return float(os.pread(fd, 64, 0).decode() or "inf")
    except (OSError, ValueError):
        return float("inf")
