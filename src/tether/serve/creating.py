"""Creating a session over HTTP (``POST /v1/sessions``): the body's agent (named ones
only), directory and settings over the configuration, and the fleet id a router may ask
a host to create the session under (``x-tether-session-id``, with what a re-homing
router says in ``x-tether-restarted-from``)."""

from __future__ import annotations

import os
from typing import Any

from starlette.requests import Request

from tether import _fastjson, operations
from tether.serve import bodies
from tether.serve.app import Gateway


def _check_fleet_key(key: str, label: str, cwd: str, name: str) -> None:
    """A fleet id names one session: an existing one of that id must be the same
    (agent, cwd, name), or the request is a conflict, never a silent reuse."""
    from tether.state.registry import Registry

    with Registry() as registry:
        existing = registry.session(key)
    if existing is None or existing.state == "closed":
        return
    if (existing.agent_label, existing.cwd, existing.name) != (label, cwd, name):
        raise bodies.bad_value(
            "x-tether-session-id", "that fleet session id names another session on this host"
        )


def fleet_key(request: Request, gateway: Gateway) -> str | None:
    """The fleet id a router asks this host to create the session under, if any."""
    raw = request.headers.get("x-tether-session-id")
    if raw is None:
        return None
    if gateway.fleet_host is None:
        raise bodies.bad_value(
            "x-tether-session-id", "this gateway is not a fleet host (no --fleet-index)"
        )
    if len(raw) != 64 or raw.strip("0123456789abcdef"):
        raise bodies.bad_value("x-tether-session-id", "a fleet session id is 64 hex digits")
    return raw


def restarted_from(request: Request) -> dict[str, Any] | None:
    """What a router re-homing a session tells its new host (``x-tether-restarted-from``:
    a JSON object), journaled by the new session's first owner."""
    raw = request.headers.get("x-tether-restarted-from")
    if raw is None:
        return None
    try:
        value = _fastjson.loads_unicode(raw.encode("latin-1"))
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise bodies.bad_value("x-tether-restarted-from", "a JSON object is expected")
    return {str(k): v for k, v in value.items() if isinstance(v, str | int | bool | None)}


def ensure(
    body: dict[str, Any],
    host: str,
    fleet_key: str | None = None,
    restarted_from: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Create the session of ``body`` (or reuse it) and make sure its owner serves; the
    record answered (``host``: the name of this host)."""
    from tether import agents, config, sessions

    cwd = body["cwd"]
    if not os.path.isabs(cwd) or not os.path.isdir(cwd):
        raise bodies.bad_value("cwd", f"cwd must be an absolute path to a directory: {cwd!r}")
    cwd = os.path.realpath(cwd)
    cfg = config.load(cwd, warn=lambda _m: None)
    label = body["agent"]
    if not agents.is_agent_name(label, cfg.get("agents")):
        # The HTTP door starts only agents with a name (built-in or from the config):
        # a raw command line from the network is one request away from a shell.
        raise bodies.bad_value(
            "agent", f"unknown agent {label!r}: use a registry name or one from the config"
        )
    argv = agents.resolve(label, cfg.get("agents"))
    name = body.get("name", sessions.DEFAULT_NAME)
    key = fleet_key or sessions.session_key(
        sessions.agent_scope(label, argv, named=True), cwd, name
    )
    if fleet_key is not None:
        _check_fleet_key(fleet_key, label, cwd, name)
    ttl = body.get("ttl")
    if ttl is not None and ttl < 0:
        raise bodies.bad_value("ttl", "ttl must not be negative")
    # The body's permissions and ttl over the config: the table every door uses.
    flags = {"permission_mode": bodies.permission_mode(body), "idle_ttl": ttl}
    options = operations.settings(cfg, flags)
    if restarted_from is not None:
        options["restarted_from"] = restarted_from
    given = "permissions" in body or "ttl" in body
    conn, created = operations.ensure_session(
        key,
        name=name,
        argv=argv,
        label=label,
        cwd=cwd,
        options=options,
        fresh=bool(body.get("fresh")),
        override=options if given else None,
    )
    with conn:
        hello = conn.hello
    return {
        "id": key,
        "host": host,
        "sessionKey": key,
        "created": created,
        "name": name,
        "agent": label,
        "cwd": cwd,
        "ownerPid": hello.get("ownerPid"),
        "ownerGeneration": hello.get("generation"),
    }
