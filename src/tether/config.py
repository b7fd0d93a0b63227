"""Configuration: ``config.toml`` (user) and ``./.tether.toml`` (project); flags win.

Every key is declared once, in :data:`SCHEMA`: its kind, default, allowed values and a
one-line description. Loading validates each file against it:

- a bad value is refused (:class:`~tether.errors.ConfigError`, exit 2) with the file,
  the key, the value and what is allowed;
- an unknown key is a warning naming the nearest known key, and is ignored;
- a malformed file names the file and the line.

Adding a key is one line in :data:`SCHEMA`, e.g.::

    "abandonedTurnGrace": seconds(5.0, "how long an abandoned turn may take to answer"),

The snake_case spelling (``abandoned_turn_grace``) is accepted automatically. A table
of its own keys is ``table("…", keys={"visibility": choice("tree", (…), "…")})``; a
table of free names, ``table("…", values=<key>)``; any other shape,
``Key(default, "what it is", "what is allowed", check)`` where ``check(value)`` returns
the value to keep or raises ``ValueError("what is allowed")``.

The project file beats the user file; tables merge key by key. Standard library only
(``tomllib``, imported only when a file exists): this module is on the thin CLI path.
"""

from __future__ import annotations

import os

from tether import paths
from tether.config_keys import Key as Key
from tether.config_keys import a_string, agent_patterns, an_agent, mcp_server_list, strings
from tether.config_keys import choice as choice
from tether.config_keys import flag as flag
from tether.config_keys import integer as integer
from tether.config_keys import seconds as seconds
from tether.config_keys import table as table
from tether.config_keys import text as text
from tether.errors import ConfigError

TYPE_CHECKING = False  # typing costs milliseconds on the thin CLI path; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    Warn = Callable[[str], None]


_PERMISSIONS = ("approve-all", "approve-reads", "deny-all")


_SESSIONS = {
    "visibility": choice(
        "tree", ("self", "tree", "agent", "all"), "which sessions a session may see and drive"
    ),
    "closeChildren": flag(True, "closing a session first closes the sessions it spawned"),
}
_SERVE = {
    "allowedHosts": Key(
        (),
        "Host headers the gateway answers besides its own addresses (NAME, NAME:PORT, *)",
        "a list of host names",
        strings,
    ),
    "tlsCert": text(None, "serve HTTPS with this certificate file (PEM; --tls-cert)"),
    "tlsKey": text(None, "the private key file of tlsCert (PEM; --tls-key)"),
    "fleetCa": text(None, "a router trusts hosts' https:// certificates signed by this CA"),
    "drainGrace": seconds(
        30.0, "a fleet host's drain (SIGTERM, serve --drain): how long running turns may finish"
    ),
    "ownerForkServer": flag(
        True, "the gateway forks owners from one preloaded process (small idle sessions)"
    ),
    "sessionHosts": integer(
        0,
        "owners per session host: the gateway runs up to N sessions' owners in one process"
        " (0: off, an owner process per session)",
        minimum=0,
    ),
}
_AGENT_TO_AGENT = {
    "enabled": flag(False, "let sessions reach other agents' sessions (visibility = all)"),
    "allow": Key((), "agent ids allowed", "a list of agent id patterns", agent_patterns),
}

