"""Configuration: ``config.toml`` (user) and ``./.tether.toml`` (project); flags win.

Keys (acpx's names; snake_case spellings are accepted too)::

    defaultAgent = "codex"              # used by the agent-less forms
    defaultPermissions = "approve-reads"  # approve-all | approve-reads | deny-all
    nonInteractivePermissions = "deny"  # deny | fail (exit 5)
    format = "text"                     # text | json | quiet
    timeout = 120                       # seconds per prompt (none by default)
    ttl = 3600                          # owner idle TTL; 0 = forever
    turnTimeout = 1800                  # hard ceiling of one turn inside the owner
    ownerMaxLifetime = 0                # 0 = unbounded
    queueMaxDepth = 16
    livenessInterval = 30              # how often a waiting turn checks the agent is alive
    handshakeTimeout = 30              # deadline of each handshake step (initialize...)
    rateLimitHold = 18000              # hold turns up to this long for a known limit reset; 0 = no
    [agents.mine]                       # a named agent; replaces a built-in of the same name
    argv = ["node", "/abs/agent.js"]
    [auth]                              # methodId -> credential (also TETHER_AUTH_<METHODID>)
    api-key = "sk-..."

The project file beats the user file; ``agents`` and ``auth`` merge key by key.
Standard library only (``tomllib``).
"""

from __future__ import annotations

import os

from tether import paths
from tether.errors import UsageError

TYPE_CHECKING = False  # typing costs milliseconds on the thin CLI path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


_ALIASES = {
    "default_agent": "defaultAgent",
    "default_permissions": "defaultPermissions",
    "non_interactive_permissions": "nonInteractivePermissions",
    "turn_timeout": "turnTimeout",
    "owner_max_lifetime": "ownerMaxLifetime",
    "owner_idle_ttl": "ttl",
    "queue_max_depth": "queueMaxDepth",
    "liveness_interval": "livenessInterval",
    "handshake_timeout": "handshakeTimeout",
    "rate_limit_hold": "rateLimitHold",
}

DEFAULTS: dict[str, Any] = {
    "defaultAgent": "codex",
    "defaultPermissions": "approve-reads",
    "nonInteractivePermissions": "deny",
    "format": "text",
    "timeout": None,
    "ttl": 3600.0,
    "turnTimeout": 1800.0,
    "ownerMaxLifetime": 0.0,
    "queueMaxDepth": 16,
    "livenessInterval": 30.0,
    "handshakeTimeout": 30.0,
    "rateLimitHold": 18000.0,
    "agents": {},
    "auth": {},
}


def _read(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        return {}  # the common case: no file, and no tomllib import (re, datetime) paid
    import tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read config {path}: {exc}") from exc
    return {_ALIASES.get(k, k): v for k, v in data.items()}


def load(cwd: str | os.PathLike[str]) -> dict[str, Any]:
    """The merged configuration for a command run in ``cwd``."""
    merged = dict(DEFAULTS)
    merged["agents"] = {}
    merged["auth"] = {}
    for path in (paths.user_config_file(), paths.project_config_file(cwd)):
        data = _read(path)
        for key, value in data.items():
            if key in ("agents", "auth") and isinstance(value, dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    for name, value in os.environ.items():
        if name.startswith("TETHER_AUTH_") and value:
            method = name[len("TETHER_AUTH_") :].lower().replace("_", "-")
            merged["auth"].setdefault(method, value)
    return merged
