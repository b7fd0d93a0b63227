"""``tether serve`` in a fleet: the flags, and the router's own server loop.

``tether serve --fleet-index DSN [--host-id ID] [--advertise URL] [--label K=V]...``
serves as a host of the fleet (the gateway, plus :class:`tether.fleet.host.FleetHost`);
``tether serve --router --fleet-index DSN`` serves as a router. Both need the fleet
credential (``--fleet-token-file`` or ``TETHER_FLEET_TOKEN``): a host accepts only it, so
users reach hosts through routers, which check the users' own token. A host given
``--tls-cert``/``--tls-key`` serves HTTPS and advertises ``https://``; a router reaches
such hosts verifying their certificates against ``--fleet-ca`` (:mod:`tether.serve.tls`).

The DSN may carry a password: ``TETHER_FLEET_INDEX`` keeps it off the command line
(where any process of the same user can read it in ``/proc``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.errors import IndexUnavailable, UsageError

MIN_FLEET_TOKEN_CHARS = 24


@dataclass(frozen=True, slots=True)
class FleetArgs:
    dsn: str
    token: str
    router: bool
    host_id: str | None = None
    advertise: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    # A host's router for its agents' door (TETHER_FLEET_ROUTER); None: no door.
    router_url: str | None = None
    drain_grace: float | None = None  # --drain-grace; None: the config's serve.drainGrace


def fleet_args(inv: Any, env: Mapping[str, str] = os.environ) -> FleetArgs | None:
    """The fleet flags of a ``serve`` call, checked; None for a single-host gateway."""
    dsn = inv.fleet_index or env.get("TETHER_FLEET_INDEX") or None
    if inv.fleet_ca and not inv.router:
        raise UsageError("--fleet-ca is a router's flag: the CA it trusts hosts' certificates by")
    host_only = [
        flag
        for flag, given in (
            ("--host-id", inv.host_id),
            ("--advertise", inv.advertise),
            ("--label", inv.labels),
            ("--drain-grace", inv.drain_grace is not None),
        )
        if given
    ]
    if dsn is None:
        if inv.router or host_only or inv.fleet_token_file:
            given = "--router" if inv.router else (host_only or ["--fleet-token-file"])[0]
            raise UsageError(f"{given} needs --fleet-index DSN (or TETHER_FLEET_INDEX)")
        return None
    if inv.router and host_only:
        raise UsageError(f"--router cannot be combined with {host_only[0]} (a host's flag)")
    if inv.unix:
        raise UsageError("a fleet host or router listens on TCP: --unix cannot be used")
    if inv.advertise and not inv.advertise.startswith(("http://", "https://")):
        raise UsageError(f"--advertise must be an http(s) URL, got {inv.advertise!r}")
    # A host's router for its agents' door (a router itself has no use for it).
    router_url = None if inv.router else (env.get("TETHER_FLEET_ROUTER") or None)
    if router_url is not None and not router_url.startswith("http://"):
        raise UsageError(f"TETHER_FLEET_ROUTER must be an http:// URL, got {router_url!r}")
    return FleetArgs(
        router_url=router_url,
        dsn=dsn,
        token=_fleet_token(inv.fleet_token_file, env),
        router=bool(inv.router),
        host_id=inv.host_id,
        advertise=inv.advertise,
        labels=dict(inv.labels),
        drain_grace=inv.drain_grace,
    )


def _fleet_token(path: str | None, env: Mapping[str, str]) -> str:
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"--fleet-token-file {path}: cannot read it ({e})") from None
    else:
        token = env.get("TETHER_FLEET_TOKEN", "").strip()
        if not token:
            raise UsageError(
                "a fleet host or router needs the fleet credential:"
                " --fleet-token-file PATH or TETHER_FLEET_TOKEN"
            )
    if len(token) < MIN_FLEET_TOKEN_CHARS:
        raise UsageError(
            f"the fleet credential must be at least {MIN_FLEET_TOKEN_CHARS} characters"
        )
    return token


def run_router(
    sock: socket.socket,
    args: FleetArgs,
    user_token: str,
    announce: Callable[[], None] = lambda: None,
    config: dict[str, Any] | None = None,
    *,
    host_tls: ssl.SSLContext | None = None,
    own_tls: ssl.SSLContext | None = None,
) -> int:
    """Serve as a router on a bound socket until SIGTERM or SIGINT.

    ``config``: the router's configuration, whose ``[sessions] visibility`` and
    ``[agentToAgent]`` decide what requesters asserted by hosts may reach.
    ``host_tls`` opens connections to ``https://`` hosts (:mod:`tether.serve.tls`);
    ``own_tls``, when given, makes the router's own listener HTTPS.
    """
    from tether.fleet.router import Router, RouterSettings, serve_router
    from tether.policy.access import policy

    level, a2a = policy(config if config is not None else {})
    router = Router(
        RouterSettings(
            dsn=args.dsn, token=user_token, fleet_token=args.token, visibility=level, a2a=a2a
        ),
        host_tls=host_tls,
    )
    router.start()  # reads the host table once
    if not router.table.index_up:
        # Later, a router routes from its cache while the index is down; at its start it
        # has nothing cached, so an unreachable index is said now, not served around.
        router.stop()
        sock.close()
        raise IndexUnavailable("the fleet index cannot be reached: the router has no hosts")
    announce()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve_router(router, sock, stop, tls=own_tls)

    try:
        try:
            import uvloop  # the serve extra's event loop, where installed
        except ImportError:
            asyncio.run(main())
        else:
            uvloop.run(main())
    finally:
        router.stop()
        sock.close()
    return 0
