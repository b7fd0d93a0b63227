"""``cancel``, ``set-mode``, ``set`` and ``status``: one control request to the session."""

from __future__ import annotations

from tether import operations
from tether.cli._session_flags import _call_deadline, _key, _later_flags, _no_session_hint
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
        return show_cancel(ctx, result)
    if command == "set-mode":
        mode = mode_word(ctx)
        result = _set(ctx, key, lambda how: operations.set_mode(key, mode, **how))
        return show_set(ctx, result)
    if command == "set":
        config_id, raw = config_words(ctx)
        # The word as typed: the owner knows the option's type from the agent
        # (a boolean option takes true/false as a boolean; a select keeps the word).
        result = _set(
            ctx, key, lambda how: operations.set_config_option(key, config_id, raw, **how)
        )
        return show_set(ctx, result)
    raise UsageError(f"unknown command {command}")


def _set(ctx: Any, key: str, call: Any) -> dict[str, Any]:
    """One control (:mod:`tether.operations.controlling`) within ``--timeout``, an owner
    started now taking this call's flags."""
    try:
        return call({"deadline": _call_deadline(ctx), "options": _later_flags(ctx)})  # type: ignore[no-any-return]
    except NoSession:
        raise _no_session_hint(ctx) from None


def mode_word(ctx: Any) -> str:
    """``set-mode``'s MODE."""
    if len(ctx.inv.words) != 1:
        raise UsageError("usage: tether set-mode [-s NAME] MODE")
    return str(ctx.inv.words[0])


def config_words(ctx: Any) -> tuple[str, str]:
    """``set``'s KEY and VALUE."""
    if len(ctx.inv.words) != 2:
        raise UsageError("usage: tether set [-s NAME] KEY VALUE")
    return str(ctx.inv.words[0]), str(ctx.inv.words[1])


def show_set(ctx: Any, result: dict[str, Any]) -> int:
    """``set-mode``'s and ``set``'s output of their result."""
    if ctx.inv.command == "set-mode":
        ctx.output.control(result, text=f"mode set: {ctx.inv.words[0]}", quiet=ctx.inv.words[0])
    else:
        config_id, raw = ctx.inv.words
        ctx.output.control(result, text=f"{config_id} set: {raw}", quiet=raw)
    return 0


def _status(ctx: Any, key: str) -> int:
    return show_status(ctx, operations.status(key))


def show_status(ctx: Any, snapshot: dict[str, Any]) -> int:
    """``status``'s output of a session's status snapshot."""
    from tether.cli import _render

    ctx.output.control(snapshot, text=_render.fields(snapshot), quiet=str(snapshot.get("status")))
    return 0


def show_cancel(ctx: Any, result: dict[str, Any]) -> int:
    """``cancel``'s output of its result."""
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
