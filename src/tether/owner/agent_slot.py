"""The owner's agent slot: at most one live agent run, started lazily, kept warm.

``ensure()`` returns the live agent, starting one when there is none (or the last one
died): spawn through the supervisor (keeper + lease), ACP bring-up, ``session/resume``
or ``session/load`` of the session's ACP id where the agent advertises it, else
``session/new`` -- and then the desired mode and config options are replayed, since a
fresh ACP session forgets them (acpx#45).

A watcher notices the agent ending by itself (crash, exit) between or during turns.
``end_run()`` tears one run down and reports its end exactly once per run (the lease id
is the run's identity); the owner decides what that end means for the session.

The slot routes the agent's frames to whoever the owner says is the current prompt job:
only frames of the running turn are relayed, so trailing updates of an abandoned turn
never reach the next caller.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from tether.acp._agent_requests import ClientRelay
from tether.acp.connection import ClientOptions
from tether.errors import TetherError
from tether.live_agent import AgentConfig, LiveAgent, discard_session
from tether.owner.job import Job
from tether.owner.questions import Questions
from tether.owner.session_info import SessionInfoWatch
from tether.owner.settings import OwnerSettings
from tether.state.registry import Registry
from tether.supervise.run_state import TerminationReason
from tether.supervise.runner import ExtinctionReport

__all__ = ["AgentSlot", "RunEnd"]


class RunEnd:
    """How one agent run ended: the extinction report and who ended it."""

    __slots__ = ("by_agent", "lease_id", "report")

    def __init__(self, lease_id: str, report: ExtinctionReport, *, by_agent: bool) -> None:
        self.lease_id = lease_id
        self.report = report
        self.by_agent = by_agent


def lineage(session: Any) -> dict[str, Any]:
    """How the session's ACP conversation is opened (``LiveAgent.start`` arguments).

    - it has an ACP session id: resume it -- strictly when it is the one the user gave
      (``sessions new --resume-session ID``, option ``resume_session``);
    - else it was made by ``sessions fork`` (option ``fork_from``): ``session/fork`` of
      the parent's ACP session;
    - else a new ACP session.
    """
    options = session.options if isinstance(session.options, dict) else {}
    acp_id = session.acp_session_id
    fork = options.get("fork_from")
    fork_id = fork.get("acpSessionId") if isinstance(fork, dict) else None
    return {
        "resume_session_id": acp_id,
        "strict_resume": bool(acp_id) and options.get("resume_session") == acp_id,
        "fork_from": fork_id if isinstance(fork_id, str) and not acp_id else None,
    }


class AgentSlot:
    """At most one live agent for one session. See the module docstring.

    Args:
        key: the session key.
        registry: the state database.
        settings: the owner's settings.
        current_prompt: the job whose turn is running, if it is a prompt.
        on_run_end: called once per run that ended, after its tree is proven gone.
        spawn: runs a background task owned by the owner (the run watcher).
    """

    def __init__(
        self,
        key: str,
        registry: Registry,
        settings: OwnerSettings,
        *,
        current_prompt: Callable[[], Job | None],
        on_run_end: Callable[[RunEnd], None],
        spawn: Callable[[Any], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.key = key
        self.registry = registry
        self.settings = settings
        self.live: LiveAgent | None = None
        self._current_prompt = current_prompt
        self._on_run_end = on_run_end
        self._spawn = spawn
        self._ended_runs: set[str] = set()
        self._retired = False  # the last run was retired: the next one says how it began
        # The owner is stopping (its lifecycle says): a run ending now is not a crash.
        self._stopping = stopping
        # The owner's journal: every ACP frame goes in (returns its seq); None: none kept.
        self.journal_frame: Callable[[str, bytes, str | None], int] | None = None
        # Journal a control record (kind, payload); the owner wires its journal in.
        self.record: Callable[[str, dict[str, Any]], object] = lambda *_: None
        # Questions for a human (permission asks, elicitations); None: the policy alone.
        self.questions: Questions | None = None
        # fs/* and terminal/* the prompting client serves itself (tether acp); None: ours.
        self.relay: ClientRelay | None = None
        # usage_update / session_info_update, in a turn or not, for `status`.
        self.session_info = SessionInfoWatch()
        # After a close with --discard: whether the agent deleted its session (None: not asked).
        self.discarded: bool | None = None

    @property
    def alive(self) -> bool:
        return self.live is not None and self.live.alive

    def roots(self) -> tuple[int, ...]:
        """The roots of what we run for the agent, us first: everything below the owner
        (the run, each terminal's keeper, a dead keeper's orphans) is the agent's side,
        and the operator, a daemon's stranger, never is (issue 20)."""
        live = self.live
        own = (os.getpid(),)
        if live is None:
            return own
        return own + tuple(p for p in (live.proc.keeper_pid, live.proc.pid) if p)

    async def ensure(self) -> LiveAgent:
        """The live agent, started if there is none (see the module docstring)."""
        if self.live is not None and self.live.alive:
            # A turn abandoned earlier may still stream: its updates would pass for the
            # next turn's. Wait (bounded) for its answer; if it never comes, retire this
            # run and resume the session on a fresh one (seed 002).
            if await self.live.settle():
                return self.live
            await self.retire(self.live)
        if self.live is not None:
            await self.end_run(self.live, reason=TerminationReason.EXIT)
        retired = self._retired
        session = self.registry.session(self.key)
        if session is None:
            raise TetherError("the session disappeared from the registry", session_key=self.key)
        live = await LiveAgent.start(self._config(session), self.registry, **lineage(session))
        self.live = live
        self._retired = False  # (a start that failed leaves it for the next one to say)
        self.registry.update_session(self.key, acp_session_id=live.session_id)
        self.record(
            "agent_run_started",
            {
                "leaseId": live.proc.lease_id,
                "agentPid": live.proc.pid,
                "keeperPid": live.proc.keeper_pid,
                "acpSessionId": live.session_id,
                "resumed": live.resumed,
            },
        )
        if not live.resumed or retired:
            await self._replay_desired(live, session.desired_mode, session.desired_config)
        if retired and not live.resumed:
            self._tell_restarted(live)
        self._spawn(self._watch_run(live))
        return live

    async def retire(self, live: LiveAgent) -> None:
        """Retire a run whose agent stopped answering -- it never answered a turn we
        abandoned (seed 002), or ignored a cancel past ``cancelGrace`` -- and whose
        connection is retired: its tree is ended with proof (``agent_run_ended``, reason
        ``unresponsive``); the next :meth:`ensure` starts a fresh agent under a new lease,
        resumes the session, replays the mode and options, and says so when it cannot
        resume."""
        self._retired = True
        await self.end_run(live, reason=TerminationReason.UNRESPONSIVE)

    def _config(self, session: Any) -> AgentConfig:
        from tether.mcp_servers import servers_for

        s = self.settings
        return AgentConfig(
            argv=session.agent_command,
            cwd=session.cwd,
            client=ClientOptions(
                permission_mode=s.policy(),
                fs=s.fs,
                liveness_interval=s.liveness_interval,
                handshake_timeout=s.handshake_timeout,
                abandoned_turn_grace=s.abandoned_turn_grace,
                cancel_grace=s.cancel_grace,
                prompt_ceiling=None,
                max_frame_bytes=s.agent_frame_bytes,
                auth=s.auth,
                auth_policy=s.auth_policy,
                on_line=self._on_line,
                on_permission=self._on_permission,
                relay=self.relay,
                **self._question_hooks(),
            ),
            session_key=self.key,
            backend_id=session.agent_label,
            mcp_servers=servers_for(session.options, self.key),
            terminals=s.terminals,
            session_options=dict(session.options.get("agent_options") or {}),
            on_progress=self._progress,
        )

    async def discard_offline(self) -> None:
        """Close --discard with no agent running: start one without opening a session,
        ``session/delete`` the session's ACP id (when advertised), and end that run."""
        session = self.registry.session(self.key)
        if session is None or not session.acp_session_id:
            return
        try:
            live = await LiveAgent.start(self._config(session), self.registry, open_session=False)
        except TetherError:
            self.discarded = False
            return
        live.session_id = session.acp_session_id
        try:
            self.discarded = await discard_session(live.conn, session.acp_session_id)
        finally:
            await self.end_run(live, reason=TerminationReason.CLOSE)

    def _tell_restarted(self, live: LiveAgent) -> None:
        """The retired run's conversation could not be resumed: say so in the turn's output."""
        job = self._current_prompt()
        if job is not None:
            message = (
                "the agent did not end an abandoned or cancelled turn and was restarted; it "
                "could not resume the conversation, so this turn starts a new one"
            )
            notice = {"action": "conversation_restarted", "sessionId": live.session_id}
            job.send(
                {
                    "type": "notice",
                    "requestId": job.request_id,
                    "notice": notice,
                    "message": message,
                }
            )

    async def _replay_desired(
        self, live: LiveAgent, mode: str | None, config: dict[str, Any]
    ) -> None:
        """A fresh ACP session forgets the mode and options set earlier (acpx#45): replay."""
        with contextlib.suppress(TetherError):
            if mode:
                await live.conn.set_mode(live.session_id, mode)
            for key, value in config.items():
                await live.conn.set_config_option(live.session_id, key, value)

    def _progress(self, message: str) -> None:
        """A bring-up step, told to the caller whose prompt waits for it (text banners)."""
        job = self._current_prompt()
        if job is not None:
            job.send({"type": "progress", "requestId": job.request_id, "message": message})

    def _question_hooks(self) -> dict[str, Any]:
        q = self.questions
        if q is None:
            return {}
        return {
            "permission_hook": q.ask_permission,
            "elicitation_hook": q.ask_elicitation,
            "on_elicitation_complete": q.elicitation_complete,
        }

    def _on_line(self, direction: str, line: bytes) -> None:
        job = self._current_prompt()
        live = self.live
        # Relay only frames of the running turn: trailing updates of an abandoned turn
        # (which arrive while the connection settles) must not reach the next caller.
        relay = job is not None and live is not None and live.conn.active_turn(live.session_id)
        seq = 0
        if direction == "in":
            self.session_info.note_line(line)
        if self.journal_frame is not None:
            # The seq is handed out in memory; the database write comes after, in a batch.
            seq = self.journal_frame(direction, line, job.request_id if relay and job else None)
        if relay and job is not None:
            job.update_line(direction, line, seq)

    def _on_permission(self, request: dict[str, Any], outcome: dict[str, Any]) -> None:
        """Tell the waiting caller what was decided for the agent (a permission frame)."""
        job = self._current_prompt()
        if job is not None:
            job.send(
                {
                    "type": "permission",
                    "requestId": job.request_id,
                    "request": request,
                    "outcome": outcome,
                }
            )

    async def _watch_run(self, live: LiveAgent) -> None:
        """Notice the agent ending by itself (crash, exit) between or during turns."""
        await live.proc.wait_exited()
        if not self._stopping() and self.live is live:
            live.conn.agent_ended("the agent's run ended")  # its turn: AGENT_EXITED
            await self.end_run(live, reason=TerminationReason.EXIT)

    def cancel(self) -> bool:
        """Send ``session/cancel`` for the running turn; False if it has not reached the agent."""
        return self.live.cancel() if self.live is not None else False

    async def end_run(
        self,
        live: LiveAgent,
        *,
        reason: TerminationReason,
        close_session: bool = False,
        discard: bool = False,
    ) -> RunEnd | None:
        """Tear one agent run down and report its end exactly once.

        Returns how it ended, or None if its end was already reported.
        """
        lease_id = live.proc.lease_id
        if lease_id in self._ended_runs:
            return None
        self._ended_runs.add(lease_id)
        report = await live.aclose(reason, close_session=close_session, discard=discard)
        if discard:
            self.discarded = live.discarded
        if self.live is live:
            self.live = None
        end = RunEnd(lease_id, report, by_agent=live.proc.lifecycle.terminated_by == "agent")
        self._on_run_end(end)
        return end

    async def end_current(
        self, *, reason: TerminationReason, close_session: bool, discard: bool = False
    ) -> RunEnd | None:
        """End the live run, if any (shutdown); ``discard``: ``session/delete`` too."""
        if self.live is None:
            return None
        return await self.end_run(
            self.live, reason=reason, close_session=close_session, discard=discard
        )

    async def terminate(self) -> RunEnd | None:
        """End the live run now, for the operator: no ``session/close``, no stdin-EOF
        grace, no waiting for the agent -- its terminals and its tree get the keeper's
        TERM -> grace -> KILL at once, then proven extinction. Returns how it ended
        (None: no run, or already ended)."""
        live = self.live
        if live is None:
            return None
        lease_id = live.proc.lease_id
        if lease_id in self._ended_runs:
            return None
        self._ended_runs.add(lease_id)
        live.proc.note_stop(TerminationReason.TERMINATE)
        await live.conn.aclose()  # fails the pending turn at once; the agent gets EOF
        if live.terminals is not None:
            await live.terminals.aclose()  # the agent's terminals: each ended with proof
        report = await live.proc.aclose(TerminationReason.TERMINATE)
        if self.live is live:
            self.live = None
        end = RunEnd(lease_id, report, by_agent=False)
        self._on_run_end(end)
        return end

    async def end_if_dead(self) -> None:
        """After a job: a run whose agent died is ended (and reported) now."""
        if self.live is not None and not self.live.alive:
            await self.end_run(self.live, reason=TerminationReason.EXIT)