# The schema: one line per key. camelCase names are acpx's; snake_case is accepted too.
SCHEMA: dict[str, Key] = {
    "defaultAgent": text("codex", "the agent of the agent-less forms"),
    "defaultPermissions": choice("approve-reads", _PERMISSIONS, "the permission mode"),
    "authPolicy": choice(
        "skip", ("skip", "fail"), "auth methods advertised and no credential: go on, or fail"
    ),
    "promptRetries": integer(0, "retry a prompt this often on a transient agent error", minimum=0),
    "nonInteractivePermissions": choice(
        "deny", ("deny", "fail"), "undecided permission requests: reject, or fail (exit 5)"
    ),
    "permissionPolicy": text(None, "a permission policy file (TOML rules) or a mode's name"),
    "permissionTimeout": seconds(300.0, "how long a question waits for a human; 0 = forever"),
    "format": choice("text", ("text", "json", "quiet"), "the output format"),
    "timeout": seconds(None, "give up on a prompt after this long, exit 3", positive=True),
    "ttl": seconds(3600.0, "the owner's idle TTL; 0 = forever"),
    "turnTimeout": seconds(1800.0, "hard ceiling of one turn inside the owner", positive=True),
    "ownerMaxLifetime": seconds(0.0, "retire an idle owner after this long; 0 = never"),
    "queueMaxDepth": integer(16, "requests an owner queues before QUEUE_OVERLOADED"),
    "livenessInterval": seconds(30.0, "a waiting turn checks the agent this often", positive=True),
    "handshakeTimeout": seconds(30.0, "deadline of each handshake step", positive=True),
    "promptMaxBytes": integer(64 * 1024 * 1024, "the largest prompt (request frame), bytes"),
    "frameMaxBytes": integer(
        64 * 1024 * 1024,
        "the largest message an agent may send, bytes (never below promptMaxBytes)",
    ),
    "abandonedTurnGrace": seconds(
        10.0, "wait this long for an abandoned turn's answer, then restart the agent"
    ),
    "cancelGrace": seconds(
        10.0,
        "a cancelled turn the agent has not ended after this long is ended, the agent restarted",
        positive=True,
    ),
    "rateLimitHold": seconds(
        18000.0, "hold turns up to this long for a known rate-limit reset; 0 = never"
    ),
    "ownerUnresponsiveAfter": seconds(
        30.0, "heartbeat silence after which a caller replaces the owner", positive=True
    ),
    "journalMaxEntries": integer(
        200_000, "journal entries kept per session; 0 = no bound", minimum=0
    ),
    "journalMaxBytes": integer(
        256 * 1024 * 1024, "journal bytes kept per session; 0 = no bound", minimum=0
    ),
    "journalMaxAge": seconds(30 * 24 * 3600.0, "journal entries older than this go; 0 = keep"),
    "journalFrames": flag(True, "journal every ACP frame (false: control records only)"),
    "agents": table("a named agent", values=Key(None, "", "", an_agent)),
    "auth": table("a credential by ACP auth method id", values=Key(None, "", "", a_string)),
    # Session ownership and delegation (tether.policy.access, tether.mcp; issue 10).
    "sessions": table("session ownership and visibility", keys=_SESSIONS),
    "agentToAgent": table("cross-agent access (agent-to-agent policy)", keys=_AGENT_TO_AGENT),
    "mcpBridge": flag(False, "hand every agent `tether mcp` (session delegation) in session/new"),
    "mcpServers": Key((), "MCP servers for every agent", "a list of MCP servers", mcp_server_list),
    # Agents' terminals (terminal/*; tether.process_terminals; issue 14 item 4).
    "terminal": flag(True, "offer agents terminals (terminal/*); --no-terminal turns it off"),
    "terminalOutputLimit": integer(
        1024 * 1024, "bytes of a terminal's newest output kept (agents may ask for less)"
    ),
    "terminalPty": flag(False, "run agents' terminals on a pseudo-terminal (else one pipe)"),
    # tether serve, the HTTP gateway.
    "serve": table("the HTTP gateway (tether serve)", keys=_SERVE),
}

_EXTRA_ALIASES = {"owner_idle_ttl": "ttl"}


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def _aliases(schema: Mapping[str, Key]) -> dict[str, str]:
    out = {_snake(name): name for name in schema if _snake(name) != name}
    return {**out, **(_EXTRA_ALIASES if schema is SCHEMA else {})}


def _default(key: Key) -> Any:
    if key.keys is not None:
        return {name: _default(sub) for name, sub in key.keys.items()}
    return dict(key.default) if isinstance(key.default, dict) else key.default


DEFAULTS: dict[str, Any] = {name: _default(key) for name, key in SCHEMA.items()}


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_show(v)}" for k, v in value.items()) + " }"
    return repr(value)


def _nearest(name: str, known: Mapping[str, Key]) -> str:
    import difflib  # only when a key is unknown

    candidates = [*known, *_aliases(known)]
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in candidates}
        close = [lowered[name.lower()]] if name.lower() in lowered else []
    return f"; did you mean {_aliases(known).get(close[0], close[0])}?" if close else ""


def validate(
    data: Mapping[str, Any],
    path: str,
    warn: Warn,
    schema: Mapping[str, Key] = SCHEMA,
    prefix: str = "",
) -> dict[str, Any]:
    """Check one file's ``data`` against ``schema``; return it normalised (canonical names).

    Raises:
        ConfigError: a value is not allowed (names the file, key, value and what is).
    """
    aliases = _aliases(schema)
    out: dict[str, Any] = {}
    for raw_name, value in data.items():
        name = aliases.get(raw_name, raw_name)
        key = schema.get(name)
        if key is None:
            warn(
                f"unknown config key {prefix}{raw_name} in {path}"
                f"{_nearest(raw_name, schema)} (ignored)"
            )
            continue
        if isinstance(value, dict) and key.keys is not None:
            out[name] = validate(value, path, warn, key.keys, f"{prefix}{name}.")
        elif isinstance(value, dict) and key.values is not None:
            out[name] = {
                item: _checked(key.values, value[item], path, f"{prefix}{name}.{item}", key.help)
                for item in value
            }
        else:
            out[name] = _checked(key, value, path, f"{prefix}{raw_name}", key.help)
    return out


