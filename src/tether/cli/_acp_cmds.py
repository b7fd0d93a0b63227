"""Commands over ACP's newer methods: ``sessions fork``, ``sessions list
--agent-sessions`` and ``logout`` (the operations are in :mod:`tether.operations._acp_calls`)."""

from __future__ import annotations

from typing import Any

from tether import operations, sessions
from tether.errors import NoSession, UsageError


def _auth(ctx: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (ctx.config.get("auth") or {}).items()}


def fork(ctx: Any) -> int:
    """``sessions fork [-s NAME] NEW_NAME``."""
    from tether.cli._session_flags import _key, _later_flags, _no_session_hint

    if len(ctx.inv.words) != 1:
        raise UsageError("usage: tether sessions fork [-s NAME] NEW_NAME")
    new_name = ctx.inv.words[0]
    parent = _key(ctx)
    key = sessions.session_key(ctx.agent_scope, str(ctx.cwd), new_name)
    if key == parent:
        raise UsageError("a fork needs a name of its own")
    try:
        result = operations.fork_session(
            parent, key, name=new_name, options=_later_flags(ctx) or None
        )
    except NoSession:
        raise _no_session_hint(ctx) from None
    ctx.output.control(
        result,
        text=(
            f"session {new_name} forked from {ctx.inv.session or '(default)'}"
            f" · {result.get('acpSessionId')} · owner {result.get('ownerPid')}"
        ),
        quiet=key,
    )
    return 0


def agent_sessions(ctx: Any) -> int:
    """``sessions list --agent-sessions [--cursor C] [--all] [--filter-cwd DIR]``."""
    import os

    where = ctx.inv.filter_cwd  # acpx's --filter-cwd: the agent's sessions of DIR
    page = operations.agent_sessions(
        list(ctx.agent_argv),
        os.path.realpath(os.path.expanduser(where)) if where else str(ctx.cwd),
        cursor=ctx.inv.cursor,
        any_cwd=ctx.inv.all,
        auth=_auth(ctx),
    )
    rows = page["sessions"]
    lines = [
        f"{s.get('sessionId')}\t{s.get('updatedAt') or '-'}\t{s.get('title') or ''}"
        + (f"\t{s.get('cwd')}" if ctx.inv.all else "")
        for s in rows
        if isinstance(s, dict)
    ]
    if page.get("nextCursor"):
        lines.append(f"(more: --cursor {page['nextCursor']})")
    ctx.output.control(
        page,
        text="\n".join(lines) or "the agent has no sessions here",
        quiet="\n".join(str(s.get("sessionId")) for s in rows if isinstance(s, dict)),
    )
    return 0


def logout(ctx: Any) -> int:
    """``logout``."""
    if ctx.inv.words:
        raise UsageError("usage: tether [<agent>] logout")
    result = operations.logout(list(ctx.agent_argv), str(ctx.cwd), auth=_auth(ctx))
    ctx.output.control(result, text=f"{ctx.agent_label}: logged out", quiet="logged out")
    return 0
