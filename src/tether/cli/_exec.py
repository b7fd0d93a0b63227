"""``tether exec``: one-shot, no saved session.

Spawn the agent (under a keeper and a lease), initialize, open a new session, send one
prompt, stream it, tear the whole tree down, exit. ``exec`` is a caller that plays owner
for one turn, on the same code path as the owner (:class:`tether.live_agent.LiveAgent`).

Ctrl-C: the first sends ``session/cancel`` (pending permission requests are answered
``cancelled``) and waits briefly for the turn to end; a second, or the wait running
out, abandons the turn. Either way the tree is torn down and the exit code is 130.

A closed stdout (``| head -1``) is the user leaving too: nobody reads the rest, so the
turn is abandoned at once (``session/cancel`` sent, permissions answered
``cancelled``), the tree is torn down, and we exit quietly with 141. The renderer's
``OutputClosed`` never reaches the agent-stdout reader: the driver turns it into the
end of the turn (see :mod:`tether.acp.connection`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import Any

from tether import _aio
from tether.acp.connection import ClientOptions
from tether.acp.policy import PermissionMode, PermissionPolicy, load_policy
from tether.acp.session_options import model_option_id
from tether.cli import _retry, _spinner
from tether.errors import (
    CallTimeout,
    Interrupted,
    OutputClosed,
    PermissionDenied,
    TetherError,
    UsageError,
)
from tether.live_agent import AgentConfig, LiveAgent
from tether.supervise.run_state import TerminationReason

CANCEL_WAIT_S = 3.0  # after Ctrl-C, how long the turn may take to end with `cancelled`


def client_options(ctx: Any, on_frame: Any) -> ClientOptions:
    cfg = ctx.config
    mode: PermissionMode | PermissionPolicy = PermissionMode(ctx.permissions)
    if ctx.inv.permission_policy:  # a policy file (or a mode's name) replaces the mode
        from tether.cli._session_flags import _policy

        mode = load_policy(str(_policy(ctx)))
    return ClientOptions(
        permission_mode=mode,
        fs=not ctx.inv.no_fs,
        liveness_interval=float(cfg.get("livenessInterval") or 30.0),
        handshake_timeout=float(cfg.get("handshakeTimeout") or 30.0),
        prompt_ceiling=None,
        auth={str(k): str(v) for k, v in (cfg.get("auth") or {}).items()},
        auth_policy=ctx.auth_policy,
        on_frame=on_frame,
    )


def run_exec(ctx: Any, text: str) -> int:
    if not text.strip():
        raise UsageError("exec needs prompt text (arguments, -f FILE, or stdin)")
    # Like an owner, this process starts no child but its runs' keepers: it can be their
    # subreaper of last resort and end what a killed keeper leaves (issue 20).
    from tether.supervise.adoption import become_last_resort

    become_last_resort()
    return asyncio.run(_run(ctx, text))


async def _run(ctx: Any, text: str) -> int:
    from tether import metrics
    from tether.state.registry import Registry

    registry = Registry()
    metrics.attach(registry)
    run = _ExecRun(ctx, asyncio.get_running_loop())
    for sig in (signal.SIGINT, signal.SIGTERM):
        run.loop.add_signal_handler(sig, run.on_sigint)
    try:
        agent_cfg = _agent_config(ctx, run.frames)
        ctx.output.banner(f"starting {ctx.agent_label} in {ctx.cwd}")
        # --timeout bounds the whole call: spawn and handshake count, not only the turn.
        deadline = run.loop.time() + ctx.timeout if ctx.timeout is not None else None
        live = await run.start(agent_cfg, registry, deadline)
        return await run.turn(live, text, deadline)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            run.loop.remove_signal_handler(sig)
        await run.aclose()
        metrics.attach(None)
        registry.close()


def _agent_config(ctx: Any, frames: _Frames) -> AgentConfig:
    from tether import mcp_servers as bridge
    from tether import operations
    from tether.process_terminals import TerminalSettings

    # The user's MCP servers only: an exec run has no session for the bridge to act as.
    mcp = bridge.options_from(ctx.config, ctx.inv.mcp_config, False)["mcp_servers"]
    # Terminals as a session's owner would offer them (the one settings table).
    no_terminal = {"terminal": False if ctx.inv.no_terminal else None}
    return AgentConfig(
        argv=ctx.agent_argv,
        cwd=str(ctx.cwd),
        client=client_options(ctx, frames),
        grace=1.5,
        mcp_servers=mcp,
        backend_id=ctx.agent_label,
        terminals=TerminalSettings.from_options(operations.settings(ctx.config, no_terminal)),
        session_options=ctx.inv.session_options(),
        on_progress=ctx.output.banner,
    )


class _ExecRun:
    """One exec run: its agent, the task Ctrl-C cancels, and whether the user left."""

    def __init__(self, ctx: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.ctx = ctx
        self.out = ctx.output
        self.loop = loop
        self.interrupted = asyncio.Event()
        self.live: LiveAgent | None = None
        self.prompt_task: asyncio.Task[Any] | None = None
        self.frames = _Frames(self.out, json_mode=ctx.fmt == "json")

    def on_sigint(self) -> None:
        prompt_task = self.prompt_task
        if self.interrupted.is_set():
            if prompt_task is not None:
                prompt_task.cancel()  # second Ctrl-C: abandon the turn now
            return
        self.interrupted.set()
        if self.live is not None and self.live.cancel():
            self.loop.call_later(
                CANCEL_WAIT_S, lambda: self.prompt_task and self.prompt_task.cancel()
            )
        elif prompt_task is not None:
            prompt_task.cancel()

    async def start(
        self, agent_cfg: AgentConfig, registry: Any, deadline: float | None
    ) -> LiveAgent:
        """Start the agent (Ctrl-C during start-up cancels the start)."""
        scope = asyncio.timeout_at(deadline)
        try:
            start = _aio.spawn(LiveAgent.start(agent_cfg, registry))
            self.prompt_task = start
            async with scope:
                self.live = live = await start
        except asyncio.CancelledError:
            raise Interrupted("interrupted while starting the agent") from None
        except TimeoutError:
            if not scope.expired():
                raise
            raise CallTimeout(
                f"--timeout {self.ctx.timeout:g} s passed while starting the agent",
                phase="agent start",
            ) from None
        return live

    async def turn(self, live: LiveAgent, text: str, deadline: float | None) -> int:
        """The one turn, rendered; its exit code."""
        ctx, out = self.ctx, self.out
        if out.closed:  # the reader left during the handshake (json prints its frames)
            self.interrupted.set()
            raise OutputClosed("stdout was closed by its reader")
        await _config_options(live, ctx.inv.config_options, out)
        self.frames.in_turn = True
        started = self.loop.time()
        spinner = _spinner.for_output(out)
        ticker = _aio.spawn(_tick(spinner)) if spinner is not None else None
        try:
            result = await self._prompt(live, text, deadline)
        finally:
            if ticker is not None:
                ticker.cancel()
            if spinner is not None:
                spinner.clear()
        out.done(result.stop_reason, self.loop.time() - started)
        if self.interrupted.is_set():
            return 130
        if result.permission_denied and ctx.non_interactive == "fail":
            raise PermissionDenied(
                f"{result.permission_denied} permission request(s) were denied",
                denied=result.permission_denied,
            )
        return 0

    async def _prompt(self, live: LiveAgent, text: str, deadline: float | None) -> Any:
        """Send the prompt, again after a retryable failure (``--prompt-retries``)."""
        attempt = 0
        while True:
            ceiling = None if deadline is None else max(0.001, deadline - self.loop.time())
            self.frames.updates = 0
            self.prompt_task = _aio.spawn(
                live.prompt([{"type": "text", "text": text}], _noop, ceiling=ceiling)
            )
            try:
                return await self.prompt_task
            except asyncio.CancelledError:
                raise Interrupted("interrupted; the turn was cancelled") from None
            except OutputClosed:
                self.interrupted.set()  # the tree goes down as on Ctrl-C
                raise
            except TetherError as exc:
                retries = self.ctx.prompt_retries
                if attempt >= retries or not _retry.retryable(
                    exc, updates_seen=self.frames.updates
                ):
                    raise
                wait = _retry.delay(attempt)
                attempt += 1
                self.out.banner(f"prompt failed ({exc}); retry {attempt}/{retries} in {wait:g} s")
                await asyncio.sleep(wait)

    async def aclose(self) -> None:
        """Tear the agent's tree down (if it started)."""
        if self.live is None:
            return
        reason = (
            TerminationReason.MANUAL_CANCEL
            if self.interrupted.is_set()
            else TerminationReason.CLOSE
        )
        report = await _aio.cleanup(self.live.aclose(reason, close_session=True), what="aclose")
        if report is not None and report.survivors:
            sys.stderr.write(f"[tether] warning: survivors {report.survivors}\n")


