"""Session commands: ``prompt``, ``cancel``, ``set-mode``, ``set``, ``status``, ``sessions``.

The warm path -- a live owner exists -- computes the session's socket path from its
key and talks IPC v2 with the blocking client: no asyncio, no sqlite3. Only when no
owner answers do we import the registry (to check the session exists, exit 4 if not,
and start an owner).
"""

from __future__ import annotations

from tether import sessions
from tether.errors import (
    Interrupted,
    NoSession,
    OwnerUnavailable,
    PermissionDenied,
    UsageError,
)
from tether.ipc.client import OwnerConnection, connect_with_retry

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

CANCEL_WAIT_S = 3.0  # after Ctrl-C on `prompt`, how long we wait for the `cancelled` answer


def _key(ctx: Any) -> str:
    return sessions.session_key(
        ctx.agent_scope, str(ctx.cwd), ctx.inv.session or sessions.DEFAULT_NAME
    )


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
        "fs": not ctx.inv.no_fs,
    }


START_DEADLINE_S = 15.0  # to get a serving owner when none was running


def _serving(conn: OwnerConnection) -> OwnerConnection | None:
    """``conn`` if its owner accepts work; None (closed) if it is shutting down."""
    if conn.hello.get("stopping"):
        conn.close()
        return None
    return conn


def connect_or_start(ctx: Any, key: str) -> OwnerConnection:
    """The warm path first; otherwise start the session's owner.

    The owner itself refuses to start for a session that does not exist (or was
    closed), so the cold path needs no database read of its own -- unless flags given
    now must become the new owner's settings.
    """
    path = str(sessions.socket_path(key))
    try:
        conn = _serving(OwnerConnection.connect(path))
    except OwnerUnavailable:
        conn = None
    if conn is not None:
        return conn
    import time

    from tether.owner_launch import spawn_owner_daemon

    if ctx.inv.ttl is not None or ctx.inv.permissions:
        from tether.registry import Registry

        with Registry() as registry:
            session = registry.session(key)
            if session is None or session.state == "closed":
                raise _no_session_hint(ctx)
            # Later flags (--ttl, permissions) become the new owner's settings.
            opts = dict(session.options)
            opts.update({k: v for k, v in _owner_options(ctx).items() if v is not None})
            registry.update_session(key, options=opts)
    deadline = time.monotonic() + START_DEADLINE_S
    while True:
        try:
            message = spawn_owner_daemon(key)
        except NoSession:
            raise _no_session_hint(ctx) from None
        if message.get("ready"):
            return OwnerConnection.connect(str(message.get("socket") or path))
        # Busy: another owner holds the session's lock. Either it is starting (another
        # caller's: it binds soon) or it is stopping (idle TTL, close, signal: it lets
        # the lock go soon, and then nobody would start an owner for us). So connect
        # for a short while, and when that fails or finds it stopping, start ours again.
        try:
            conn = _serving(
                connect_with_retry(path, deadline=min(deadline, time.monotonic() + 0.5))
            )
        except OwnerUnavailable:
            conn = None
        if conn is not None:
            return conn
        if time.monotonic() >= deadline:
            raise OwnerUnavailable(
                f"the session owner did not become available within {START_DEADLINE_S:g} s"
            )
        time.sleep(0.05)


