"""``prompt``: send one turn to the session's owner and render its frames as they come.

Presentation over :mod:`tether.operations.prompting` (the payload, the submit, the turn's
loop -- a caller cut off mid-turn finishes it from the session's journal -- and the
caller-leaves rule): Ctrl-C cancels this turn, shows how it ended, and exits 130.
"""

from __future__ import annotations

import time

from tether import operations
from tether.cli._session_flags import _call_deadline, _key, _policy, _remaining_ms, connect_or_start
from tether.errors import Interrupted, PermissionDenied, UsageError
from tether.ipc import protocol
from tether.ipc.client import OwnerConnection

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


def _asker(ctx: Any, key: str) -> Any:
    """The terminal asker of a prompt whose stdin and stderr are a terminal, else None."""
    import sys

    if ctx.inv.no_wait or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    from tether.cli._questions import Asker

    out = ctx.output

    def hold(on: bool) -> None:
        # While a question waits, the turn's output stays in the batch (not garbled
        # into the question); it is written once the question is resolved.
        if on:
            out.flush()
            if out.spinner is not None:
                out.spinner.clear()
            out.hold = True
        else:
            out.hold = False
            out.flush()

    return Asker(key, tty=True, hold=hold)


def _render(ctx: Any, asker: Any = None, worked: list[int] | None = None) -> Any:
    from tether.cli._retry import shows_work  # here, not per frame: a tenth of a stream

    out = ctx.output

    def on_frame(frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if asker is not None and asker.on_frame(frame):
            return
        if kind == "progress":  # the owner bringing the agent up: text banners only
            if ctx.fmt == "text":
                out.banner(str(frame.get("message")))
            return
        if kind == "update":
            acp = frame.get("frame")
            if worked is not None and isinstance(acp, dict):
                worked[0] += shows_work(acp)
            if isinstance(acp, dict):
                out.frame(str(frame.get("direction", "in")), acp)
        elif kind == "permission" and ctx.fmt == "text":
            request = frame.get("request") or {}
            tool = request.get("toolCall") or {}
            picked = (frame.get("outcome") or {}).get("outcome") or {}
            chosen = picked.get("optionId") or picked.get("outcome")
            out.banner(f"permission {tool.get('title') or tool.get('toolCallId')}: {chosen}")
        elif kind == "notice":
            out.control(frame.get("notice") or {}, text=None)
            if ctx.fmt == "text":
                out.banner(str(frame.get("message")))
        elif kind in ("session_ended", "agent_run_ended"):
            # The session ended (closed by someone), or the agent run ended inside it.
            event = frame.get("event") or {}
            out.control({"action": kind, **event}, text=None)
            if ctx.fmt == "text":
                what = "session ended" if kind == "session_ended" else "agent run ended"
                out.banner(f"{what}: {event.get('reason')} ({event.get('message')})")

    return on_frame


def prompt(ctx: Any, text: str) -> int:
    if not text.strip():
        raise UsageError("prompt needs text (arguments, -f FILE, or stdin)")
    from tether.cli import _retry

    _retry.creation_only(ctx)
    return _retry.with_retries(ctx, lambda worked: _prompt_once(ctx, text, worked))


def _prompt_once(ctx: Any, text: str, worked: list[int]) -> int:
    started = time.monotonic()
    key = _key(ctx)
    # --timeout bounds the whole call: connecting, starting an owner, queueing, the turn.
    deadline = _call_deadline(ctx)
    conn = connect_or_start(ctx, key, deadline)
    deadline_ms = _remaining_ms(deadline)
    asker = _asker(ctx, key)
    payload = operations.prompt_payload(
        [{"type": "text", "text": text}],
        client="cli",
        wait=not ctx.inv.no_wait,
        # Only an explicit flag overrides the mode the session was created with.
        permission_mode=ctx.inv.permissions,
        permission_policy=_policy(ctx) if ctx.inv.permission_policy else None,
        control=asker is not None,  # we answer this turn's questions on the terminal
    )
    max_bytes = protocol.prompt_max_bytes(ctx.config)
    with conn:
        if ctx.inv.model:  # acpx: --model selects the model (the agent's model option)
            operations.set_config_option(key, "model", ctx.inv.model, conn=conn, deadline=deadline)
        if ctx.inv.no_wait:
            rid, _ack = operations.admit(
                conn, payload, deadline_ms=deadline_ms, max_bytes=max_bytes
            )
            ctx.output.control(
                {"action": "prompt_queued", "requestId": rid, "sessionKey": key},
                text=f"[queued] {rid}",
                quiet=rid,
            )
            return 0
        rid = operations.submit(conn, payload, deadline_ms=deadline_ms, max_bytes=max_bytes)
        render = _render(ctx, asker, worked)
        ctx.output.batch = True
        conn.before_block = ctx.output.flush
        from tether.cli import _spinner

        spinner = _spinner.for_output(ctx.output)
        if spinner is not None:
            conn.idle_tick = spinner.tick
            conn.idle_interval = _spinner.TICK_S
        try:
            if asker is None:
                end = operations.run_turn(
                    conn, key, rid, render, deadline_ms=deadline_ms, door="cli"
                )
            else:
                with asker:
                    end = operations.run_turn(
                        conn, key, rid, render, deadline_ms=deadline_ms, door="cli"
                    )
        except KeyboardInterrupt:
            return _interrupt(ctx, conn, key, rid, render)
    ctx.output.done(str(end.result.get("stopReason")), time.monotonic() - started)
    denied = end.result.get("permissionDenied")
    if denied and ctx.non_interactive == "fail":
        raise PermissionDenied(f"{denied} permission request(s) were denied")
    return 0


def _interrupt(ctx: Any, conn: OwnerConnection, key: str, rid: str, render: Any) -> int:
    """Ctrl-C on `prompt` cancels *this* turn (or dequeues it), then exits 130: the
    caller-leaves rule (:mod:`tether.operations.prompting`), with ``show_end`` -- we show
    how the turn ended before we go."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C leaves at once
    try:
        result = operations.leave_turn(conn, key, rid, on_frame=render, show_end=True)
        ctx.output.done(str((result or {}).get("stopReason")))
    except Exception:
        pass  # the turn's own outcome no longer matters: we were interrupted
    raise Interrupted("interrupted; the turn was cancelled")