async def _config_options(live: LiveAgent, options: list[tuple[str, str]], out: Any) -> None:
    """``exec --config-option K=V``: each set on the new session before the prompt."""
    for key, raw in options:
        value: Any = {"true": True, "false": False}.get(raw.lower(), raw)
        if key == "model":  # acpx: model control, whatever the agent calls its option
            key = model_option_id(live.session_result) or key
        await live.conn.set_config_option(live.session_id, key, value)
        out.banner(f"{key} set: {raw}")


async def _tick(spinner: Any) -> None:
    """Draw the spinner (when due) until cancelled."""
    while True:
        await asyncio.sleep(_spinner.TICK_S)
        spinner.tick()


def _noop(_frame: dict[str, Any]) -> None:
    """Updates are rendered by the frame observer, in arrival order."""


class _Frames:
    """The frame observer: renders frames (json: both directions; text: the agent's).

    Once stdout is closed it raises ``OutputClosed`` once during the turn -- the driver
    then abandons the turn -- and otherwise stays silent: before the turn the caller
    checks ``out.closed`` itself, and after it nothing is left to say.
    """

    def __init__(self, out: Any, *, json_mode: bool) -> None:
        self.out = out
        self.json_mode = json_mode
        self.in_turn = False
        self._raised = False
        self.updates = 0  # agent frames seen in this turn (a retry must not repeat them)

    def __call__(self, direction: str, frame: dict[str, Any]) -> None:
        if direction == "in" and self.in_turn and _retry.shows_work(frame):
            self.updates += 1
        if self.json_mode or direction == "in":
            with contextlib.suppress(OutputClosed):
                self.out.frame(direction, frame)
        if self.out.closed and self.in_turn and not self._raised:
            self._raised = True
            raise OutputClosed("stdout was closed by its reader")
