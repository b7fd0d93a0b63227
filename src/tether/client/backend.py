"""The one interface behind a :class:`~tether.client.Client`: where its sessions live.

A client talks to a *backend*: :class:`~tether.client.local.LocalBackend` (this
machine's owners, through :mod:`tether.operations` and IPC) or
:class:`~tether.client.remote.RemoteBackend` (a gateway or a fleet router, over HTTP and
SSE). :class:`~tether.client.Client` picks one, in one place; :class:`Session` holds
what both share (question handlers, ``run``, the cancellation contract's handler side)
and asks the backend for the rest. Both raise the classes of :mod:`tether.errors`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any, NamedTuple, Protocol

from tether.events import Answerer, Event

__all__ = ["Backend", "SessionRef"]


class SessionRef(NamedTuple):
    """What names a session to its backend: its key, and what a Session shows."""

    key: str
    name: str
    agent: str
    cwd: str
    scope: str = ""  # the agent part of a local session key (a fork shares it)


def session_summary(item: dict[str, Any]) -> dict[str, Any]:
    """What ``Client.sessions()`` shows of a session, from either backend's listing."""
    return {k: item[k] for k in ("key", "name", "agent", "cwd", "state")}


class Backend(Protocol):
    """What a client can do to sessions; every method raises :mod:`tether.errors` classes."""

    async def aclose(self) -> None: ...

    async def ensure_session(
        self,
        agent: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None,
        name: str,
        fresh: bool,
        resume_session: str | None,
    ) -> SessionRef: ...

    async def fork(self, parent: SessionRef, name: str) -> SessionRef: ...

    def turn(
        self,
        session: SessionRef,
        blocks: list[dict[str, Any]],
        *,
        deadline: float | None,
        control: bool,
        answerer: Answerer,
    ) -> AsyncGenerator[Event, None]:
        """One turn's events, ending with ``TurnEnded`` (questions only when ``control``).

        Closing the iterator before its end cancels the turn (bounded) first.
        """
        ...

    async def answer(
        self, key: str, interaction_id: str, answer: str, content: dict[str, Any] | None
    ) -> dict[str, Any]: ...

    async def cancel(self, key: str) -> dict[str, Any]: ...

    async def control(self, key: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]: ...

    async def status(self, key: str) -> dict[str, Any]: ...

    async def close(self, key: str, *, discard: bool) -> dict[str, Any]: ...

    async def terminate(self, key: str) -> dict[str, Any]: ...

    async def history(self, key: str, limit: int | None) -> list[dict[str, Any]]: ...

    async def transcript(self, key: str, tail: int | None) -> list[dict[str, Any]]: ...

    def watch(
        self, key: str, *, from_seq: int | None, tail: int | None, follow: bool
    ) -> AsyncIterator[Event]: ...

    async def sessions(self) -> list[dict[str, Any]]: ...

    async def agent_sessions(
        self,
        agent: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None,
        cursor: str | None,
        any_cwd: bool,
    ) -> dict[str, Any]: ...

    async def logout(
        self, agent: str | Sequence[str], *, cwd: str | os.PathLike[str] | None
    ) -> None: ...
