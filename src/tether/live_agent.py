"""One live agent: a supervised process, its ACP connection, and one ACP session.

Shared by ``tether exec`` (one turn, then teardown) and the session owner (many turns,
kept warm). Bring-up is spawn -> ``initialize`` -> ``authenticate`` (when configured)
-> ``session/resume`` or ``session/load`` (when we hold an ACP session id and the agent
advertises it) or ``session/new``; each handshake step has its own deadline.
Teardown is ``session/close`` (only on a real close, and only when advertised) ->
close stdin -> the supervisor's TERM -> grace -> KILL -> proven extinction.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether import _aio, _log
from tether.acp.connection import AgentConnection, ClientOptions, TurnResult, UpdateListener
from tether.acp.session_options import model_method, session_new_extras
from tether.acp.transport import ExitStatus
from tether.errors import AgentRequestError, NotAdvertised, TetherError
from tether.process_terminals import ProcessTerminals, TerminalSettings
from tether.supervise.run_state import TerminationReason
from tether.supervise.runner import AgentProcess, ExtinctionReport, SpawnSpec, spawn_agent

# After closing stdin, how long an agent gets to exit by itself before the keeper's
# SIGTERM (acpx: 100 ms). Most agents exit on EOF within 30 ms.
STDIN_EOF_GRACE_S = 0.1


@dataclass
class AgentConfig:
    """How to run and talk to an agent."""

    argv: Sequence[str]
    cwd: str
    env: dict[str, str] | None = None
    client: ClientOptions = field(default_factory=ClientOptions)
    session_key: str | None = None
    grace: float = 1.5
    mcp_servers: Sequence[Any] = ()
    backend_id: str | None = None  # the agent's registry name or command label (run records)
    # Terminals for the agent (terminal/*), each a supervised run; None: not offered.
    terminals: TerminalSettings | None = None
    # acpx's session options (model, allowedTools, maxTurns, systemPrompt,
    # appendSystemPrompt): applied as the agent offers (tether.acp.session_options).
    session_options: dict[str, Any] = field(default_factory=dict)
    # Called with a short line at each bring-up step (spawned, initialize, session/new).
    on_progress: Callable[[str], None] | None = None


def _quiet(_line: str) -> None:
    """No progress lines wanted."""


class ProcessTransport:
    """A supervised agent process as the ACP driver's transport (its stdin and stdout)."""

    def __init__(self, proc: AgentProcess) -> None:
        self.proc = proc

    @property
    def label(self) -> str:
        return self.proc.lease_id

    def set_receiver(self, on_data: Callable[[bytes], None], on_eof: Callable[[], None]) -> None:
        self.proc.set_stdout_handler(on_data, on_eof)

    def write(self, data: bytes) -> None:
        self.proc.write(data)

    def close_write(self) -> None:
        self.proc.close_stdin()

    def exit_status(self) -> ExitStatus | None:
        exited = self.proc.exited
        return exited.result() if exited is not None and exited.done() else None

    async def wait_exited(self) -> ExitStatus:
        return await self.proc.wait_exited()

    def is_alive(self) -> bool:
        if self.exit_status() is not None or self.proc.pid is None:
            return False
        st = self.proc.table.stat(self.proc.pid)
        return st is not None and st.state != "Z"

    def stderr_tail(self) -> str:
        return self.proc.stderr_tail()


