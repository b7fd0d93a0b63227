"""Session commands: ``prompt``, ``cancel``, ``set-mode``, ``set``, ``status``, ``sessions``.

What a caller can do to a session lives in :mod:`tether.operations` (shared with the
library); this module turns flags into calls and answers into output. The warm path --
a live owner exists -- talks IPC v2 with the blocking client: no asyncio, no sqlite3.
"""

from __future__ import annotations

import time

from tether import operations, sessions
from tether.cli._retry import agent_options
from tether.errors import (
    Interrupted,
    NoSession,
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


def _key(ctx: Any) -> str:
    return sessions.session_key(
        ctx.agent_scope, str(ctx.cwd), ctx.inv.session or sessions.DEFAULT_NAME
    )


session_key_of = _key


def _policy(ctx: Any) -> str | None:
    """``--permission-policy``: a mode's name, or a file's absolute path once it loads."""
    spec = ctx.inv.permission_policy
    if not spec:
        return None
    import os

    from tether.acp import policy

    if spec.lstrip().startswith("{"):
        raise UsageError(
            "--permission-policy takes a policy file (TOML rules) or a mode's name"
            " (approve-all, approve-reads, deny-all), not inline JSON: write the rules"
            " to a file (README: permission policies)"
        )
    if spec not in {m.value for m in policy.PermissionMode}:
        spec = os.path.abspath(os.path.expanduser(spec))
    try:
        policy.load_policy(spec)
    except policy.PolicyInvalid as exc:
        raise UsageError(str(exc)) from None
    return str(spec)


def _no_session_hint(ctx: Any) -> NoSession:
    name = f" -s {ctx.inv.session}" if ctx.inv.session else ""
    return NoSession(
        f"no session for {ctx.agent_label} in {ctx.cwd}{name}; "
        f"run `tether {ctx.agent_label if ctx.inv.agent else ''} sessions new{name}` "
        f"or `sessions ensure{name}` first".replace("  ", " ")
    )


def _owner_options(ctx: Any) -> dict[str, Any]:
    cfg = ctx.config
    return {
        "permission_mode": ctx.permissions,
        "idle_ttl": ctx.ttl,
        "turn_timeout": cfg.get("turnTimeout"),
        "max_lifetime": cfg.get("ownerMaxLifetime"),
        "queue_max_depth": cfg.get("queueMaxDepth"),
        "liveness_interval": cfg.get("livenessInterval"),
        "handshake_timeout": cfg.get("handshakeTimeout"),
        "rate_limit_hold": cfg.get("rateLimitHold"),
        "unresponsive_after": cfg.get("ownerUnresponsiveAfter"),
        "fs": not ctx.inv.no_fs,
        **terminal_options(ctx),
        "permission_policy": _policy(ctx),
        "auth_policy": ctx.auth_policy,
        **agent_options(ctx),
        **_mcp_options(ctx),
    }


def terminal_options(ctx: Any) -> dict[str, Any]:
    """Agents' terminals: ``--no-terminal`` and the ``terminal*`` config keys."""
    cfg = ctx.config
    return {
        "terminal": not ctx.inv.no_terminal and cfg.get("terminal") is not False,
        "terminal_output_limit": cfg.get("terminalOutputLimit"),
        "terminal_pty": cfg.get("terminalPty") is True,
    }


def _mcp_options(ctx: Any) -> dict[str, Any]:
    """MCP servers for the session's agents: config, ``--mcp-config``, the bridge."""
    cfg = ctx.config
    if not (cfg.get("mcpServers") or ctx.inv.mcp_config):
        return {"mcp_bridge": bool(ctx.inv.mcp_bridge or cfg.get("mcpBridge")), "mcp_servers": []}
    from tether.mcp import bridge  # json: only when servers are configured

    return bridge.options_from(cfg, ctx.inv.mcp_config, ctx.inv.mcp_bridge)


def _later_flags(ctx: Any) -> dict[str, Any] | None:
    """Flags given on this call that an owner started now must use (``--ttl``, permissions)."""
    inv = ctx.inv
    explicit = (
        inv.ttl is not None
        or inv.permissions
        or inv.permission_policy
        or inv.auth_policy
        or agent_options(ctx)
    )
    return _owner_options(ctx) if explicit else None


def connect_or_start(
    ctx: Any, key: str, deadline: float | None = None, action: str = "send"
) -> OwnerConnection:
    """A serving owner for the session (:func:`tether.operations.connect_or_start`).

    Flags given now (``--ttl``, permissions) become a newly started owner's settings.
    ``deadline`` (monotonic) is the end of the caller's ``--timeout``.
    """
    try:
        return operations.connect_or_start(
            key, options=_later_flags(ctx), deadline=deadline, action=action
        )
    except NoSession:
        raise _no_session_hint(ctx) from None


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
    from tether.journal.follow import Follower, follow_session

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

    follow_session(key, emit, from_seq=last_seq + 1, follow=follow, on_start=followers.append)
    ctx.output.flush()
    if "stopReason" in outcome:
        return {"stopReason": outcome["stopReason"]}
    if "error" in outcome:
        raise error_from_wire({"message": str(outcome["error"])})
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


def control(ctx: Any) -> int:
    command = ctx.inv.command
    key = _key(ctx)
    if command == "status":
        return _status(ctx, key)
    if command == "cancel":
        result = operations.cancel(key, ctx.inv.request)
        if result.get("cancelled"):
            text = "cancelled"
        elif result.get("reason") == "no running owner":
            text = "nothing to cancel"
        else:
            text = f"nothing to cancel ({result.get('reason')})"
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


def _call_deadline(ctx: Any) -> float | None:
    """The end of the caller's ``--timeout`` (monotonic), counted from now."""
    return time.monotonic() + ctx.timeout if ctx.timeout is not None else None


def _remaining_ms(deadline: float | None) -> int | None:
    """What is left of ``deadline`` for the owner to enforce (at least 1 ms)."""
    return None if deadline is None else max(1, int((deadline - time.monotonic()) * 1000))


def _status(ctx: Any, key: str) -> int:
    snapshot = operations.status(key)
    from tether.cli import _render

    ctx.output.control(snapshot, text=_render.fields(snapshot), quiet=str(snapshot.get("status")))
    return 0


def sessions_cmd(ctx: Any) -> int:
    sub = ctx.inv.subcommand
    if sub in ("new", "ensure"):
        return _ensure(ctx, fresh=sub == "new")
    if sub == "close":
        return _close(ctx)
    if sub == "terminate":
        return _terminate(ctx)
    if sub == "fork" or (sub == "list" and ctx.inv.agent_sessions):
        from tether.cli import _acp_cmds

        return _acp_cmds.fork(ctx) if sub == "fork" else _acp_cmds.agent_sessions(ctx)
    if sub in ("watch", "read", "history", "export", "prune"):
        from tether.cli import _journal_cmds

        return _journal_cmds.run(ctx, _key(ctx), _no_session_hint(ctx))
    if sub == "list":
        items = operations.list_sessions(include_closed=ctx.inv.all)
        if ctx.inv.filter_cwd is not None:  # acpx's --filter-cwd: one working directory
            import os

            where = os.path.realpath(os.path.expanduser(ctx.inv.filter_cwd))
            items = [s for s in items if os.path.realpath(s["cwd"]) == where]
        ctx.output.control(
            {"action": "sessions", "sessions": items},
            text=_list_text(items, tree=ctx.inv.tree) or "no sessions",
            quiet="\n".join(s["key"] for s in items),
        )
        return 0
    from tether import access
    from tether.cli import _render
    from tether.registry import Registry

    with Registry() as registry:
        key = _key(ctx)
        session = registry.session(key)
        if session is None:
            raise _no_session_hint(ctx)
        access.authorize(key, "status", registry=registry)
        if sub == "show":
            info = operations.describe(session, registry.instance_id)
            ctx.output.control(
                {"action": "session", **info},
                text=_render.fields(info),
                quiet=key,
            )
            return 0
    raise UsageError(f"unknown sessions command {sub}")


def _list_text(items: list[dict[str, Any]], *, tree: bool) -> str:
    """``sessions list`` as text: a table, or with ``--tree`` the ownership forest."""
    if not tree:
        return "\n".join(
            f"{s['name'] or '(default)'}\t{s['state']}\t{s['agentId']}\t{s['cwd']}"
            f"\t{_owner_text(s)}"
            for s in items
        )
    from tether.ownership import tree_lines

    return "\n".join(tree_lines(items))


def _owner_text(item: dict[str, Any]) -> str:
    parent = item.get("parentSessionKey") or item.get("spawnedBy") or item.get("ownerSessionKey")
    text = f"spawned by {parent[:12]}" if parent else "operator"
    return f"{text}, sandboxed" if item.get("sandboxed") else text


def _ensure(ctx: Any, *, fresh: bool) -> int:
    key = _key(ctx)
    name = ctx.inv.session or sessions.DEFAULT_NAME
    conn, created = operations.ensure_session(
        key,
        name=name,
        argv=list(ctx.agent_argv),
        label=ctx.agent_label,
        cwd=str(ctx.cwd),
        options=_owner_options(ctx),
        fresh=fresh,
        override=_later_flags(ctx),
        sandboxed=ctx.inv.sandboxed,
        resume_session=ctx.inv.resume_session,
    )
    generation = conn.generation
    owner_pid = conn.hello.get("ownerPid")
    resumed: dict[str, Any] = {}
    if ctx.inv.resume_session:
        # The agent comes up now, so a conversation it does not know is reported here.
        resumed = operations.resume_agent_session(key, conn)
    else:
        with conn:
            if ctx.inv.model and not created:  # a session that exists: select its model now
                conn.request("set_config_option", {"configId": "model", "value": ctx.inv.model})
                ctx.output.banner(f"model set: {ctx.inv.model}")
    ctx.output.control(
        {
            "action": "session_ensured",
            "sessionKey": key,
            "name": name,
            "created": created,
            "agent": ctx.agent_label,
            "cwd": str(ctx.cwd),
            "ownerPid": owner_pid,
            "ownerGeneration": generation,
            **({"acpSessionId": resumed.get("acpSessionId")} if resumed else {}),
        },
        text=(
            f"session {name or '(default)'} {'created' if created else 'ready'}"
            f" · {ctx.agent_label} · {ctx.cwd} · owner {owner_pid}"
            + (f" · resumed {resumed.get('acpSessionId')}" if resumed else "")
        ),
        quiet=key,
    )
    return 0


def _close(ctx: Any) -> int:
    key = _key(ctx)
    try:
        result = operations.close_session(key, discard=ctx.inv.discard)
    except NoSession:
        raise _no_session_hint(ctx) from None
    survivors = result.get("survivors") or []
    if "reconciled" in result:
        text = "session closed (no owner was running)"
    else:
        text = (
            f"session closed · teardown {result.get('teardownMs')} ms · survivors {len(survivors)}"
        )
    if "discarded" in result:
        text += " · conversation " + ("deleted" if result["discarded"] else "NOT deleted")
    children = result.get("closedChildren") or []
    failed = [c for c in children if "error" in c]
    if children:
        text += f" · {len(children) - len(failed)} session(s) it spawned closed first"
    for child in failed:
        key_text = str(child["sessionKey"])[:12]
        text += f"\nspawned session {key_text} could not be closed: {child['error']}"
    if result.get("stateError"):
        text += (
            "\nthe session's end could not be recorded: "
            f"{result['stateError']} (free space, then `tether doctor`)"
        )
    ctx.output.control(result, text=text, quiet="closed")
    return 1 if survivors or failed or result.get("stateError") else 0


def _terminate(ctx: Any) -> int:
    key = _key(ctx)
    try:
        result = operations.terminate(key, by={"door": "cli"})
    except NoSession:
        raise _no_session_hint(ctx) from None
    survivors = result.get("survivors") or []
    if result.get("alreadyEnded"):
        text = f"session had already ended ({result.get('reason')}): nothing done"
    elif "reconciled" in result:
        text = "session terminated (no owner was running)"
    else:
        text = (
            f"session terminated · teardown {result.get('teardownMs')} ms"
            f" · survivors {len(survivors)}"
        )
    ctx.output.control(result, text=text, quiet=str(result.get("reason")))
    return 1 if survivors else 0
