"""``cancel``, ``set-mode``, ``set`` and ``status``: one control request to the session."""

from __future__ import annotations

from tether import operations
from tether.cli._session_cmds import (
    _call_deadline,
    _key,
    _no_session_hint,
    _remaining_ms,
    connect_or_start,
)
from tether.errors import (
    NoSession,
    UsageError,
)

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


def control(ctx: Any) -> int:
    command = ctx.inv.command
    key = _key(ctx)
    if command == "status":
        return _status(ctx, key)
    if command == "cancel":
        try:
            result = operations.cancel(key, ctx.inv.request, wait=True)
        except NoSession:
            raise _no_session_hint(ctx) from None
        reason = result.get("reason")
        if result.get("cancelled"):
            text = _cancelled_text(result)
        elif reason in (None, "", "no running owner", "nothing to cancel"):
            text = "nothing to cancel"
        else:
            text = f"nothing to cancel ({reason})"
        ctx.output.control(
            result, text=text, quiet="cancelled" if result.get("cancelled") else "nothing"
        )
        return 0
    if command == "set-mode":
        if len(ctx.inv.words) != 1:
            raise UsageError("usage: tether set-mode [-s NAME] MODE")
        deadline = _call_deadline(ctx)
        with connect_or_start(ctx, key, deadline, "set") as conn:
            result = conn.request(
                "set_mode", {"modeId": ctx.inv.words[0]}, deadline_ms=_remaining_ms(deadline)
            )
        ctx.output.control(result, text=f"mode set: {ctx.inv.words[0]}", quiet=ctx.inv.words[0])
        return 0
    if command == "set":
        if len(ctx.inv.words) != 2:
            raise UsageError("usage: tether set [-s NAME] KEY VALUE")
        config_id, raw = ctx.inv.words
        deadline = _call_deadline(ctx)
        with connect_or_start(ctx, key, deadline, "set") as conn:
            # The word as typed: the owner knows the option's type from the agent
            # (a boolean option takes true/false as a boolean; a select keeps the word).
            result = conn.request(
                "set_config_option",
                {"configId": config_id, "value": raw},
                deadline_ms=_remaining_ms(deadline),
            )
        ctx.output.control(result, text=f"{config_id} set: {raw}", quiet=raw)
        return 0
    raise UsageError(f"unknown command {command}")


def _status(ctx: Any, key: str) -> int:
    snapshot = operations.status(key)
    from tether.cli import _render

    ctx.output.control(snapshot, text=_render.fields(snapshot), quiet=str(snapshot.get("status")))
    return 0


def _cancelled_text(result: dict[str, Any]) -> str:
    """``cancelled``, and whether the agent honoured it (the owner waited for the turn)."""
    if result.get("agentRetired"):
        grace = result.get("graceS")
        within = f" within {grace:g} s" if isinstance(grace, int | float) else ""
        return (
            f"cancelled; the agent did not end the turn{within}, so it was restarted"
            " (the session resumes on the next prompt)"
        )
    if result.get("honoured") is False:
        return f"cancelled; the agent ended the turn anyway ({result.get('stopReason')})"
    if result.get("honoured"):
        return "cancelled; the agent ended the turn"
    return "cancelled"
