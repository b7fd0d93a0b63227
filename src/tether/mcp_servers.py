"""The MCP servers an agent gets in ``session/new``: the user's own, and Tether's bridge.

Sources, merged in this order (a later server with the same name replaces an earlier):

1. ``mcpServers`` in the config: a list of ACP ``McpServer`` objects;
2. ``--mcp-config FILE`` (acpx's flag): a JSON file, either ``{"mcpServers": {...}}`` in
   the common map form (``name -> {command, args, env}`` or ``{type, url, headers}``),
   or a list of ACP ``McpServer`` objects;
3. the bridge, when ``mcpBridge = true`` or ``--mcp-bridge``: ``tether mcp
   --session-key KEY`` over stdio, named ``tether``, whose requester is the session it
   was handed to (the agent starts it inside its own tree, where the kernel proves it).

Everything is normalised to ACP's shapes (``env``/``headers`` as lists of
``{name, value}``) and stored in the session's options when the session is created;
the owner passes them to every ``session/new`` (and ``session/load``/``resume``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from tether import paths
from tether.errors import UsageError

__all__ = [
    "BRIDGE_NAME",
    "bridge_server",
    "load_mcp_config",
    "merge",
    "normalize",
    "options_from",
    "servers_for",
]

BRIDGE_NAME = "tether"


def _pairs(value: Any, what: str) -> list[dict[str, str]]:
    """``{K: V}`` or ``[{name, value}]`` as ACP's list of ``{name, value}``."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [{"name": str(k), "value": str(v)} for k, v in value.items()]
    if isinstance(value, list) and all(
        isinstance(p, Mapping) and "name" in p and "value" in p for p in value
    ):
        return [{"name": str(p["name"]), "value": str(p["value"])} for p in value]
    raise UsageError(f"MCP server {what} must be a table or a list of {{name, value}}")


def _one(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    url = spec.get("url")
    if isinstance(url, str):
        kind = str(spec.get("type") or spec.get("transport") or "http")
        if kind not in ("http", "sse"):
            raise UsageError(f"MCP server {name!r}: type must be http or sse, not {kind!r}")
        return {
            "type": kind,
            "name": name,
            "url": url,
            "headers": _pairs(spec.get("headers"), "headers"),
        }
    command = spec.get("command")
    args = spec.get("args") or []
    if not isinstance(command, str) or not command:
        raise UsageError(f"MCP server {name!r} needs a command (stdio) or a url")
    if not isinstance(args, list):
        raise UsageError(f"MCP server {name!r}: args must be a list")
    return {
        "name": name,
        "command": command,
        "args": [str(a) for a in args],
        "env": _pairs(spec.get("env"), "env"),
    }


def normalize(servers: Any) -> list[dict[str, Any]]:
    """ACP ``McpServer`` objects from a list of them or a ``name -> spec`` map."""
    if isinstance(servers, Mapping):
        if "mcpServers" in servers:
            return normalize(servers["mcpServers"])
        return [_one(str(n), s) for n, s in servers.items() if isinstance(s, Mapping)]
    if isinstance(servers, (list, tuple)):
        out = []
        for spec in servers:
            if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
                raise UsageError("each MCP server needs a name")
            out.append(_one(spec["name"], spec))
        return out
    raise UsageError("MCP servers must be a list or a map of servers")


def load_mcp_config(path: str) -> list[dict[str, Any]]:
    """The servers of an ``--mcp-config`` JSON file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise UsageError(f"--mcp-config: cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"--mcp-config: {path} is not JSON: {exc}") from None
    return normalize(data)


def bridge_server(session_key: str) -> dict[str, Any]:
    """The stdio entry that starts ``tether mcp`` for ``session_key``."""
    return {
        "name": BRIDGE_NAME,
        "command": sys.executable,
        "args": ["-P", "-m", "tether", "mcp", "--session-key", session_key],
        "env": [
            {"name": "TETHER_HOME", "value": paths.home()},
            {"name": "TETHER_SESSION_KEY", "value": session_key},
        ],
    }


def merge(*groups: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Servers by name, later groups replacing earlier ones, in first-seen order."""
    by_name: dict[str, dict[str, Any]] = {}
    for group in groups:
        for server in group:
            by_name[server["name"]] = server
    return list(by_name.values())


def options_from(cfg: Mapping[str, Any], mcp_config: str | None, bridge: bool) -> dict[str, Any]:
    """The session options for MCP: the user's servers (config, then ``--mcp-config``)
    and whether the bridge is on (``mcpBridge`` or ``--mcp-bridge``)."""
    own = merge(
        normalize(list(cfg.get("mcpServers") or ())),
        load_mcp_config(mcp_config) if mcp_config else [],
    )
    return {"mcp_bridge": bool(bridge or cfg.get("mcpBridge")), "mcp_servers": own}


def servers_for(options: Mapping[str, Any], session_key: str) -> list[dict[str, Any]]:
    """What the owner of ``session_key`` passes in ``session/new``, from its options."""
    own = normalize(options.get("mcp_servers") or [])
    bridge = [bridge_server(session_key)] if options.get("mcp_bridge") else []
    return merge(own, bridge)
