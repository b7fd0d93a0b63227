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
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tether import _fastjson, agents, operations, paths, sessions
from tether.errors import (
    AlreadyAnswered,
    OwnerLost,
    OwnerUnavailable,
    RemoteProtocolError,
    error_from_wire,
)
from tether.events import (
    AgentMessageChunk,
    Event,
    Question,
    SessionEnded,
    TurnEnded,
    event_from_frame,
    question_from_frame,
)
from tether.ipc import protocol
from tether.ipc.client import OwnerConnection, new_request_id
from tether.ipc.lines import LineReader

__all__ = ["Client", "QuestionHandler", "Session"]

# Answers a question the agent asked: an answer word (``allow``, ``always``, ``deny``...,
# ``accept``/``decline``/``cancel``), a dict (an elicitation form accepted with this
# content), or None (leave it to other controllers, the deadline or the policy).
QuestionHandler = Callable[[Question], Awaitable["str | dict[str, Any] | None"]]

CANCEL_SETTLE_S = 3.0
READ_CHUNK = 65536
R = TypeVar("R")


class _Connection:
    """One asyncio connection to an owner: hello (already read), then requests.

    Made from a connection the blocking operations layer opened (and version-checked):
    the socket moves into asyncio streams, and the line reader moves along with any
    bytes it already holds.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        lines: LineReader,
        hello: dict[str, Any],
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.lines = lines
        self.hello = hello

    @classmethod
    async def adopt(cls, conn: OwnerConnection) -> _Connection:
        sock = socket.socket(fileno=conn.sock.detach())
        sock.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return cls(reader, writer, conn.lines, conn.hello)

    async def read(self) -> dict[str, Any] | None:
        lines = self.lines
        while True:
            line = lines.next_line()  # FrameTooLarge: a RemoteProtocolError
            if line is not None:
                break
            if lines.at_eof:
                return None
            try:
                chunk = await self.reader.read(READ_CHUNK)
            except ConnectionError:
                chunk = b""  # reset: the owner is gone, like EOF
            lines.feed(chunk)
        try:
            frame = _fastjson.loads(line.decode("utf-8"))
        except ValueError:
            raise RemoteProtocolError("the owner sent a malformed frame") from None
        return frame if isinstance(frame, dict) else None

    async def send(self, kind: str, payload: dict[str, Any], deadline_ms: int | None) -> str:
        rid = new_request_id()
        generation = self.hello.get("generation")
        self.writer.write(
            protocol.request_frame(
                rid,
                kind,
                payload,
                deadline_ms=deadline_ms,
                owner_generation=generation if isinstance(generation, int) else None,
            )
        )
        await self.writer.drain()
        return rid

    async def frames(self, rid: str) -> AsyncIterator[dict[str, Any]]:
        """This request's frames through its terminal frame (which is yielded last)."""
        tracker = protocol.ResponseTracker(rid)
        while True:
            frame = await self.read()
            if frame is None:
                if tracker.acked:
                    raise OwnerLost("the owner went away mid-request; the outcome is unknown")
                raise OwnerUnavailable("the owner went away before acknowledging the request")
            try:
                mine = tracker.feed(frame)
            except ValueError as exc:
                raise RemoteProtocolError(f"the owner broke IPC ordering: {exc}") from None
            if mine is None or mine.get("type") == "hello":
                continue
            yield mine
            if tracker.finished:
                return

    async def request(
        self, kind: str, payload: dict[str, Any], deadline_ms: int | None = None
    ) -> dict[str, Any]:
        rid = await self.send(kind, payload, deadline_ms)
        async for frame in self.frames(rid):
            if frame.get("type") == "result":
                result = frame.get("result")
                return result if isinstance(result, dict) else {}
            if frame.get("type") == "error":
                raise error_from_wire(frame.get("error") or {})
        raise OwnerLost("no terminal frame")  # pragma: no cover - frames() raises first

    async def aclose(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


class Session:
    """A saved session (agent, cwd, name) served by a warm owner. Get one from a Client."""

    def __init__(
        self, client: Client, key: str, name: str, agent: str, cwd: str, scope: str = ""
    ) -> None:
        self._client = client
        self.key = key
        self.name = name
        self.agent = agent
        self.cwd = cwd
        self._scope = scope  # the agent part of the session key (a fork shares it)

    def __repr__(self) -> str:
        return f"Session(agent={self.agent!r}, cwd={self.cwd!r}, name={self.name!r})"

    async def _connect(self, deadline: float | None = None) -> _Connection:
        return await self._client._connect_or_start(self.key, deadline)

    async def _op(self, fn: Callable[..., R], *args: Any) -> R:
        return await self._client._op(fn, *args)

    async def prompt(
        self,
        text: str | Sequence[dict[str, Any]],
        *,
        timeout: float | None = None,
        on_question: QuestionHandler | None = None,
        control: bool | None = None,
    ) -> AsyncIterator[Event]:
        """Run one turn; yield its events in arrival order, ending with :class:`TurnEnded`.

        Args:
            text: the prompt text, or a list of ACP content blocks.
            timeout: give up after this many seconds, counting from the call --
                reaching or starting the owner, the agent's start, queueing and the turn
                (the turn is cancelled, and :class:`tether.errors.PromptTimeout` or
                :class:`tether.errors.CallTimeout` is raised); None for no limit.
            on_question: answers the questions the agent asks during this turn
                (default: the client's ``on_question``); see :data:`QuestionHandler`.
                It runs as its own task; the first answer from any controller wins.
            control: be a controller of this turn: its questions are yielded as
                :class:`~tether.events.PermissionRequested` /
                :class:`~tether.events.ElicitationRequested` events (answer them with
                ``await event.answer("allow")``) and their ends as
                :class:`~tether.events.QuestionResolved`. Default: whether a handler is
                set. Without a controller, the session's policy decides at once.

        Raises:
            TetherError subclasses: PromptTimeout, AgentExited, QueueOverloaded,
            OwnerLost (the owner died mid-turn: outcome unknown), ...

        Cancellation: if the consuming task is cancelled (or the iterator is closed
        before the turn ended), the turn is cancelled in the owner -- ``session/cancel``,
        nothing killed, the session stays warm -- before the cancellation propagates.
        """
        blocks = [{"type": "text", "text": text}] if isinstance(text, str) else list(text)
        # The timeout bounds the whole call: reaching (or starting) the owner counts too.
        deadline = time.monotonic() + timeout if timeout is not None else None
        conn = await self._connect(deadline)
        deadline_ms = (
            None if deadline is None else max(1, int((deadline - time.monotonic()) * 1000))
        )
        handler = on_question or self._client.on_question
        controlling = control if control is not None else handler is not None
        rid = ""
        finished = False
        handlers: set[asyncio.Task[None]] = set()
        try:
            rid = await conn.send(
                "prompt",
                {
                    "prompt": blocks,
                    "wait": True,
                    "client": "library",
                    **({"control": True} if controlling else {}),
                    **(
                        {"permissionMode": self._client.permissions}
                        if self._client.permissions
                        else {}
                    ),
                },
                deadline_ms,
            )
            async for frame in conn.frames(rid):
                kind = frame.get("type")
                if kind == "update" and frame.get("direction") == "in":
                    acp = frame.get("frame")
                    event = event_from_frame(acp) if isinstance(acp, dict) else None
                    if event is not None:
                        yield event
                elif kind in ("interaction", "interaction_resolved"):
                    question = question_from_frame(frame, self._answerer)
                    if question is None:
                        continue
                    if handler is not None and isinstance(question, Question):
                        task = asyncio.ensure_future(self._ask(handler, question))
                        handlers.add(task)
                        task.add_done_callback(handlers.discard)
                    yield question
                elif kind == "session_ended":
                    ev = frame.get("event") or {}
                    yield SessionEnded(
                        raw=frame,
                        reason=str(ev.get("reason", "")),
                        terminated_by=str(ev.get("terminatedBy", "")),
                        message=str(ev.get("message", "")),
                        exit_code=ev.get("exitCode"),
                    )
                elif kind == "error":
                    finished = True
                    raise error_from_wire(frame.get("error") or {})
                elif kind == "result":
                    finished = True
                    result = frame.get("result") or {}
                    yield TurnEnded(
                        raw=frame,
                        stop_reason=str(result.get("stopReason", "")),
                        permission_denied=int(result.get("permissionDenied") or 0),
                    )
        finally:
            for task in list(handlers):
                task.cancel()
            if rid and not finished:
                # The consumer left early (cancelled, or broke out of the loop): cancel
                # this turn, never leave it running for nobody.
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._cancel_request(rid))
            await asyncio.shield(conn.aclose())

    async def _answerer(
        self, interaction_id: str, answer: str, content: dict[str, Any] | None
    ) -> dict[str, Any]:
        return await self.answer(interaction_id, answer, content=content)

    async def _ask(self, handler: QuestionHandler, question: Question) -> None:
        """Run the question handler; its answer loses quietly to an earlier one."""
        reply = await handler(question)
        if reply is None:
            return
        with contextlib.suppress(AlreadyAnswered):
            if isinstance(reply, dict):
                await question.answer("accept", reply)
            else:
                await question.answer(reply)

    async def answer(
        self, interaction_id: str, answer: str, *, content: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Answer a question the agent asked (:func:`tether.operations.answer`).

        Raises:
            AlreadyAnswered: someone answered first; this answer was not sent.
            UnknownInteraction: no such question is open in this session.
            UsageError: the answer names nothing the agent offered.
        """
        return await self._client._op(
            operations.answer, self.key, interaction_id, answer, content=content
        )

    async def _cancel_request(self, rid: str) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CANCEL_SETTLE_S):
                await self._op(operations.cancel, self.key, rid)

    async def run(self, text: str, *, timeout: float | None = None) -> tuple[str, str]:
        """Run one turn and return (assistant text, stop reason)."""
        parts: list[str] = []
        stop = ""
        async for event in self.prompt(text, timeout=timeout):
            if isinstance(event, AgentMessageChunk):
                parts.append(event.text)
            elif isinstance(event, TurnEnded):
                stop = event.stop_reason
        return "".join(parts), stop

    async def _control(self, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        conn = await self._connect()
        try:
            return await conn.request(kind, payload)
        finally:
            await conn.aclose()

    async def cancel(self) -> bool:
        """Cancel the running turn (the session stays warm). True if a turn was cancelled."""
        result = await self._op(operations.cancel, self.key)
        return bool(result.get("cancelled"))

    async def set_mode(self, mode_id: str) -> dict[str, Any]:
        return await self._control("set_mode", {"modeId": mode_id})

    async def set_config_option(self, config_id: str, value: str | bool) -> dict[str, Any]:
        return await self._control("set_config_option", {"configId": config_id, "value": value})

    async def status(self) -> dict[str, Any]:
        """The owner's status snapshot, or the registry's view when no owner runs."""
        return await self._op(operations.status, self.key)

    async def close(self, *, discard: bool = False) -> dict[str, Any]:
        """End the session: cancel the turn, tear the agent tree down, prove it gone.

        Args:
            discard: the agent also deletes the conversation (``session/delete``, where
                it offers it); the report's ``discarded`` says whether it did.

        Returns the owner's ``session_closed`` report (``survivors`` must be empty).
        """
        return await self._client._op(operations.close_session, self.key, discard=discard)

    async def fork(self, name: str) -> Session:
        """A new warm session continuing this one's conversation (``session/fork``).

        Its owner and agent start now. The parent is recorded as ``forkedFrom`` in the
        new session's record; ownership is the caller's, as for any session it creates.

        Raises:
            NotAdvertised: the agent does not offer ``session/fork``.
            UsageError: this session has no conversation yet, or ``name`` is taken.
        """
        key = sessions.session_key(self._scope, self.cwd, name)
        client = self._client
        await client._op(operations.fork_session, self.key, key, name=name, env=client.env or None)
        return Session(client, key, name, self.agent, self.cwd, self._scope)

    async def terminate(self) -> dict[str, Any]:
        """End the session now, for the operator: no new turn, no waiting on the agent.

        Unlike :meth:`close` the agent is not asked (no ``session/cancel`` grace, no
        ``session/close``): its tree gets TERM -> grace -> KILL through the keeper at
        once and is proven gone; the end is recorded (``session_ended``, reason
        ``terminated``) and every attached party is told. Idempotent: terminating an
        ended session changes nothing and reports how it ended (``alreadyEnded``).

        Returns:
            ``{terminated: True, reason, terminatedBy, alreadyEnded, ...}``.
        """
        return await self._client.terminate_session(self.key)

    async def history(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        """One summary per turn, oldest first: ``requestId``, ``startedAt``,
        ``durationMs``, ``stopReason``, ``preview``, ``by`` (who prompted). Needs no owner."""
        return await self._client._op(operations.history, self.key, limit=limit)

    async def read(self, *, tail: int | None = None) -> list[dict[str, Any]]:
        """The conversation: per turn its ``prompt``, the assistant's ``text``, its
        ``toolCalls`` and ``stopReason`` (the last ``tail`` turns when given)."""
        return await self._client._op(operations.transcript, self.key, tail=tail)

    async def watch(
        self, *, from_seq: int | None = None, tail: int | None = None, follow: bool = True
    ) -> AsyncIterator[Event]:
        """The session's journal as typed events, each with its ``seq``.

        Args:
            from_seq: start at this entry (replay, then live).
            tail: start this many entries before the end.
            follow: keep following live entries (across owner restarts) until the
                session ends; False stops at the last stored entry.
            With neither ``from_seq`` nor ``tail``: live entries only.

        Watching starts no owner and no agent. Leaving the loop stops the watch. A
        :class:`~tether.events.SessionEnded` event is the last one of a session.
        """
        import threading

        from tether.events import event_from_entry
        from tether.journal.entry import parse_line
        from tether.journal.follow import Follower

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, str] | BaseException | None] = asyncio.Queue(256)
        followers: list[Follower] = []
        stop = threading.Event()

        def emit(seq: int, line: str) -> None:
            # Back-pressure: the thread waits while the consumer is behind.
            asyncio.run_coroutine_threadsafe(queue.put((seq, line)), loop).result()

        def work() -> None:
            try:
                self._client._with_home(
                    operations.watch,
                    self.key,
                    emit,
                    from_seq=from_seq,
                    tail=tail,
                    follow=follow,
                    stop=stop,
                    on_start=followers.append,
                )
            except BaseException as exc:
                asyncio.run_coroutine_threadsafe(queue.put(exc), loop).result()
            else:
                asyncio.run_coroutine_threadsafe(queue.put(None), loop).result()

        thread = asyncio.ensure_future(asyncio.to_thread(work))
        try:
            while True:
                item = await queue.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield event_from_entry(parse_line(item[1]))
        finally:
            stop.set()
            for follower in followers:
                follower.interrupt()
            while not thread.done():  # unblock a producer waiting on a full queue
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
                await asyncio.sleep(0.01)


class Client:
    """Entry point of the library API.

    Args:
        home: the state directory (default: ``TETHER_HOME`` or the XDG state dir).
        permissions: ``approve-all``, ``approve-reads`` or ``deny-all``; None (the
            default) keeps each session's own mode (``approve-reads`` for new ones).
        env: extra environment for the owners this client starts, and so for their
            agents (API keys, base URLs); merged over this process's environment.
        ttl: owner idle TTL in seconds for sessions this client creates (0 = forever).
        options: further owner settings (``turn_timeout``, ``queue_max_depth``,
            ``permission_policy`` (a policy file), ``permission_timeout``...).
        on_question: answers the questions agents ask during this client's prompts
            (see :meth:`Session.prompt`); None: nobody here answers.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        permissions: str | None = None,
        env: dict[str, str] | None = None,
        ttl: float = 3600.0,
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

    async def _connect_or_start(self, key: str, deadline: float | None = None) -> _Connection:
        """:func:`tether.operations.connect_or_start`, then the socket into asyncio."""
        conn = await self._op(operations.connect_or_start, key, env=self.env, deadline=deadline)
        try:
            return await _Connection.adopt(conn)
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
        options = {
            "permission_mode": self.permissions or "approve-reads",
            "idle_ttl": self.ttl,
            **self.options,
        }
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
