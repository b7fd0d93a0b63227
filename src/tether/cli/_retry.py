"""``prompt``'s acpx flags: ``--prompt-retries`` and the session options' place.

**Retries.** A turn is sent again only when it failed with the agent's JSON-RPC
``-32603`` (internal error: usually a model API hiccup) or ``-32700`` (parse error), and
only when nothing of it reached the user yet (no update showing work: a retry must not
repeat visible work) -- acpx's rule. Rate limits (``RATE_LIMITED``) are never retried
here: the owner holds turns until the reset. The delay doubles from 1 s, at most 10 s.

**Session options** (``--model``, ``--allowed-tools``, ``--max-turns``, the system prompt)
shape a new ACP session: ``sessions new|ensure`` store them with the session (its owner
applies them at each ``session/new``); ``prompt --model`` selects the model of the running
session (``set model``); the others are refused on ``prompt``, naming ``sessions new``.

Standard library only: ``prompt`` is a thin path.
"""

from __future__ import annotations

import time

TRANSIENT_CODES = (-32603, -32700)
# Updates that show work to the user: after one of them, a retry would repeat it.
_WORK = frozenset(
    {"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}
)
_FLAGS = {
    "allowedTools": "--allowed-tools",
    "maxTurns": "--max-turns",
    "systemPrompt": "--system-prompt",
    "appendSystemPrompt": "--append-system-prompt",
}

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from tether.errors import TetherError


def retryable(exc: TetherError, *, updates_seen: int) -> bool:
    """Whether the failed turn ``exc`` may be sent again (see the module docstring)."""
    from tether.errors import AgentRequestError, RateLimited

    if updates_seen or not isinstance(exc, AgentRequestError) or isinstance(exc, RateLimited):
        return False
    code = (exc.acp or {}).get("code")
    return code in TRANSIENT_CODES


def delay(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based)."""
    return float(min(2**attempt, 10))


def shows_work(frame: dict[str, object]) -> bool:
    """Whether the ACP ``frame`` is an update that shows the turn's work (text, tools, plan)."""
    if frame.get("method") != "session/update":
        return False
    params = frame.get("params")
    update = params.get("update") if isinstance(params, dict) else None
    return isinstance(update, dict) and update.get("sessionUpdate") in _WORK


def with_retries(ctx: Any, once: Callable[[list[int]], int]) -> int:
    """Run ``once(worked)`` -- one turn, counting updates that showed work into
    ``worked[0]`` -- again after a retryable failure, up to ``ctx.prompt_retries`` times."""
    from tether.errors import TetherError

    attempt = 0
    while True:
        worked = [0]
        try:
            return once(worked)
        except TetherError as exc:
            if attempt >= ctx.prompt_retries or not retryable(exc, updates_seen=worked[0]):
                raise
            wait = delay(attempt)
            attempt += 1
            ctx.output.banner(
                f"prompt failed ({exc}); retry {attempt}/{ctx.prompt_retries} in {wait:g} s"
            )
            time.sleep(wait)


def agent_options(ctx: Any) -> dict[str, Any]:
    """The owner option ``agent_options``: the session options of ``sessions new|ensure``,
    only when given (they replace the stored ones whole)."""
    options = ctx.inv.session_options()
    return {"agent_options": options} if options and ctx.inv.command == "sessions" else {}


def creation_only(ctx: Any) -> None:
    """On ``prompt``: refuse the options that only a new session can take, naming where."""
    given = [_FLAGS[name] for name in ctx.inv.session_options() if name in _FLAGS]
    if given:
        from tether.errors import UsageError

        raise UsageError(
            f"{', '.join(given)}: set when a session is created; use"
            f" `tether sessions new {given[0]} ...` (or `tether exec`), then prompt"
        )
