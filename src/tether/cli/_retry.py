"""``--prompt-retries N``: which prompt failures are worth sending again (acpx's rule).

A turn is retried only when it failed with the agent's JSON-RPC ``-32603`` (internal
error: usually a model API hiccup) or ``-32700`` (parse error), and only when nothing of
it reached the user yet (no update seen: a retry must not repeat visible work). Rate
limits (``RATE_LIMITED``) are never retried here: the owner holds turns until the reset.
The delay doubles from 1 s, at most 10 s. Standard library only: ``prompt`` is a thin path.
"""

from __future__ import annotations

TRANSIENT_CODES = (-32603, -32700)

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
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


# Updates that show work to the user: after one of them, a retry would repeat it.
_WORK = frozenset(
    {"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}
)


def shows_work(frame: dict[str, object]) -> bool:
    """Whether the ACP ``frame`` is an update that shows the turn's work (text, tools, plan)."""
    if frame.get("method") != "session/update":
        return False
    params = frame.get("params")
    update = params.get("update") if isinstance(params, dict) else None
    return isinstance(update, dict) and update.get("sessionUpdate") in _WORK
