"""Running each request that needs the agent: ``prompt``, ``set_mode``, ``set_config_option``,
``start_agent``.

Each runs with the agent up (the slot starts it on demand) and ends by sending its job's
one terminal frame. The caller's answer goes first and the registry write after, so a
result never waits on a SQLite commit (or on another owner holding the write lock).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from tether import metrics
from tether.acp.session_options import model_option_id
from tether.errors import PromptTimeout, RateLimited, TetherError, TetherTimeout, UsageError
from tether.live_agent import LiveAgent
from tether.owner.agent_slot import AgentSlot
from tether.owner.job import Job
from tether.owner.rate_limit import RateLimitWatch
from tether.owner.settings import OwnerSettings
from tether.state.registry import Registry

__all__ = ["RequestRunner"]

HOLD_POLL_S = 0.2  # how often a turn held for a rate-limit reset looks for a cancel


class RequestRunner:
    """Runs admitted requests against the session's agent, one at a time."""

    def __init__(
        self, key: str, registry: Registry, settings: OwnerSettings, slot: AgentSlot
    ) -> None:
        self.key = key
        self.registry = registry
        self.settings = settings
        self.slot = slot
        session = registry.session(key)
        self.last_prompt_at: float | None = session.last_prompt_at if session else None
        # Journal a record: (kind, payload, request id). The owner wires its journal in.
        self.record: Callable[[str, dict[str, Any], str | None], object] = lambda *_: None
        # Run a callback once a seq is stored (the journal's ``when_stored``; wired in).
        self.when_stored: Callable[[int, Callable[[], None]], None] = lambda _s, then: then()
        self.last_stop_reason = ""
        self.to_retire: LiveAgent | None = None  # a run whose agent ignored a cancel
        self.rate_limit = RateLimitWatch()

    async def run(self, job: Job) -> None:
        """Run ``job`` to its terminal frame (errors propagate to the owner's loop)."""
        kind = job.kind
        if kind == "prompt":
            await self._prompt(job)
        elif kind == "set_mode":
            await self._set_mode(job)
        elif kind == "set_config_option":
            await self._set_config_option(job)
        elif kind == "start_agent":
            await self._start_agent(job)
        else:  # pragma: no cover - admission only queues the four kinds above
            raise AssertionError(f"not a queued kind: {kind}")

    async def _ensure(self, job: Job) -> LiveAgent:
        """The agent, started if need be -- within the request's deadline: agent start and
        handshake count against the caller's ``--timeout`` like queueing and the turn."""
        if job.deadline is None:
            return await self.slot.ensure()
        scope = asyncio.timeout(max(0.0, job.deadline - time.monotonic()))
        try:
            async with scope:
                return await self.slot.ensure()
        except TimeoutError:
            if not scope.expired():
                raise  # the agent's own handshake timeout, not our deadline
            raise PromptTimeout(
                "the request's deadline passed while the agent was starting",
                phase="agent start",
            ) from None

    async def _prompt(self, job: Job) -> None:
        started = time.monotonic()
        self.record("turn_started", {}, job.request_id)
        # The caller is answered once the turn's end is stored: the journal never says
        # otherwise than the answer (an owner killed in between), and a reader of the
        # history right after the answer finds the turn there.
        job.hold_answer()
        try:
            await self._run_prompt(job)
        except BaseException as exc:
            # The turn's end is journaled however it ends; its caller gets the error.
            error = getattr(exc, "message", None) or type(exc).__name__
            ended = {"error": str(error), "durationMs": _ms_since(started)}
            if isinstance(exc, TetherError):  # its class, for a reader to raise again
                ended["errorType"] = type(exc).__name__
            self._end_turn(job, ended)
            raise
        else:
            ended = {"stopReason": self.last_stop_reason, "durationMs": _ms_since(started)}
            if job.cancel_outcome:  # whether the agent honoured a cancel (issue 21)
                ended["cancel"] = job.cancel_outcome
            self._end_turn(job, ended)
            if self.to_retire is not None:  # the turn's end first, then the run's
                live, self.to_retire = self.to_retire, None
                await self.slot.retire(live)

    def _end_turn(self, job: Job, ended: dict[str, Any]) -> None:
        """Journal the turn's end; its caller's answer goes once that is stored."""
        seq = self.record("turn_ended", ended, job.request_id)
        self.when_stored(seq if isinstance(seq, int) else 0, job.release_answer)

    async def _run_prompt(self, job: Job) -> None:
        live = await self._ensure(job)
        await self._hold_while_limited(job)
        if job.cancel_requested:
            # Cancelled while the agent was starting: never send it.
            metrics.incr("cancel_total", outcome="success")
            self._record_turn(job, "cancelled")
            job.finish(
                {
                    "stopReason": "cancelled",
                    "sessionId": live.session_id,
                    "permissionDenied": 0,
                    "result": {"stopReason": "cancelled"},
                }
            )
            return
        # A flag on this prompt applies to this turn only; otherwise the session's mode.
        mode = job.env.payload.get("permissionMode")
        file = job.env.payload.get("permissionPolicy")
        live.conn.options.permission_mode = self.settings.policy(
            mode if isinstance(mode, str) else None,
            file if isinstance(file, str) else None,
        )
        self.last_prompt_at = time.time()
        ceiling = self.settings.turn_timeout
        if job.deadline is not None:
            remaining = max(0.001, job.deadline - time.monotonic())
            ceiling = remaining if ceiling is None else min(ceiling, remaining)
        started = time.monotonic()
        try:
            result = await live.prompt(
                job.env.payload["prompt"], self.rate_limit.note_frame, ceiling=ceiling
            )
        except RateLimited as exc:
            self.rate_limit.note_refused(exc, time.time())
            raise
        except TetherTimeout:
            if _cancel_requested(job):  # cancelled, and the agent never ended the turn
                metrics.incr("cancel_total", outcome="timeout")
            raise
        self.rate_limit.note_turn_ok()
        # Seed 001: prompt turn latency, and whether a cancel was honoured.
        metrics.observe("prompt_turn_seconds", time.monotonic() - started)
        # The agent ignored a cancel past cancelGrace: the turn was given up and the
        # connection retired; its run is retired below (the next turn resumes the session).
        retire = result.cancel_honoured is False and not live.alive
        if _cancel_requested(job):  # set by a cancel that arrived during the turn
            honoured = result.stop_reason == "cancelled" and not retire
            metrics.incr("cancel_total", outcome="success" if honoured else "not-honoured")
            job.cancel_outcome = {
                "honoured": honoured,
                "agentRetired": retire,
                "stopReason": result.stop_reason,
            }
            if retire:
                job.cancel_outcome["graceS"] = self.settings.cancel_grace
        job.finish(
            {
                "stopReason": result.stop_reason,
                "sessionId": live.session_id,
                "permissionDenied": result.permission_denied,
                "result": result.result,
                **({"cancel": job.cancel_outcome} if job.cancel_outcome else {}),
            }
        )
        self._record_turn(job, result.stop_reason)
        self.to_retire = live if retire else None

    async def _hold_while_limited(self, job: Job) -> None:
        """Hold the turn until a known rate-limit reset, rather than have it refused too.

        Only when the agent reported when the limit resets, the wait fits the owner's
        ``rate_limit_hold`` (config ``rateLimitHold``, 0 = never hold) and the caller's own
        deadline; otherwise the turn goes to the agent at once, as any other. A cancel
        (or the caller leaving, or shutdown) ends the hold; the turn is then never sent.
        """
        wait = self.rate_limit.hold_for(time.time())
        if not 0 < wait <= self.settings.rate_limit_hold:
            return
        end = time.monotonic() + wait
        if job.deadline is not None and end > job.deadline:
            return
        self.rate_limit.holding = job.request_id
        try:
            # cancel_requested is a plain flag the admission sets (no event to wait on).
            while not job.cancel_requested and (left := end - time.monotonic()) > 0:  # noqa: ASYNC110
                await asyncio.sleep(min(HOLD_POLL_S, left))
        finally:
            self.rate_limit.holding = None

    async def _set_mode(self, job: Job) -> None:
        live = await self._ensure(job)
        mode = str(job.env.payload["modeId"])
        await live.conn.set_mode(live.session_id, mode)
        modes = live.session_result.get("modes")
        if isinstance(modes, dict):
            modes["currentModeId"] = mode
        self.registry.update_session(self.key, desired_mode=mode)
        job.finish({"action": "mode_set", "modeId": mode})
        self.record("mode_set", {"modeId": mode}, job.request_id)

    async def _start_agent(self, job: Job) -> None:
        """Bring the agent up (if it is not) and say which ACP session it serves."""
        live = await self._ensure(job)
        job.finish(
            {
                "action": "agent_started",
                "acpSessionId": live.session_id,
                "resumed": live.resumed,
                "forkedFrom": live.forked_from,
                "agentPid": live.proc.pid,
                "agentCapabilities": live.conn.agent_capabilities,
                # What the agent's session/new (load, resume) said, kept current by
                # set_mode / set_config_option: what `tether acp` answers its client.
                **{
                    k: live.session_result[k]
                    for k in ("modes", "configOptions", "models")
                    if live.session_result.get(k) is not None
                },
            }
        )

    async def _set_config_option(self, job: Job) -> None:
        live = await self._ensure(job)
        config_id = str(job.env.payload["configId"])
        if config_id == "model":  # acpx: `set model X` is model control, whatever the id
            config_id = model_option_id(live.session_result) or config_id
        value = config_value(live.session_result, config_id, job.env.payload["value"])
        answer = await live.conn.set_config_option(live.session_id, config_id, value)
        options = answer.get("configOptions") if isinstance(answer, dict) else None
        if isinstance(options, list):
            live.session_result["configOptions"] = options  # the agent's current values
        session = self.registry.session(self.key)
        desired = dict(session.desired_config if session else {})
        desired[config_id] = value
        self.registry.update_session(self.key, desired_config=desired)
        self.record("config_set", {"configId": config_id, "value": value}, job.request_id)
        job.finish(
            {
                "action": "config_set",
                "configId": config_id,
                "value": value,
                "configOptions": options,
            }
        )

    def _record_turn(self, job: Job, stop_reason: str) -> None:
        # last_prompt_at reaches the registry with the owner's next status write
        self.last_stop_reason = stop_reason


