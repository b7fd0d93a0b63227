"""``prompt`` and the journal's commands against a remote Tether.

``prompt``: ``POST …/prompt`` queues the turn (``202``, its ``requestId`` and a stream
cursor ``fromSeq`` that includes the whole turn), then the session's event stream from
that cursor is rendered as the local ``prompt`` renders the frames its owner relays --
the turn's own ACP frames, through the same renderer -- until the turn's
``turn_ended``. A dropped stream is resumed with ``Last-Event-ID``
(:meth:`~tether.remote.client.RemoteClient.follow`): nothing is shown twice, nothing is
missed. Ctrl-C cancels this turn (``POST …/cancel`` naming it), waits a moment for its
end, and exits 130, as locally.

``sessions history | read | watch | export``: the gateway's ``history``, ``transcript``,
``events`` and ``export`` routes, shown by the local commands' own renderers.
"""

from __future__ import annotations

import time

from tether.errors import Interrupted, SessionClosed, UsageError

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

    from tether.remote.client import RemoteClient
    from tether.remote.sse import Event

CANCEL_WAIT_S = 3.0  # after Ctrl-C, how long we wait for the turn's end (as locally)


class _Turn:
    """Turn ``rid`` read from the session's events: its frames rendered, its end kept."""

    def __init__(self, rid: str, render: Any) -> None:
        self.rid = rid
        self.render = render
        self.ended: dict[str, Any] | None = None
        self.last_seq = 0  # the last entry seen: a cancel's wait resumes after it

    def __call__(self, event: Event) -> bool:
        from tether import _fastjson

        if event.event != "message":
            return False
        if event.id is not None:
            self.last_seq = event.id
        entry = _fastjson.loads(event.data)
        kind = entry.get("kind")
        if entry.get("requestId") == self.rid:
            if kind == "acp":
                frame = {"type": "update", "direction": entry.get("direction")}
                self.render({**frame, "frame": entry.get("frame")})
            elif kind == "turn_ended":
                self.ended = entry
                return True
            return False
        if kind in ("session_ended", "agent_run_ended"):
            self.render({"type": kind, "event": entry})
            if kind == "session_ended":
                self.ended = {"sessionEnded": entry}
                return True
        return False

    def result(self) -> dict[str, Any]:
        """The turn's result (``stopReason``), or its error raised."""
        from tether.errors import OwnerLost, error_from_wire

        ended = self.ended or {}
        if "stopReason" in ended:
            return {"stopReason": ended["stopReason"]}
        if "error" in ended:  # the class the owner raised, when it journaled it
            raise error_from_wire({"message": str(ended["error"]), "type": ended.get("errorType")})
        if "sessionEnded" in ended:
            reason = ended["sessionEnded"].get("reason")
            raise SessionClosed(f"the session ended ({reason}) before the turn did")
        raise OwnerLost(
            "the event stream ended before the turn did; its outcome is unknown, do not"
            " resubmit automatically",
            request_id=self.rid,
        )


def prompt(ctx: Any, client: RemoteClient, text: str) -> int:
    """``prompt`` on a remote session; its exit status."""
    from tether.cli import _remote
    from tether.cli._prompt_cmd import _render
    from tether.remote import core

    if not text.strip():
        raise UsageError("prompt needs text (arguments, -f FILE, or stdin)")
    started = time.monotonic()
    sid = _remote.resolve(ctx, client)
    if ctx.inv.model:  # acpx: --model selects the model (the agent's model option)
        client.call(core.set_config(sid, "model", ctx.inv.model))
    timeout_ms = None if ctx.timeout is None else max(1, int(ctx.timeout * 1000))
    call = core.prompt(sid, text, timeout_ms=timeout_ms, permissions=ctx.inv.permissions)
    queued = client.call(call)
    rid = str(queued["requestId"])
    if ctx.inv.no_wait:
        ctx.output.control(
            {"action": "prompt_queued", "requestId": rid, "sessionKey": sid},
            text=f"[queued] {rid}",
            quiet=rid,
        )
        return 0
    turn = _Turn(rid, _render(ctx))
    turn.last_seq = int(queued["fromSeq"]) - 1
    try:
        client.follow(sid, turn, from_seq=int(queued["fromSeq"]))
    except KeyboardInterrupt:
        return _interrupt(ctx, client, sid, turn)
    ctx.output.flush()
    result = turn.result()
    ctx.output.done(str(result.get("stopReason")), time.monotonic() - started)
    return 0


def _interrupt(ctx: Any, client: RemoteClient, sid: str, turn: _Turn) -> int:
    """Ctrl-C: cancel this turn (or dequeue it), show its end if it comes soon, exit 130."""
    import signal

    from tether.remote import core

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C leaves at once
    try:
        client.call(core.cancel(sid, turn.rid))
        deadline = time.monotonic() + CANCEL_WAIT_S
        client.follow(sid, turn, from_seq=turn.last_seq + 1, deadline=deadline)
        if turn.ended is not None:
            ctx.output.done(str(turn.result().get("stopReason")))
    except Exception:
        pass  # the turn's own outcome no longer matters: we were interrupted
    raise Interrupted("interrupted; the turn was cancelled")


