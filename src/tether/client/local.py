"""The local backend: this machine's owners, through the operations layer and IPC v2.

A turn talks IPC v2 to the session's owner daemon, exactly as ``tether prompt`` does;
the owner is started on demand by the same launcher, under the same registry. Blocking
operations (:mod:`tether.operations`) run in a thread, in the client's home.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from tether import _aio, agents, operations, paths, sessions
from tether.client.backend import SessionRef, session_summary
from tether.client.watch import watch_journal
from tether.events import (
    Answerer,
    Event,
    SessionEnded,
    TurnEnded,
    event_from_frame,
    question_from_frame,
)
from tether.ipc.aio_client import AsyncOwnerConnection

__all__ = ["LocalBackend"]

R = TypeVar("R")


class LocalBackend:
    """Sessions of one ``TETHER_HOME`` on this machine (see :class:`tether.Client`)."""

    def __init__(
        self,
        home: str | None,
        *,
        permissions: str | None,
        env: dict[str, str],
        ttl: float | None,
        options: dict[str, Any],
    ) -> None:
        self.home = home
        self.permissions = permissions
        self.env = env
        self.ttl = ttl
        self.options = options

    async def aclose(self) -> None:
        return None

    def with_home(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        token = paths.use_home(self.home)
        try:
            return fn(*args, **kwargs)
        finally:
            paths.reset_home(token)

    async def op(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Run one blocking operation (:mod:`tether.operations`) in a thread, in our home."""
        return await asyncio.to_thread(self.with_home, fn, *args, **kwargs)

    async def connect_or_start(
        self, key: str, deadline: float | None = None
    ) -> AsyncOwnerConnection:
        """:func:`tether.operations.connect_or_start`, then the socket into asyncio."""
        conn = await self.op(operations.connect_or_start, key, env=self.env, deadline=deadline)
        try:
            return await AsyncOwnerConnection.adopt(conn)
        except BaseException:
            conn.close()
            raise

    # --- sessions ---------------------------------------------------------------------

    async def ensure_session(
        self,
        agent: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None,
        name: str,
        fresh: bool,
        resume_session: str | None,
    ) -> SessionRef:
        cwd_path, argv, label, scope = _agent_of(agent, cwd)
        key = sessions.session_key(scope, cwd_path, name)
        flags = {"permission_mode": self.permissions, "idle_ttl": self.ttl, **self.options}
        options = await self.op(_owner_settings, cwd_path, flags)
        conn, _created = await self.op(
            operations.ensure_session,
            key,
            name=name,
            argv=argv,
            label=label,
            cwd=cwd_path,
            options=options,
            fresh=fresh,
            env=self.env,
            resume_session=resume_session,
        )
        if resume_session:
            await self.op(operations.resume_agent_session, key, conn)
        else:
            conn.close()
        return SessionRef(key, name, label, cwd_path, scope)

    async def fork(self, parent: SessionRef, name: str) -> SessionRef:
        key = sessions.session_key(parent.scope, parent.cwd, name)
        await self.op(operations.fork_session, parent.key, key, name=name, env=self.env or None)
        return SessionRef(key, name, parent.agent, parent.cwd, parent.scope)

    async def sessions(self) -> list[dict[str, Any]]:
        items = await self.op(operations.list_sessions)
        return [session_summary(item) for item in items]

    async def agent_sessions(
        self,
        agent: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None,
        cursor: str | None,
        any_cwd: bool,
    ) -> dict[str, Any]:
        cwd_path, argv, _label, _scope = _agent_of(agent, cwd)
        env = {**os.environ, **self.env} if self.env else None
        return await self.op(
            operations.agent_sessions, argv, cwd_path, cursor=cursor, any_cwd=any_cwd, env=env
        )

    async def logout(
        self, agent: str | Sequence[str], *, cwd: str | os.PathLike[str] | None
    ) -> None:
        cwd_path, argv, _label, _scope = _agent_of(agent, cwd)
        env = {**os.environ, **self.env} if self.env else None
        await self.op(operations.logout, argv, cwd_path, env=env)

    # --- one session ------------------------------------------------------------------

    async def turn(
        self,
        session: SessionRef,
        blocks: list[dict[str, Any]],
        *,
        deadline: float | None,
        control: bool,
        answerer: Answerer,
    ) -> AsyncGenerator[Event, None]:
        key = session.key
        conn = await self.connect_or_start(key, deadline)
        deadline_ms = (
            None if deadline is None else max(1, int((deadline - time.monotonic()) * 1000))
        )
        payload = operations.prompt_payload(
            blocks, client="library", control=control, permission_mode=self.permissions
        )
        try:
            turn = await operations.asubmit(
                conn, key, payload, deadline_ms=deadline_ms, run=self.op
            )
        except BaseException:
            await _aio.cleanup(conn.aclose(), what="close")
            raise
        try:
            async for frame in turn.frames():
                event = _event(frame, answerer)
                if event is not None:
                    yield event
        finally:
            # The consumer left early (cancelled, or broke out of the loop): the
            # caller-leaves rule cancels the turn, never leaves it running for nobody.
            await turn.aclose()

    async def answer(
        self, key: str, interaction_id: str, answer: str, content: dict[str, Any] | None
    ) -> dict[str, Any]:
        return await self.op(operations.answer, key, interaction_id, answer, content=content)

    async def cancel(self, key: str) -> dict[str, Any]:
        return await self.op(operations.cancel, key)

    async def control(self, key: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return await self.op(operations.control, key, kind, payload, env=self.env)

    async def status(self, key: str) -> dict[str, Any]:
        return await self.op(operations.status, key)

    async def close(self, key: str, *, discard: bool) -> dict[str, Any]:
        return await self.op(operations.close_session, key, discard=discard)

    async def terminate(self, key: str) -> dict[str, Any]:
        return await self.op(operations.terminate, key, by={"door": "library"})

    async def history(self, key: str, limit: int | None) -> list[dict[str, Any]]:
        return await self.op(operations.history, key, limit=limit)

    async def transcript(self, key: str, tail: int | None) -> list[dict[str, Any]]:
        return await self.op(operations.transcript, key, tail=tail)

    def watch(
        self, key: str, *, from_seq: int | None, tail: int | None, follow: bool
    ) -> AsyncIterator[Event]:
        return watch_journal(self.home, key, from_seq=from_seq, tail=tail, follow=follow)


def _event(frame: dict[str, Any], answerer: Answerer) -> Event | None:
    """The library's event for one frame of a turn (None: none for it)."""
    kind = frame.get("type")
    if kind == "update":
        acp = frame.get("frame")
        if frame.get("direction") == "in" and isinstance(acp, dict):
            return event_from_frame(acp)
    elif kind in ("interaction", "interaction_resolved"):
        return question_from_frame(frame, answerer)
    elif kind == "session_ended":
        ev = frame.get("event") or {}
        return SessionEnded(
            raw=frame,
            reason=str(ev.get("reason", "")),
            terminated_by=str(ev.get("terminatedBy", "")),
            message=str(ev.get("message", "")),
            exit_code=ev.get("exitCode"),
        )
    elif kind == "result":
        result = frame.get("result") or {}
        return TurnEnded(
            raw=frame,
            stop_reason=str(result.get("stopReason", "")),
            permission_denied=int(result.get("permissionDenied") or 0),
        )
    return None


def _owner_settings(cwd: str, flags: dict[str, Any]) -> dict[str, Any]:
    """The owner settings of a session this client creates in ``cwd``: the configuration
    (of this client's home and ``cwd``) and the client's own, through the table every
    door uses (:func:`tether.operations.settings`). Config warnings go to the log."""
    from tether import config

    cfg = config.load(cwd, warn=logging.getLogger("tether.client").warning)
    return operations.settings(cfg, flags)


def _agent_of(
    agent: str | Sequence[str], cwd: str | os.PathLike[str] | None
) -> tuple[str, list[str], str, str]:
    """(real cwd, argv, label, scope) of an agent name or argv, as sessions key them."""
    cwd_path = os.path.realpath(os.fspath(cwd) if cwd is not None else os.getcwd())
    if isinstance(agent, str):
        argv = agents.resolve(agent, {})
        return (
            cwd_path,
            argv,
            agent,
            sessions.agent_scope(agent, argv, named=agents.is_agent_name(agent)),
        )
    argv = [str(a) for a in agent]
    label = " ".join(argv)
    return cwd_path, argv, label, sessions.agent_scope(label, argv, named=False)