def _checked(key: Key, value: Any, path: str, name: str, help: str) -> Any:
    try:
        return key.check(value)
    except ValueError as exc:
        raise ConfigError(
            f"{path}: {name} = {_show(value)} is not allowed: expected {exc} ({help})"
        ) from None


def _decode_error(path: str, exc: Exception, raw: bytes) -> ConfigError:
    """``path:LINE: malformed TOML: …`` (tomllib puts the line in its message before 3.14)."""
    message = str(exc)
    line = getattr(exc, "lineno", None)
    if line is None and "(at line " in message:
        line = int(message.split("(at line ", 1)[1].split(",", 1)[0])
    if line is None and "end of document" in message:
        line = raw.count(b"\n") + (0 if raw.endswith(b"\n") else 1)
    where = f"{path}:{line}" if line else path
    return ConfigError(f"{where}: malformed TOML: {message}")


def _read(path: str, warn: Warn) -> dict[str, Any]:
    if not os.path.exists(path):
        return {}  # the common case: no file, and no tomllib import (re, datetime) paid
    import tomllib

    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise _decode_error(path, exc, raw) from exc
    return validate(data, path, warn)


def _stderr_warning(message: str) -> None:
    import sys

    sys.stderr.write(f"[tether] warning: {message}\n")


_VISIBILITY_RANK = {"self": 0, "tree": 1, "agent": 2, "all": 3}


def _no_wider(
    project: dict[str, Any], user: Mapping[str, Any], path: str, user_path: str, warn: Warn
) -> dict[str, Any]:
    """A project file may narrow who sessions can see and drive, never widen it.

    ``./.tether.toml`` lives in the working tree, where the agent itself can write: a
    session that could raise its own ``sessions.visibility`` or turn ``agentToAgent`` on
    would choose its own policy. Those are the operator's (the user file's); a project
    value wider than the user's is ignored, with a warning.
    """
    out = dict(project)
    sessions = project.get("sessions")
    if isinstance(sessions, dict) and "visibility" in sessions:
        mine, theirs = sessions["visibility"], user["sessions"]["visibility"]
        if _VISIBILITY_RANK.get(mine, 9) > _VISIBILITY_RANK.get(theirs, 9):
            warn(
                f"{path}: sessions.visibility = {mine!r} is wider than {theirs!r} and is"
                f" ignored: a project may narrow visibility; widen it in {user_path}"
            )
            out["sessions"] = {k: v for k, v in sessions.items() if k != "visibility"}
    a2a = project.get("agentToAgent")
    if isinstance(a2a, dict):
        kept = dict(a2a)
        if kept.get("enabled") and not user["agentToAgent"]["enabled"]:
            warn(f"{path}: agentToAgent.enabled is ignored: enable it in {user_path}")
            del kept["enabled"]
        # An empty list allows every id: any project list is within it, and an empty
        # project list is wider than any non-empty one.
        allowed = set(user["agentToAgent"]["allow"])
        mine = set(kept.get("allow", ()))
        if "allow" in kept and allowed and (not mine or not mine <= allowed):
            warn(f"{path}: agentToAgent.allow may only narrow {user_path}'s list; ignored")
            del kept["allow"]
        out["agentToAgent"] = kept
    return out


def load(cwd: str | os.PathLike[str], warn: Warn | None = None) -> dict[str, Any]:
    """The merged, validated configuration for a command run in ``cwd``.

    Args:
        warn: called with each warning (unknown keys); default: a line on stderr.

    Raises:
        ConfigError: a file is malformed or a value is not allowed (exit 2).
    """
    warn = warn or _stderr_warning
    merged: dict[str, Any] = {name: _default(key) for name, key in SCHEMA.items()}
    user_path, project_path = paths.user_config_file(), paths.project_config_file(cwd)
    for path in (user_path, project_path):
        values = _read(path, warn)
        if path == project_path:
            values = _no_wider(values, merged, path, user_path, warn)
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    for name, value in os.environ.items():
        if name.startswith("TETHER_AUTH_") and value:
            method = name[len("TETHER_AUTH_") :].lower().replace("_", "-")
            merged["auth"].setdefault(method, value)
    return merged