def _render(ctx: Any) -> Any:
    out = ctx.output

    def on_frame(frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "update":
            acp = frame.get("frame")
            if isinstance(acp, dict):
                out.frame(str(frame.get("direction", "in")), acp)
        elif kind == "permission" and ctx.fmt == "text":
            request = frame.get("request") or {}
            tool = request.get("toolCall") or {}
            picked = (frame.get("outcome") or {}).get("outcome") or {}
            chosen = picked.get("optionId") or picked.get("outcome")
            out.banner(f"permission {tool.get('title') or tool.get('toolCallId')}: {chosen}")
        elif kind == "session_ended":
            event = frame.get("event") or {}
            out.control(
                {"action": "session_ended", **event},
                text=None,
            )
            if ctx.fmt == "text":
                out.banner(f"agent run ended: {event.get('reason')} ({event.get('message')})")

    return on_frame


def prompt(ctx: Any, text: str) -> int:
    if not text.strip():
        raise UsageError("prompt needs text (arguments, -f FILE, or stdin)")
    key = _key(ctx)
    conn = connect_or_start(ctx, key)
    deadline_ms = int(ctx.timeout * 1000) if ctx.timeout is not None else None
    payload = {
        "prompt": [{"type": "text", "text": text}],
        "wait": not ctx.inv.no_wait,
        # Only an explicit flag overrides the mode the session was created with.
        **({"permissionMode": ctx.inv.permissions} if ctx.inv.permissions else {}),
    }
    with conn:
        rid = conn.send("prompt", payload, deadline_ms=deadline_ms)
        if ctx.inv.no_wait:
            conn.wait(rid, until_ack=True)
            ctx.output.control(
                {"action": "prompt_queued", "requestId": rid, "sessionKey": key},
                text=f"[queued] {rid}",
                quiet=rid,
            )
            return 0
        render = _render(ctx)
        ctx.output.batch = True
        conn.before_block = ctx.output.flush
        try:
            result = conn.wait(rid, on_frame=render, deadline_ms=deadline_ms)
        except KeyboardInterrupt:
            return _interrupt(ctx, conn, key, rid, render)
    ctx.output.done(str(result.get("stopReason")))
    if result.get("permissionDenied") and ctx.non_interactive == "fail":
        raise PermissionDenied(
            f"{result.get('permissionDenied')} permission request(s) were denied"
        )
    return 0


def _interrupt(ctx: Any, conn: OwnerConnection, key: str, rid: str, render: Any) -> int:
    """Ctrl-C on `prompt` cancels *this* turn (or dequeues it), then exits 130."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C leaves at once
    try:
        with OwnerConnection.connect(str(sessions.socket_path(key))) as control:
            control.request("cancel", {"targetRequestId": rid})
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
        try:
            conn = OwnerConnection.connect(str(sessions.socket_path(key)))
        except OwnerUnavailable:
            ctx.output.control(
                {"action": "cancel_result", "cancelled": False, "reason": "no running owner"},
                text="nothing to cancel",
                quiet="nothing",
            )
            return 0
        with conn:
            payload = {"targetRequestId": ctx.inv.request} if ctx.inv.request else {}
            result = conn.request("cancel", payload)
        text = (
            "cancelled"
            if result.get("cancelled")
            else f"nothing to cancel ({result.get('reason')})"
        )
        ctx.output.control(
            result, text=text, quiet="cancelled" if result.get("cancelled") else "nothing"
        )
        return 0
    if command == "set-mode":
        if len(ctx.inv.words) != 1:
            raise UsageError("usage: tether set-mode [-s NAME] MODE")
        with connect_or_start(ctx, key) as conn:
            result = conn.request(
                "set_mode", {"modeId": ctx.inv.words[0]}, deadline_ms=_deadline(ctx)
            )
        ctx.output.control(result, text=f"mode set: {ctx.inv.words[0]}", quiet=ctx.inv.words[0])
        return 0
    if command == "set":
        if len(ctx.inv.words) != 2:
            raise UsageError("usage: tether set [-s NAME] KEY VALUE")
        config_id, raw = ctx.inv.words
        value: Any = {"true": True, "false": False}.get(raw.lower(), raw)
        with connect_or_start(ctx, key) as conn:
            result = conn.request(
                "set_config_option",
                {"configId": config_id, "value": value},
                deadline_ms=_deadline(ctx),
            )
        ctx.output.control(result, text=f"{config_id} set: {raw}", quiet=raw)
        return 0
    raise UsageError(f"unknown command {command}")


def _deadline(ctx: Any) -> int | None:
    return int(ctx.timeout * 1000) if ctx.timeout is not None else None


def _status(ctx: Any, key: str) -> int:
    try:
        conn = OwnerConnection.connect(str(sessions.socket_path(key)))
    except OwnerUnavailable:
        snapshot = _offline_status(key)
    else:
        with conn:
            snapshot = conn.request("status", {})
    from tether.cli import _render

    ctx.output.control(snapshot, text=_render.fields(snapshot), quiet=str(snapshot.get("status")))
    return 0


def _offline_status(key: str) -> dict[str, Any]:
    from tether.registry import Registry

    with Registry() as registry:
        session = registry.session(key)
        if session is None:
            # The documented keys are always present, so scripts need no special case.
            return {
                "action": "status_snapshot",
                "status": "no-session",
                "ownerPid": None,
                "ownerGeneration": None,
                "agentPid": None,
                "queueDepth": 0,
                "leaseState": None,
                "sessionKey": key,
            }
        lease = None
        leases = registry.leases(session_key=key)
        if leases:
            lease = leases[-1]
        last_end = session.last_end or {}
        dead = session.state != "closed" and last_end.get("reason") == "error"
        return {
            "action": "status_snapshot",
            "status": "closed" if session.state == "closed" else ("dead" if dead else "idle"),
            "ownerPid": None,
            "ownerGeneration": session.owner_generation,
            "agentPid": None,
            "queueDepth": 0,
            "leaseState": lease.state if lease else None,
            "leaseId": lease.lease_id if lease else None,
            "lastPromptTime": session.last_prompt_at,
            "acpSessionId": session.acp_session_id,
            "lastEnd": last_end or None,
            "exitCode": last_end.get("exitCode"),
            "sessionKey": key,
            "name": session.name,
        }


def sessions_cmd(ctx: Any) -> int:
    sub = ctx.inv.subcommand
    if sub in ("new", "ensure"):
        return _ensure(ctx, fresh=sub == "new")
    if sub == "close":
        return _close(ctx)
    from tether.cli import _render
    from tether.registry import Registry

    with Registry() as registry:
        if sub == "list":
            rows = registry.sessions(include_closed=ctx.inv.all)
            items = [_describe(s) for s in rows]
            ctx.output.control(
                {"action": "sessions", "sessions": items},
                text="\n".join(
                    f"{s['name'] or '(default)'}\t{s['state']}\t{s['agent']}\t{s['cwd']}"
                    for s in items
                )
                or "no sessions",
                quiet="\n".join(s["key"] for s in items),
            )
            return 0
        key = _key(ctx)
        session = registry.session(key)
        if session is None:
            raise _no_session_hint(ctx)
        if sub == "show":
            info = _describe(session)
            ctx.output.control(
                {"action": "session", **info},
                text=_render.fields(info),
                quiet=key,
            )
            return 0
        if sub == "history":
            events = registry.events(key, limit=ctx.inv.limit or 20)
            ctx.output.control(
                {"action": "history", "sessionKey": key, "events": events},
                text=_render.history(events),
            )
            return 0
    raise UsageError(f"unknown sessions command {sub}")


def _describe(session: Any) -> dict[str, Any]:
    return {
        "key": session.key,
        "name": session.name,
        "state": session.state,
        "agent": session.agent_label,
        "agentCommand": session.agent_command,
        "cwd": session.cwd,
        "acpSessionId": session.acp_session_id,
        "createdAt": session.created_at,
        "lastPromptAt": session.last_prompt_at,
        "ownerPid": session.owner_pid,
        "ownerGeneration": session.owner_generation,
        "ownerStatus": session.owner_status,
        "lastEnd": session.last_end,
    }


def _ensure(ctx: Any, *, fresh: bool) -> int:
    from tether.registry import Registry

    key = _key(ctx)
    name = ctx.inv.session or sessions.DEFAULT_NAME
    if fresh:
        # acpx: `sessions new` soft-closes the previous session of the scope first.
        try:
            with OwnerConnection.connect(str(sessions.socket_path(key))) as conn:
                conn.request("close", {})
        except OwnerUnavailable:
            pass
        with Registry() as registry:
            if registry.session(key) is not None:
                registry.update_session(key, state="closed")
    with Registry() as registry:
        _session, created = registry.upsert_session(
            key=key,
            name=name,
            agent_command=list(ctx.agent_argv),
            agent_label=ctx.agent_label,
            cwd=str(ctx.cwd),
            options=_owner_options(ctx),
        )
    conn = connect_or_start(ctx, key)
    with conn:
        generation = conn.generation
        owner_pid = conn.hello.get("ownerPid")
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
        },
        text=(
            f"session {name or '(default)'} {'created' if created else 'ready'}"
            f" · {ctx.agent_label} · {ctx.cwd} · owner {owner_pid}"
        ),
        quiet=key,
    )
    return 0


def _close(ctx: Any) -> int:
    key = _key(ctx)
    try:
        conn = OwnerConnection.connect(str(sessions.socket_path(key)))
    except OwnerUnavailable:
        conn = None
    if conn is not None:
        with conn:
            result = conn.request("close", {})
        survivors = result.get("survivors") or []
        ctx.output.control(
            result,
            text=(
                f"session closed · teardown {result.get('teardownMs')} ms"
                f" · survivors {len(survivors)}"
            ),
            quiet="closed",
        )
        return 1 if survivors else 0
    import time

    from tether.registry import Registry
    from tether.supervise.reconcile import reconcile

    with Registry() as registry:
        session = registry.session(key)
        if session is None:
            raise _no_session_hint(ctx)
        # No owner: sweep anything its dead owners left, then mark it closed.
        decisions = reconcile(registry, session_key=key)
        registry.update_session(key, state="closed", closed_at=time.time())
    ctx.output.control(
        {"action": "session_closed", "sessionKey": key, "survivors": [], "reconciled": decisions},
        text="session closed (no owner was running)",
        quiet="closed",
    )
    return 0