def journal(ctx: Any, client: RemoteClient, sid: str) -> int:
    """``sessions history | read | watch | export`` of a remote session."""
    from tether.remote import core

    sub = ctx.inv.subcommand
    if sub == "history":
        from tether.cli._journal_cmds import show_history

        limit = ctx.inv.limit if ctx.inv.limit is not None else 20
        return show_history(ctx, sid, client.call(core.history(sid, limit))["turns"])
    if sub == "read":
        return _read(ctx, client.call(core.transcript(sid, ctx.inv.tail))["turns"], sid)
    if sub == "export":
        return _export(ctx, client, sid)
    return _watch(ctx, client, sid)


def _read(ctx: Any, turns: list[dict[str, Any]], sid: str) -> int:
    """The conversation, shown as the local ``read`` shows the journal's entries."""
    from tether.cli._journal_cmds import _TextView

    if ctx.fmt == "json":
        ctx.output.control({"action": "transcript", "sessionKey": sid, "turns": turns})
        return 0
    view = _TextView(ctx)
    for turn in turns:
        text = {"type": "text", "text": turn.get("prompt", "")}
        prompt = {"method": "session/prompt", "params": {"prompt": [text]}}
        view.show({"kind": "acp", "direction": "out", "frame": prompt})
        updates = [{"sessionUpdate": "tool_call", **call} for call in turn.get("toolCalls") or []]
        if turn.get("text"):
            chunk = {"type": "text", "text": turn["text"]}
            updates.append({"sessionUpdate": "agent_message_chunk", "content": chunk})
        for update in updates:
            frame = {"method": "session/update", "params": {"update": update}}
            view.show({"kind": "acp", "direction": "in", "frame": frame})
        if turn.get("stopReason") or turn.get("error"):
            ended = {"stopReason": turn.get("stopReason"), "error": turn.get("error")}
            view.show({"kind": "turn_ended", **ended})
    if not turns:
        ctx.output.control({}, text="no conversation yet")
    ctx.output.flush()
    return 0


def _watch(ctx: Any, client: RemoteClient, sid: str) -> int:
    """The session's entries as ``sessions watch`` shows them (replay, then live)."""
    import sys

    from tether import _fastjson
    from tether.cli._journal_cmds import _TextView

    inv = ctx.inv
    if inv.from_seq is not None and inv.tail is not None:
        raise UsageError("--from and --tail cannot be combined")
    view = _TextView(ctx)
    write = sys.stdout.write
    if inv.no_follow:
        return _watch_stored(ctx, client, sid, view)

    def show(event: Event) -> bool:
        if event.event == "message":
            if ctx.fmt == "json":
                write(event.data + "\n")
            else:
                view.show(_fastjson.loads(event.data))
            ctx.output.flush()
        return False

    try:
        client.follow(sid, show, from_seq=inv.from_seq, tail=inv.tail)
    except KeyboardInterrupt:
        pass
    ctx.output.flush()
    sys.stdout.flush()
    return 0


def _watch_stored(ctx: Any, client: RemoteClient, sid: str, view: Any) -> int:
    """``watch --no-follow``: the stored entries from the cursor to the end (the export)."""
    import sys

    from tether import _fastjson
    from tether.remote import core

    lines = [line for line in client.stream_lines(core.export(sid)) if line]
    if ctx.inv.tail is not None:
        lines = lines[len(lines) - ctx.inv.tail :] if ctx.inv.tail else []
    for line in lines:
        entry = _fastjson.loads(line)
        if ctx.inv.from_seq is not None and int(entry.get("seq", 0)) < ctx.inv.from_seq:
            continue
        if ctx.fmt == "json":
            sys.stdout.write(line + "\n")
        else:
            view.show(entry)
    ctx.output.flush()
    sys.stdout.flush()
    return 0


def _export(ctx: Any, client: RemoteClient, sid: str) -> int:
    """``sessions export``: the journal as NDJSON, to stdout or ``-o FILE`` (atomically)."""
    import os
    import sys

    from tether.remote import core

    path = ctx.inv.output_file
    lines = (line for line in client.stream_lines(core.export(sid)) if line)
    if not path or path == "-":
        for line in lines:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return 0
    tmp = f"{path}.tmp-{os.getpid()}"
    count = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
                count += 1
        os.replace(tmp, path)  # a partial export never takes the name
    except OSError as exc:
        from tether.errors import TetherError

        raise TetherError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    ctx.output.banner(f"exported {count} entries to {path}")
    return 0
