"""``prompt``: send one turn to the session's owner and render its frames as they come.

A caller cut off mid-turn (a slow reader let go, a lost owner) finishes the turn from the
session's journal; Ctrl-C cancels this turn and exits 130.
"""

from __future__ import annotations

import time

from tether import operations
from tether.cli._session_flags import _call_deadline, _key, _policy, _remaining_ms, connect_or_start
from tether.errors import (
    Interrupted,
    OwnerLost,
    PermissionDenied,
    UsageError,
    WatchLagged,
)
from tether.ipc import protocol
from tether.ipc.client import OwnerConnection

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any
CANCEL_WAIT_S = 3.0  # after Ctrl-C on `prompt`, how long we wait for the `cancelled` answer


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
    payload = {
        "prompt": [{"type": "text", "text": text}],
        "wait": not ctx.inv.no_wait,
        "client": "cli",
        # Only an explicit flag overrides the mode the session was created with.
        **({"permissionMode": ctx.inv.permissions} if ctx.inv.permissions else {}),
        **({"permissionPolicy": _policy(ctx)} if ctx.inv.permission_policy else {}),
    }
    asker = _asker(ctx, key)
    if asker is not None:
        payload["control"] = True  # we answer this turn's questions on the terminal
    with conn:
        if ctx.inv.model:  # acpx: --model selects the model (the agent's model option)
            conn.request(
                "set_config_option",
                {"configId": "model", "value": ctx.inv.model},
                deadline_ms=_remaining_ms(deadline),
            )
        rid = conn.send(
            "prompt",
            payload,
            deadline_ms=deadline_ms,
            max_bytes=protocol.prompt_max_bytes(ctx.config),
        )
        if ctx.inv.no_wait:
            conn.wait(rid, until_ack=True)
            ctx.output.control(
                {"action": "prompt_queued", "requestId": rid, "sessionKey": key},
                text=f"[queued] {rid}",
                quiet=rid,
            )
            return 0
        shown = _render(ctx, asker, worked)
        seen = [0]  # the journal seq of the last frame relayed to us

        def render(frame: dict[str, Any]) -> None:
            seq = frame.get("seq")
            if isinstance(seq, int):
                seen[0] = seq
            shown(frame)

        ctx.output.batch = True
        conn.before_block = ctx.output.flush
        generation = conn.generation
        from tether.cli import _spinner

        spinner = _spinner.for_output(ctx.output)
        if spinner is not None:
            conn.idle_tick = spinner.tick
            conn.idle_interval = _spinner.TICK_S
        try:
            if asker is None:
                result = conn.wait(rid, on_frame=render, deadline_ms=deadline_ms)
            else:
                with asker:
                    result = conn.wait(rid, on_frame=render, deadline_ms=deadline_ms)
        except KeyboardInterrupt:
            return _interrupt(ctx, conn, key, rid, render)
        except WatchLagged:
            # We read too slowly and the owner let go of us; the turn went on. Its
            # frames are all in the journal: the rest of it comes from there.
            result = _finish_from_journal(ctx, key, rid, seen[0], shown, follow=True)
        except OwnerLost:
            # Cut off: a slow reader whose lagged frame was lost with its buffer, or the
            # owner died. The journal knows which: the turn's end, if it was recorded.
            owner_alive = operations.serving_generation(key) == generation
            result = _finish_from_journal(ctx, key, rid, seen[0], shown, follow=owner_alive)
    ctx.output.done(str(result.get("stopReason")), time.monotonic() - started)
    if result.get("permissionDenied") and ctx.non_interactive == "fail":
        raise PermissionDenied(
            f"{result.get('permissionDenied')} permission request(s) were denied"
        )
    return 0


def _finish_from_journal(
    ctx: Any, key: str, rid: str, last_seq: int, render: Any, *, follow: bool
) -> dict[str, Any]:
    """The rest of turn ``rid`` after ``last_seq``, read from the session's journal (the
    owner let go of us mid-turn): its frames rendered as if relayed, and its result (or
    its error, raised). ``follow``: its owner still runs it, so wait for its end."""
    from tether import _fastjson
    from tether.errors import error_from_wire
    from tether.state.journal.follow import Follower, follow_session

    outcome: dict[str, Any] = {}
    followers: list[Follower] = []

    def emit(_seq: int, line: str) -> None:
        entry = _fastjson.loads(line)
        if entry.get("requestId") == rid:
            if entry.get("kind") == "acp":
                render(
                    {
                        "type": "update",
                        "direction": entry.get("direction"),
                        "frame": entry.get("frame"),
                    }
                )
                return
            if entry.get("kind") == "turn_ended":
                outcome.update(entry)
        elif entry.get("kind") == "session_ended":
            outcome["sessionEnded"] = entry
        if outcome:
            for follower in followers:
                follower.interrupt()

    follow_session(
        key, emit, from_seq=last_seq + 1, follow=follow, on_start=followers.append, door="cli"
    )
    ctx.output.flush()
    if "stopReason" in outcome:
        return {"stopReason": outcome["stopReason"]}
    if "error" in outcome:
        raise error_from_wire({"message": str(outcome["error"]), "type": outcome.get("errorType")})
    raise OwnerLost(
        "the owner went away before the request finished; the outcome is unknown, do not"
        " resubmit automatically",
        request_id=rid,
    )


def _interrupt(ctx: Any, conn: OwnerConnection, key: str, rid: str, render: Any) -> int:
    """Ctrl-C on `prompt` cancels *this* turn (or dequeues it), then exits 130."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C leaves at once
    try:
        operations.cancel(key, rid)
        conn.sock.settimeout(CANCEL_WAIT_S)
        result = conn.wait(rid, on_frame=render)
        ctx.output.done(str(result.get("stopReason")))
    except Exception:
        pass  # the turn's own outcome no longer matters: we were interrupted
    raise Interrupted("interrupted; the turn was cancelled")