def _ms_since(start: float) -> float:
    return round((time.monotonic() - start) * 1000, 1)


def _cancel_requested(job: Job) -> bool:
    # A call, not the attribute: a cancel can set it while the turn is awaited, after
    # the early check above (which would otherwise narrow it to False for mypy).
    return job.cancel_requested


def config_value(session_result: dict[str, Any], config_id: str, value: Any) -> Any:
    """``value`` as the agent's option ``config_id`` takes it.

    The CLI passes words (``tether set fast true``); the agent's ``configOptions`` (from
    ``session/new``, ``load``, ``resume``, ``fork``) say the option's ``type``: a
    ``boolean`` option gets ``true``/``false`` as booleans (sent ``type: "boolean"``), a
    ``select`` option gets the word unchanged. An option the agent did not list is sent as
    given.

    Raises:
        UsageError: a boolean option given something other than true/false.
    """
    options = session_result.get("configOptions")
    kind = None
    for option in options if isinstance(options, list) else ():
        if isinstance(option, dict) and option.get("id") == config_id:
            kind = option.get("type")
    if kind == "boolean" and isinstance(value, str):
        word = value.strip().lower()
        if word not in ("true", "false"):
            raise UsageError(f"{config_id} is a boolean option: give true or false, not {value!r}")
        return word == "true"
    if kind == "select" and isinstance(value, bool):
        return "true" if value else "false"
    return value