class LiveAgent:
    """A running agent with one ACP session. Create with :meth:`start`."""

    def __init__(
        self,
        cfg: AgentConfig,
        proc: AgentProcess,
        conn: AgentConnection,
        terminals: ProcessTerminals | None = None,
    ) -> None:
        self.cfg = cfg
        self.proc = proc
        self.conn = conn
        self.terminals = terminals
        self.session_id: str = ""
        self.session_result: dict[str, Any] = {}
        self.resumed = False
        self.forked_from: str | None = None  # the ACP session this one was forked from
        self.discarded: bool | None = None  # session/delete answered (None: not asked)

    @classmethod
    async def start(
        cls,
        cfg: AgentConfig,
        registry: Any,
        *,
        resume_session_id: str | None = None,
        out_of_turn: UpdateListener | None = None,
        fork_from: str | None = None,
        strict_resume: bool = False,
        open_session: bool = True,
    ) -> LiveAgent:
        """Spawn the agent and bring an ACP session up.

        Args:
            resume_session_id: the ACP session to resume (or load), when the agent can;
                else (or when the agent no longer knows it) a new session is made.
            fork_from: with no ``resume_session_id``, ``session/fork`` this ACP session
                instead of ``session/new``.
            strict_resume: resuming ``resume_session_id`` must work: no fallback to a
                new session (``sessions new --resume-session``).
            open_session: False: ``initialize`` (and ``authenticate``) only, for calls
                about the agent rather than one session (``session/list``, ``logout``).

        Raises:
            SpawnError: the agent could not be started.
            HandshakeTimeout: a handshake step had no answer in time.
            AgentRequestError / RemoteProtocolError / AgentExited: the agent refused,
                spoke something else, or died during bring-up.
        In every failure case the process tree has been torn down and proven gone.

        Cancellation: the tree is torn down (shielded) before the cancellation propagates.
        """
        progress = cfg.on_progress or _quiet
        proc = await spawn_agent(
            SpawnSpec(
                argv=list(cfg.argv),
                cwd=cfg.cwd,
                env=cfg.env,
                session_key=cfg.session_key,
                grace=cfg.grace,
                backend_id=cfg.backend_id,
            ),
            registry,
        )
        progress(f"agent started (pid {proc.pid}); initialize")
        terminals = (
            ProcessTerminals(registry, cfg.session_key, cfg.env, cfg.terminals)
            if cfg.terminals is not None
            else None
        )
        client = (
            cfg.client
            if terminals is None
            else dataclasses.replace(cfg.client, terminal_host=terminals)
        )
        conn = AgentConnection(ProcessTransport(proc), cfg.cwd, client)
        live = cls(cfg, proc, conn, terminals)
        if out_of_turn is not None:
            conn.set_fallback_listener(out_of_turn)
        try:
            await conn.initialize()
            name = conn.agent_info.get("name") or "agent"
            version = conn.agent_info.get("version")
            progress(f"{name}{' ' + str(version) if version else ''} initialized")
            if await conn.authenticate_if_needed():
                progress("authenticated")
            if open_session:
                await live._open_session(
                    resume_session_id, fork_from, strict=strict_resume, progress=progress
                )
        except BaseException as exc:
            reason = TerminationReason.SPAWN_ERROR
            await _aio.cleanup(live.aclose(reason, close_session=False), what="aclose")
            if isinstance(exc, TetherError) and "stderr_tail" not in exc.fields:
                exc.fields["stderr_tail"] = proc.stderr_tail()[-2000:]
            raise
        return live

    async def _open_session(
        self,
        resume_session_id: str | None,
        fork_from: str | None,
        *,
        strict: bool,
        progress: Callable[[str], None],
    ) -> None:
        conn = self.conn
        options = self.cfg.session_options
        # Checked before any session exists: an option the agent cannot apply is refused
        # up front, not discovered after the first turn.
        extras = session_new_extras(options, conn.agent_info, conn.agent_capabilities)
        if resume_session_id and strict and not (conn.can_resume or conn.can_load):
            raise NotAdvertised(
                "the agent can neither resume nor load a session", method="session/resume"
            )
        if resume_session_id and (conn.can_resume or conn.can_load):
            progress("session/resume" if conn.can_resume else "session/load")
            try:
                self.session_result = await conn.load_session(
                    resume_session_id, self.cfg.cwd, mcp_servers=self.cfg.mcp_servers, extras=extras
                )
                self.session_id = resume_session_id
                self.resumed = True
                return
            except AgentRequestError as exc:
                if strict:
                    raise
                # -32002 (resource not found) and friends: fall back to a new session,
                # as acpx does; the caller replays the desired mode and config.
                _log.event("resume_failed", session_id=resume_session_id, error=str(exc))
        if fork_from and not resume_session_id:
            progress("session/fork")
            result = await conn.fork_session(fork_from, self.cfg.cwd, self.cfg.mcp_servers)
            self.forked_from = fork_from
        else:
            progress("session/new")
            result = await conn.new_session(self.cfg.cwd, self.cfg.mcp_servers, extras)
        self.session_id = result["sessionId"]
        self.session_result = result
        model = options.get("model")
        if model and not self.forked_from:  # a fork continues with its source's model
            method, params = model_method(str(model), result, conn.agent_info)
            await conn.request(
                method,
                {"sessionId": self.session_id, **params},
                timeout=conn.options.handshake_timeout,
            )
            progress(f"model {model}")

    async def prompt(
        self,
        blocks: Sequence[dict[str, Any]],
        listener: UpdateListener,
        *,
        ceiling: float | None = None,
    ) -> TurnResult:
        return await self.conn.prompt(self.session_id, blocks, listener, ceiling=ceiling)

    async def settle(self) -> bool:
        """Wait (bounded) until nothing of an abandoned turn can still arrive.

        False when the agent did not answer its abandoned turn within the connection's
        ``abandoned_turn_grace``: the connection is then retired (``alive`` is False),
        and the caller restarts the agent and resumes the session.
        """
        return await self.conn.settle(self.session_id)

    def cancel(self) -> bool:
        return self.conn.cancel(self.session_id)

    @property
    def alive(self) -> bool:
        return self.proc.is_running and not self.conn.is_broken

    async def aclose(
        self,
        reason: TerminationReason = TerminationReason.CLOSE,
        *,
        close_session: bool,
        discard: bool = False,
    ) -> ExtinctionReport:
        """Tear down: ``session/close`` if asked and advertised, ``session/delete`` if
        ``discard`` and advertised, stdin EOF, the agent's terminals (each ended with
        proof), then the agent's tree.

        Cancellation: the process-tree teardowns are shielded and always complete.
        """
        self.proc.note_stop(reason)
        if close_session and self.session_id and not self.conn.is_broken:
            with contextlib.suppress(Exception):
                await self.conn.close_session(self.session_id)
        if discard and self.session_id and not self.conn.is_broken:
            self.discarded = await discard_session(self.conn, self.session_id)
        await self.conn.aclose()
        if self.terminals is not None:
            await self.terminals.aclose()
        if self.proc.exited is not None and not self.proc.exited.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STDIN_EOF_GRACE_S):
                    await self.proc.wait_exited()
        return await self.proc.aclose(reason)


async def discard_session(conn: AgentConnection, session_id: str) -> bool:
    """``session/delete`` of ``session_id`` when the agent advertises it (seed 000's
    ``discardPersistentState``); True if the agent confirmed. Never raises a Tether
    error: a close goes on whatever the agent says."""
    if not conn.can_delete:
        return False
    try:
        await conn.delete_session(session_id)
    except TetherError as exc:
        _log.event("discard_failed", session_id=session_id, error=str(exc))
        return False
    return True
