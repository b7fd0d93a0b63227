"""What every session command shares: the session key from the flags, the owner settings
the flags make, connect-or-start with the CLI's hint, and the call's ``--timeout``.

The commands themselves: :mod:`._prompt_cmd` (``prompt``), :mod:`._control_cmds`
(``cancel``, ``set-mode``, ``set``, ``status``), :mod:`._sessions_cmd` (``sessions ...``).
What a caller can do to a session lives in :mod:`tether.operations` (shared with the
library); these modules turn flags into calls and answers into output. The warm path --
a live owner exists -- talks IPC v2 with the blocking client: no asyncio, no sqlite3.
"""

from __future__ import annotations

import time

from tether import operations, sessions
from tether.cli._retry import agent_options
from tether.errors import (
    NoSession,
    UsageError,
)
from tether.ipc.client import OwnerConnection

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


def _key(ctx: Any) -> str:
    """The session's key: ``--key`` (a key or a unique prefix, looked up once), else the
    agent, working directory and name."""
    if ctx.inv.key is None:
        return sessions.session_key(
            ctx.agent_scope, str(ctx.cwd), ctx.inv.session or sessions.DEFAULT_NAME
        )
    if ctx.resolved_key is None:
        given = ctx.inv.key.lower()
        if len(given) == 64 and all(c in "0123456789abcdef" for c in given):
            ctx.resolved_key = given  # a whole key: no lookup (the warm path stays thin)
        else:
            ctx.resolved_key = operations.resolve_key(ctx.inv.key)
    return str(ctx.resolved_key)


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
    if ctx.inv.key is not None:
        return NoSession(f"no session has the key {ctx.inv.key} (see `tether sessions list --all`)")
    name = f" -s {ctx.inv.session}" if ctx.inv.session else ""
    return NoSession(
        f"no session for {ctx.agent_label} in {ctx.cwd}{name}; "
        f"run `tether {ctx.agent_label if ctx.inv.agent else ''} sessions new{name}` "
        f"or `sessions ensure{name}` first".replace("  ", " ")
    )


def _owner_options(ctx: Any) -> dict[str, Any]:
    """The session's owner settings: the config and this call's flags, through the one
    table every door uses (:func:`tether.operations.settings`)."""
    return operations.settings(ctx.config, owner_flags(ctx))


def owner_flags(ctx: Any) -> dict[str, Any]:
    """This call's flags as owner options (None: not given; the config's value stays)."""
    inv = ctx.inv
    flags: dict[str, Any] = {
        "idle_ttl": inv.ttl,
        "permission_mode": inv.permissions or None,
        "permission_policy": _policy(ctx),
        "auth_policy": inv.auth_policy,
        "fs": False if inv.no_fs else None,
        "terminal": False if inv.no_terminal else None,
        "mcp_bridge": True if inv.mcp_bridge else None,
        **agent_options(ctx),
    }
    if inv.mcp_config:
        from tether import mcp_servers as bridge  # json: only when a file is given

        # --mcp-config adds its servers to the configured ones.
        flags["mcp_servers"] = bridge.options_from(ctx.config, inv.mcp_config, False)["mcp_servers"]
    return flags


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


def _call_deadline(ctx: Any) -> float | None:
    """The end of the caller's ``--timeout`` (monotonic), counted from now."""
    return time.monotonic() + ctx.timeout if ctx.timeout is not None else None


def _remaining_ms(deadline: float | None) -> int | None:
    """What is left of ``deadline`` for the owner to enforce (at least 1 ms)."""
    return None if deadline is None else max(1, int((deadline - time.monotonic()) * 1000))
