"""The library API for orchestrators: the CLI's code path, from asyncio.

::

    async with tether.Client(home="/var/lib/mybot/tether") as client:
        session = await client.ensure_session("claude", cwd="/srv/repo", name="pr-42")
        async for event in session.prompt("fix the failing test"):
            if isinstance(event, tether.AgentMessageChunk):
                print(event.text, end="")
        await session.close()

A :class:`Session` talks IPC v2 to the session's owner daemon, exactly as ``tether
prompt`` does; the owner is started on demand by the same launcher, under the same
registry. Events are typed (:mod:`tether.events`) and errors are the classes of
:mod:`tether.errors`, re-raised across the IPC hop.

The package: :class:`Client` (here), :class:`Session` (:mod:`.session`), the asyncio
connection to an owner (:mod:`.connection`), and the journal's thread-to-asyncio bridge
behind ``Session.watch`` (:mod:`.watch`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tether import agents, operations, paths, sessions
from tether.client.connection import AsyncOwnerConnection
from tether.client.session import QuestionHandler, Session

__all__ = ["Client", "QuestionHandler", "Session"]

# The name tether.acp_door.turns imports the asyncio owner connection by.
_Connection = AsyncOwnerConnection

R = TypeVar("R")


class Client:
    """Entry point of the library API.

    Args:
        home: the state directory (default: ``TETHER_HOME`` or the XDG state dir).
        permissions: ``approve-all``, ``approve-reads`` or ``deny-all``; None (the
            default) keeps each session's own mode (``approve-reads`` for new ones).
        env: extra environment for the owners this client starts, and so for their
            agents (API keys, base URLs); merged over this process's environment.
        ttl: owner idle TTL in seconds for sessions this client creates (0 = forever);
            None: the configuration's ``ttl`` (3600 s by default).
        options: further owner settings by option name (``turn_timeout``,
            ``queue_max_depth``, ``permission_policy`` (a policy file),
            ``permission_timeout``...: :data:`tether.operations.settings_table.TABLE`),
            over the configuration's, checked as the config keys are.
        on_question: answers the questions agents ask during this client's prompts
            (see :meth:`Session.prompt`); None: nobody here answers.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        permissions: str | None = None,
        env: dict[str, str] | None = None,
        ttl: float | None = None,
        options: dict[str, Any] | None = None,
        on_question: QuestionHandler | None = None,
    ) -> None:
        self.on_question = on_question
        self.home = os.path.abspath(os.fspath(home)) if home is not None else None
        self.permissions = permissions
        self.env = dict(env or {})
        self.ttl = ttl
        self.options = dict(options or {})

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    def _with_home(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        token = paths.use_home(self.home)
        try:
            return fn(*args, **kwargs)
        finally:
            paths.reset_home(token)

    async def _op(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Run one blocking operation (:mod:`tether.operations`) in a thread, in our home."""
        return await asyncio.to_thread(self._with_home, fn, *args, **kwargs)

    async def _connect_or_start(
        self, key: str, deadline: float | None = None
    ) -> AsyncOwnerConnection:
        """:func:`tether.operations.connect_or_start`, then the socket into asyncio."""
        conn = await self._op(operations.connect_or_start, key, env=self.env, deadline=deadline)
        try:
            return await AsyncOwnerConnection.adopt(conn)
        except BaseException:
            conn.close()
            raise

    async def ensure_session(
        self,
        agent: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        name: str = "",
        fresh: bool = False,
        resume_session: str | None = None,
    ) -> Session:
        """Create (or reuse) the session for (agent, cwd, name) and make sure its owner runs.

        Args:
            agent: a registry name (``claude``, ``codex``, ``mock``...) or an argv list.
            cwd: the agent's working directory (default: the current directory).
            name: the session's name within its scope.
            fresh: close an existing session of that scope first (``sessions new``).
            resume_session: attach the session to this conversation the agent already
                has (an id from :meth:`agent_sessions`); its agent starts now and must
                resume it (else the session is closed again and the error raised).
        """
        cwd_path, argv, label, scope = _agent_of(agent, cwd)
        key = sessions.session_key(scope, cwd_path, name)
        session = Session(self, key, name, label, cwd_path, scope)
        flags = {"permission_mode": self.permissions, "idle_ttl": self.ttl, **self.options}
        options = await self._op(_owner_settings, cwd_path, flags)
        conn, _created = await self._op(
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
            await self._op(operations.resume_agent_session, key, conn)
        else:
            conn.close()
        return session

    async def terminate_session(self, session_id: str) -> dict[str, Any]:
        """Terminate the session whose id (its key, as ``Session.key``) is ``session_id``.

        See :meth:`Session.terminate`. Raises :class:`~tether.errors.NoSession` for an
        unknown id.
        """
        return await self._op(operations.terminate, session_id, by={"door": "library"})

    async def agent_sessions(
        self,
        agent: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        cursor: str | None = None,
        any_cwd: bool = False,
    ) -> dict[str, Any]:
        """The agent's own sessions (``session/list``), of ``cwd`` unless ``any_cwd``:
        ``{"sessions": [{sessionId, cwd, title, updatedAt}], "nextCursor": ...}``.

        Raises:
            NotAdvertised: the agent does not offer ``session/list``.
        """
        cwd_path, argv, _label, _scope = _agent_of(agent, cwd)
        env = {**os.environ, **self.env} if self.env else None
        return await self._op(
            operations.agent_sessions, argv, cwd_path, cursor=cursor, any_cwd=any_cwd, env=env
        )

    async def logout(
        self, agent: str | Sequence[str], *, cwd: str | os.PathLike[str] | None = None
    ) -> None:
        """ACP ``logout``: the agent forgets its sign-in.

        Raises:
            NotAdvertised: the agent does not offer ``logout``.
        """
        cwd_path, argv, _label, _scope = _agent_of(agent, cwd)
        env = {**os.environ, **self.env} if self.env else None
        await self._op(operations.logout, argv, cwd_path, env=env)

    async def sessions(self) -> list[dict[str, Any]]:
        """Every open session in this home, as registry records."""
        items = await self._op(operations.list_sessions)
        return [{k: item[k] for k in ("key", "name", "agent", "cwd", "state")} for item in items]


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
