"""Agents' terminals as supervised runs: the process half of ``terminal/*``.

:mod:`tether.acp.terminals` answers the protocol; this module runs the commands. Every
terminal is a run of its own through :func:`tether.supervise.runner.spawn_agent`, with
the same guarantees as the agent itself:

* its own keeper (a subreaper in its own session and process group, in its own cgroup
  where there is one) and its own lease, marked with the session's key, so the
  command and everything it spawns -- ``setsid`` daemons included -- carry the lease
  marker and are found by the supervisor's proofs and by the next owner's reconcile;
* ``terminal/kill``, ``terminal/release``, the agent run's end (session close, owner
  retirement) end it by TERM -> grace -> KILL through the keeper and prove it gone
  (the keeper's ECHILD, the cgroup, the marker scan);
* the owner's death ends it as it ends the agent: the keeper watches its supervisor
  (pdeathsig, a pidfd, the control socket's EOF) and takes its tree down.

When the command exits by itself, whatever it left running is ended at once, as for
an agent: a terminal never outlives its command's exit by more than the teardown.

A terminal's stdin is closed at once (ACP has no way to write to a terminal); stdout
and stderr are one pipe, or one PTY with ``terminalPty``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tether import _aio, _log
from tether.acp.terminals import DEFAULT_OUTPUT_LIMIT, TerminalCommand
from tether.acp.transport import ExitStatus
from tether.errors import ClosedResourceError
from tether.supervise.run_state import TerminationReason
from tether.supervise.runner import AgentProcess, ExtinctionReport, SpawnSpec, spawn_agent

__all__ = ["ProcessTerminals", "TerminalSettings"]

# Lease rows of terminals carry this backend id, so reconcile and status can tell them
# from the agent's own run.
TERMINAL_BACKEND = "terminal"


@dataclass(frozen=True)
class TerminalSettings:
    """How agents' terminals are run (config: ``terminalOutputLimit``, ``terminalPty``)."""

    output_limit: int = DEFAULT_OUTPUT_LIMIT
    pty: bool = False
    grace: float = 1.5

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> TerminalSettings | None:
        """From stored session options or config: None when terminals are off."""
        if options.get("terminal") is False:
            return None
        limit = options.get("terminal_output_limit")
        return cls(
            output_limit=int(limit)
            if isinstance(limit, int) and limit >= 0
            else DEFAULT_OUTPUT_LIMIT,
            pty=options.get("terminal_pty") is True,
        )


class _Run:
    """One terminal's supervised run (a :class:`tether.acp.terminals.TerminalRun`)."""

    def __init__(self, proc: AgentProcess, host: ProcessTerminals) -> None:
        self.proc = proc
        self._host = host

    @property
    def id(self) -> str:
        return self.proc.lease_id  # 128 random bits: unguessable, and names the lease

    def exit_status(self) -> ExitStatus | None:
        exited = self.proc.exited
        return exited.result() if exited is not None and exited.done() else None

    async def wait_exited(self) -> ExitStatus:
        return await self.proc.wait_exited()

    async def end(self) -> None:
        await self._host.end(self, TerminationReason.MANUAL_CANCEL)


class ProcessTerminals:
    """The terminals of one agent run. :meth:`aclose` ends every one of them, with proof.

    Args:
        registry: the open registry the leases are written to.
        session_key: the session the terminals belong to (their leases are marked with it).
        env: the agent's environment (None: ours), under each terminal's own ``env``.
        settings: output limit, PTY or pipes, the TERM -> KILL grace.
    """

    def __init__(
        self,
        registry: Any,
        session_key: str | None,
        env: Mapping[str, str] | None,
        settings: TerminalSettings,
    ) -> None:
        self.registry = registry
        self.session_key = session_key
        self.env = env
        self.settings = settings
        self.runs: dict[str, _Run] = {}
        self.reports: dict[str, ExtinctionReport] = {}
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedResourceError("the agent run is ending: no new terminals")

    @property
    def output_limit(self) -> int:
        return self.settings.output_limit

    async def start(self, command: TerminalCommand, on_output: Callable[[bytes], None]) -> _Run:
        """Start ``command`` under a keeper and a lease of its own."""
        self._check_open()
        env = dict(os.environ if self.env is None else self.env)
        env.update(command.env)
        proc = await spawn_agent(
            SpawnSpec(
                argv=command.argv,
                cwd=command.cwd,
                env=env,
                session_key=self.session_key,
                grace=self.settings.grace,
                pty=self.settings.pty,
                merge_stderr=True,
                backend_id=TERMINAL_BACKEND,
            ),
            self.registry,
        )
        # No await between the spawn and the bookkeeping: aclose() always sees this run.
        run = _Run(proc, self)
        self.runs[run.id] = run
        proc.set_stdout_handler(on_output, _ignore)
        proc.close_stdin()
        _log.event(
            "terminal_created", runId=run.id, sessionKey=self.session_key, argv0=command.argv[0]
        )
        try:
            self._check_open()  # closed while we were spawning?
        except ClosedResourceError:
            await self.end(run, TerminationReason.CLOSE)
            raise
        return run

    async def end(self, run: _Run, reason: TerminationReason) -> ExtinctionReport:
        """End one terminal's tree and prove it (idempotent: the first reason wins)."""
        report = await run.proc.aclose(reason)
        if run.id not in self.reports:
            self.reports[run.id] = report
            level = logging.WARNING if report.survivors else logging.INFO
            _log.event(
                "terminal_ended",
                level,
                runId=run.id,
                sessionKey=self.session_key,
                reason=report.reason,
                survivors=list(report.survivors),
            )
        return report

    async def aclose(self) -> list[ExtinctionReport]:
        """End every terminal (the agent run is ending); refuse new ones. Idempotent.

        Cancellation: the teardowns are shielded and complete regardless.
        """
        self._closed = True
        runs = list(self.runs.values())
        if not runs:
            return []
        ending = asyncio.gather(*(self.end(r, TerminationReason.CLOSE) for r in runs))
        return list(await _aio.shielded(ending))


def _ignore() -> None:
    """The terminal's output EOF: nothing to do (its exit status comes from the keeper)."""
