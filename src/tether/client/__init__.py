"""The library API for orchestrators: the CLI's code path, from asyncio.

::

    async with tether.Client(home="/var/lib/mybot/tether") as client:
        session = await client.ensure_session("claude", cwd="/srv/repo", name="pr-42")
        async for event in session.prompt("fix the failing test"):
            if isinstance(event, tether.AgentMessageChunk):
                print(event.text, end="")
        await session.close()

    # the same API against a remote Tether (a gateway or a fleet router):
    async with tether.Client(url="https://tether.example:8765", token=TOKEN) as client:
        ...

A :class:`Session` of a local client talks IPC v2 to the session's owner daemon, exactly
as ``tether prompt`` does; the owner is started on demand by the same launcher, under
the same registry. A remote client (``url=``) talks to ``tether serve``'s HTTP API and
its event streams, resuming a cut stream where it stopped. Events are typed
(:mod:`tether.events`) and errors are the classes of :mod:`tether.errors`, re-raised
across the IPC or HTTP hop.

The package: :class:`Client` (here: it picks the backend, in one place),
:class:`Session` (:mod:`.session`), the backend interface (:mod:`.backend`) and its two
implementations (:mod:`.local`, :mod:`.remote`), the asyncio connection to an owner
(:mod:`.connection`), the journal's thread-to-asyncio bridge (:mod:`.watch`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tether.client.backend import Backend, SessionRef
from tether.client.session import QuestionHandler, Session
from tether.errors import UsageError

__all__ = ["Client", "QuestionHandler", "Session"]


class Client:
    """Entry point of the library API.

    Args:
        home: the state directory (default: ``TETHER_HOME`` or the XDG state dir).
        url: a remote Tether instead (``tether serve``, or a fleet router):
            ``http://host:port``, ``https://host:port`` or ``unix:/abs/path.sock``. Needs
            the ``remote`` extra (httpx). Not with ``home``, ``env`` or ``options``
            (those are the server's).
        token: the remote Tether's bearer token (``url`` only).
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

    Raises:
        UsageError: ``url`` with a local-only argument, ``token`` without ``url``, or a
            URL of another form.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        permissions: str | None = None,
        env: dict[str, str] | None = None,
        ttl: float | None = None,
        options: dict[str, Any] | None = None,
        on_question: QuestionHandler | None = None,
    ) -> None:
        self.on_question = on_question
        self.home = os.path.abspath(os.fspath(home)) if home is not None else None
        self.url = url
        self.permissions = permissions
        self.env = dict(env or {})
        self.ttl = ttl
        self.options = dict(options or {})
        self._backend: Backend
        if url is None:
            if token is not None:
                raise UsageError("token= is for a remote Tether: give url= too")
            from tether.client.local import LocalBackend

            self._backend = LocalBackend(
                self.home, permissions=permissions, env=self.env, ttl=ttl, options=self.options
            )
        else:
            local_only = [n for n, v in (("home", home), ("env", env), ("options", options)) if v]
            if local_only:
                raise UsageError(
                    f"{', '.join(local_only)} cannot be given with url=: a remote Tether"
                    " uses its own"
                )
            from tether.client.remote import RemoteBackend

            self._backend = RemoteBackend(url, token, permissions=permissions, ttl=ttl)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Let go of the client's connections (a remote client's HTTP pool). Idempotent."""
        await self._backend.aclose()

    def _session(self, ref: SessionRef) -> Session:
        return Session(self, ref.key, ref.name, ref.agent, ref.cwd, ref.scope)

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
            agent: a registry name (``claude``, ``codex``, ``mock``...) or an argv list
                (a remote Tether starts named agents only).
            cwd: the agent's working directory (default: the current directory; a remote
                Tether needs it given, as an absolute path on its machine).
            name: the session's name within its scope.
            fresh: close an existing session of that scope first (``sessions new``).
            resume_session: attach the session to this conversation the agent already
                has (an id from :meth:`agent_sessions`); its agent starts now and must
                resume it (else the session is closed again and the error raised).
                Local only.
        """
        ref = await self._backend.ensure_session(
            agent, cwd=cwd, name=name, fresh=fresh, resume_session=resume_session
        )
        return self._session(ref)

    async def terminate_session(self, session_id: str) -> dict[str, Any]:
        """Terminate the session whose id (its key, as ``Session.key``) is ``session_id``.

        See :meth:`Session.terminate`. Raises :class:`~tether.errors.NoSession` for an
        unknown id.
        """
        return await self._backend.terminate(session_id)

    async def agent_sessions(
        self,
        agent: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        cursor: str | None = None,
        any_cwd: bool = False,
    ) -> dict[str, Any]:
        """The agent's own sessions (``session/list``), of ``cwd`` unless ``any_cwd``:
        ``{"sessions": [{sessionId, cwd, title, updatedAt}], "nextCursor": ...}``. Local only.

        Raises:
            NotAdvertised: the agent does not offer ``session/list``.
        """
        return await self._backend.agent_sessions(agent, cwd=cwd, cursor=cursor, any_cwd=any_cwd)

    async def logout(
        self, agent: str | Sequence[str], *, cwd: str | os.PathLike[str] | None = None
    ) -> None:
        """ACP ``logout``: the agent forgets its sign-in. Local only.

        Raises:
            NotAdvertised: the agent does not offer ``logout``.
        """
        await self._backend.logout(agent, cwd=cwd)

    async def sessions(self) -> list[dict[str, Any]]:
        """Every open session (of this home, or of the remote Tether), as records:
        ``key``, ``name``, ``agent``, ``cwd``, ``state``."""
        return await self._backend.sessions()
