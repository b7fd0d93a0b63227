"""A session's owner settings: one table of keys, built the same way by every door.

Every front door -- the CLI (``sessions new|ensure``, flags given later), the library
(:class:`tether.Client`), the gateway (``POST /v1/sessions``), the ACP door (``tether
acp``) and the MCP bridge (``sessions_spawn``) -- calls :func:`settings` with the
configuration it loaded and the flags of its call; the owner receives the result whole
(the session's stored options) and reads these same names
(:class:`tether.owner.settings.OwnerSettings`). ``status`` shows what the owner made of
them (``settings``).

:data:`TABLE` pairs each owner option with the configuration key it comes from; the
key's validation is the schema's (:data:`tether.config.SCHEMA`), so a flag is checked
exactly as the same value in a config file would be. Options no config key sets
(``fs`` from ``--no-fs``, ``agent_options`` from the session flags, the ACP door's
``auth`` method...) pass as flags.

Settings are recorded when the session is created; flags given explicitly on a later
call (``prompt --ttl``) record the whole table again for the owner started then.
Standard library only: ``sessions new`` is a thin path.
"""

from __future__ import annotations

from tether.errors import UsageError

TYPE_CHECKING = False  # typing costs ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["FLAG_ONLY", "TABLE", "settings"]

# (the option the owner reads, the config key it comes from). Every owner setting the
# config schema defines; tests/unit/test_settings_table.py holds the schema to it.
TABLE: tuple[tuple[str, str], ...] = (
    ("idle_ttl", "ttl"),
    ("permission_mode", "defaultPermissions"),
    ("permission_policy", "permissionPolicy"),  # relative: to the session's cwd (owner)
    ("permission_timeout", "permissionTimeout"),
    ("auth_policy", "authPolicy"),
    ("turn_timeout", "turnTimeout"),
    ("max_lifetime", "ownerMaxLifetime"),
    ("queue_max_depth", "queueMaxDepth"),
    ("liveness_interval", "livenessInterval"),
    ("handshake_timeout", "handshakeTimeout"),
    ("max_frame_bytes", "promptMaxBytes"),
    ("agent_frame_bytes", "frameMaxBytes"),  # never below promptMaxBytes (owner)
    ("abandoned_turn_grace", "abandonedTurnGrace"),
    ("cancel_grace", "cancelGrace"),
    ("rate_limit_hold", "rateLimitHold"),
    ("unresponsive_after", "ownerUnresponsiveAfter"),
    ("journal_max_entries", "journalMaxEntries"),
    ("journal_max_bytes", "journalMaxBytes"),
    ("journal_max_age", "journalMaxAge"),
    ("journal_frames", "journalFrames"),
    ("terminal", "terminal"),
    ("terminal_output_limit", "terminalOutputLimit"),
    ("terminal_pty", "terminalPty"),
    ("mcp_bridge", "mcpBridge"),
    ("mcp_servers", "mcpServers"),
)

# Options only a flag sets, with the value a session gets when no flag does.
FLAG_ONLY: dict[str, Any] = {"fs": True}

# Options a door passes through as they are: per-call, per-door or internal (the session
# flags --model & co., the ACP client's auth method, an IPC idle bound tests shorten).
_PASSED = frozenset({"agent_options", "auth", "connection_idle_timeout"})

_KEY_OF = dict(TABLE)


def settings(config: Mapping[str, Any], flags: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The owner settings of a session: every option of :data:`TABLE` from ``config``
    (a loaded configuration, :func:`tether.config.load`), then ``flags`` over them.

    Args:
        config: the merged configuration; a key it lacks takes the schema's default.
        flags: option name -> value given on this call (``idle_ttl`` from ``--ttl``, the
            HTTP body's ``ttl``...); None values are "not given".

    Returns:
        The options to record with the session (JSON values).

    Raises:
        UsageError: a flag's value is not what its config key allows, or the option is
            unknown.
    """
    from tether import config as schema

    out: dict[str, Any] = {}
    for option, key in TABLE:
        out[option] = _plain(config.get(key, schema.DEFAULTS[key]))
    out.update(FLAG_ONLY)
    for option, value in (flags or {}).items():
        if value is not None:
            out[option] = _checked(option, value)
    return out


def _checked(option: str, value: Any) -> Any:
    from tether import config as schema

    key = _KEY_OF.get(option)
    if key is not None:
        rule = schema.SCHEMA[key]
        try:
            return _plain(rule.check(value))
        except ValueError as exc:
            raise UsageError(
                f"{option} = {value!r} is not allowed: expected {exc} (config key {key})"
            ) from None
    if option in FLAG_ONLY:
        if not isinstance(value, bool):
            raise UsageError(f"{option} = {value!r} is not allowed: expected true or false")
        return value
    if option in _PASSED:
        return value
    known = ", ".join(sorted([*_KEY_OF, *FLAG_ONLY, *_PASSED]))
    raise UsageError(f"unknown owner setting {option!r} (known: {known})")


def _plain(value: Any) -> Any:
    """A value as JSON stores it (the schema keeps lists as tuples)."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
