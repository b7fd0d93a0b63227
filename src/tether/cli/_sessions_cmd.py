"""``sessions``: new, ensure, close, terminate, list, show (and, elsewhere, fork, the agent's
own sessions and the journal's watch, read, history, export, prune)."""

from __future__ import annotations

from tether import operations, sessions
from tether.cli._session_flags import _key, _later_flags, _no_session_hint, _owner_options
from tether.errors import (
    NoSession,
    UsageError,
)

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


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
    if sub == "rehome":
        raise UsageError(
            "sessions rehome moves a session off a lost fleet host: it needs a fleet router"
            " (--server URL or TETHER_SERVER)"
        )
    if sub == "list":
        return show_list(ctx, operations.list_sessions(include_closed=ctx.inv.all))
    from tether.policy import access
    from tether.state.registry import Registry

    with Registry() as registry:
        key = _key(ctx)
        session = registry.session(key)
        if session is None:
            raise _no_session_hint(ctx)
        access.authorize(key, "status", registry=registry)
        if sub == "show":
            from tether.owner_lost import correct_if_dead

            if correct_if_dead(registry, key):  # a killed owner's records, corrected
                session = registry.session(key) or session
            return show_session(ctx, key, operations.describe(session, registry.instance_id))
    raise UsageError(f"unknown sessions command {sub}")


def show_list(ctx: Any, items: list[dict[str, Any]]) -> int:
    """``sessions list``'s output of ``items`` (local or remote records)."""
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


def show_session(ctx: Any, key: str, info: dict[str, Any]) -> int:
    """``sessions show``'s output of one session's record."""
    from tether.cli import _render

    ctx.output.control({"action": "session", **info}, text=_render.fields(info), quiet=key)
    return 0


def _list_text(items: list[dict[str, Any]], *, tree: bool) -> str:
    """``sessions list`` as text: a table, or with ``--tree`` the ownership forest.

    Every field is escaped: a name (or cwd) from the state never forges a row."""
    from tether.names import escape

    if not tree:
        return "\n".join(
            "\t".join(
                escape(str(field))
                for field in (
                    s["name"] or "(default)",
                    s["state"],
                    s["agentId"],
                    s["cwd"],
                    _owner_text(s),
                )
            )
            for s in items
        )
    from tether.policy.ownership import tree_lines

    return "\n".join(escape(line) for line in tree_lines(items))


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
                operations.set_config_option(key, "model", ctx.inv.model, conn=conn)
                ctx.output.banner(f"model set: {ctx.inv.model}")
    return show_ensured(ctx, key, name, created, owner_pid, generation, resumed)


def show_ensured(
    ctx: Any,
    key: str,
    name: str,
    created: bool,
    owner_pid: Any,
    generation: Any,
    resumed: dict[str, Any],
) -> int:
    """``sessions new|ensure``'s output."""
    from tether.names import escape

    fresh = ctx.inv.subcommand == "new"
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
            f"session {escape(name) or '(default)'} {_ensured_word(created, fresh)}"
            f" · {escape(ctx.agent_label)} · {escape(str(ctx.cwd))} · owner {owner_pid}"
            + (f" · resumed {resumed.get('acpSessionId')}" if resumed else "")
        ),
        quiet=key,
    )
    return 0


def _ensured_word(created: bool, fresh: bool) -> str:
    if created:
        return "created"
    # `sessions new` always replaces, unless a concurrent `sessions new` of the same
    # session created it after this one began (tether.operations.ensure_session).
    return "exists (created just now by a concurrent `sessions new`)" if fresh else "ready"


def _close(ctx: Any) -> int:
    key = _key(ctx)
    try:
        result = operations.close_session(key, discard=ctx.inv.discard)
    except NoSession:
        raise _no_session_hint(ctx) from None
    return show_closed(ctx, result)


def show_closed(ctx: Any, result: dict[str, Any]) -> int:
    """``sessions close``'s output of its result; its exit status."""
    survivors = result.get("survivors") or []
    if "reconciled" in result:
        text = f"session closed (no owner was running) · survivors {len(survivors)}"
    else:
        text = (
            f"session closed · teardown {result.get('teardownMs')} ms · survivors {len(survivors)}"
        )
    text += _found_text(result)
    if "discarded" in result:
        text += " · conversation " + ("deleted" if result["discarded"] else "NOT deleted")
    children = result.get("closedChildren") or []
    failed = [c for c in children if "error" in c]
    if children:
        text += f" · {len(children) - len(failed)} session(s) it spawned closed first"
    for child in failed:
        key_text = str(child["sessionKey"])[:12]
        text += f"\nspawned session {key_text} could not be closed: {child['error']}"
    if result.get("childrenUnknown"):
        text += f"\nthe sessions it spawned could not be looked up: {result['childrenUnknown']}"
    if result.get("stateError"):
        text += f"\nthe session's end could not be recorded: {state_error_text(result)}"
    ctx.output.control(result, text=text, quiet="closed")
    return 1 if survivors or failed or result.get("stateError") else 0


def state_error_text(result: dict[str, Any]) -> str:
    """Why a close could not be recorded, with what to do about that cause (only a full
    disk is helped by freeing space)."""
    code = result.get("stateErrorCode")
    if code == "STATE_FULL":
        advice = "free space, then `tether doctor`"
    elif code == "STATE_CORRUPT":
        advice = "the state database is damaged: `tether doctor --repair` sets it aside"
    else:
        advice = "`tether doctor` checks the state database"
    return f"{result['stateError']} ({advice})"


def _terminate(ctx: Any) -> int:
    key = _key(ctx)
    try:
        result = operations.terminate(key, by={"door": "cli"})
    except NoSession:
        raise _no_session_hint(ctx) from None
    return show_terminated(ctx, result)


def show_terminated(ctx: Any, result: dict[str, Any]) -> int:
    """``sessions terminate``'s output of its result; its exit status."""
    survivors = result.get("survivors") or []
    if result.get("alreadyEnded"):
        text = f"session had already ended ({result.get('reason')}): nothing done"
    elif "reconciled" in result:
        text = f"session terminated (no owner was running) · survivors {len(survivors)}"
    else:
        text = (
            f"session terminated · teardown {result.get('teardownMs')} ms"
            f" · survivors {len(survivors)}"
        )
    text += _found_text(result)
    ctx.output.control(result, text=text, quiet=str(result.get("reason")))
    return 1 if survivors else 0


# What a close or terminate found of its runs' processes besides the tree it ended
# (issue 20): never silent. field -> what the line says of them.
_FOUND = (
    ("unproven", "unproven (carry the run's marker; not signalled)"),
    ("escaped", "escaped member(s) found and ended"),
)


def _found_text(result: dict[str, Any]) -> str:
    text = ""
    for field, said in _FOUND:
        pids = result.get(field) or []
        if pids:
            text += f" · {len(pids)} {said}: " + ", ".join(str(p) for p in pids[:5])
    return text
