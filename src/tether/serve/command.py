"""``tether serve``: bind, announce, run the gateway under uvicorn until a signal.

The gateway holds no session state: everything it serves comes from the owners and the
journal, so stopping it (SIGINT, SIGTERM) loses nothing and two gateways may serve one
``TETHER_HOME``. Owners it started keep running after it (they retire on their idle TTL).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from typing import Any, TextIO

from tether.errors import UsageError
from tether.serve import auth, tls
from tether.serve.acp_binding import AcpBinding
from tether.serve.hosts import host_rule

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
GRACE_S = 3  # after a signal, how long open requests get before they are cut


def _bind_tcp(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: {exc.strerror}") from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(1024)
    return sock


def _bind_unix(path: str) -> socket.socket:
    from tether.unix_listener import bind_private

    return bind_private(os.path.abspath(path), backlog=1024, what="--unix")


def _url(sock: socket.socket, *, https: bool = False) -> str:
    if sock.family == socket.AF_UNIX:
        return f"unix:{sock.getsockname()}"
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if https else 'http'}://{shown}:{port}"


def _ring_entries() -> int:
    """``TETHER_SERVE_RING``: journal entries kept in memory per followed session."""
    from tether.serve.stream import RING_ENTRIES

    raw = os.environ.get("TETHER_SERVE_RING", "")
    if not raw:
        return RING_ENTRIES
    if not raw.isdigit() or int(raw) < 16:
        raise UsageError(f"TETHER_SERVE_RING must be a whole number of at least 16, got {raw!r}")
    return int(raw)


def _allowed_hosts(inv: Any, config: dict[str, Any]) -> list[str]:
    """The Host entries given: the config's ``serve.allowedHosts``, ``--allowed-host``,
    and the name ``--host`` was given as (its address is allowed anyway)."""
    given = list((config.get("serve") or {}).get("allowedHosts") or ())
    given += inv.allowed_hosts
    if inv.host and not inv.unix:
        given.append(inv.host)
    return given


def server_logs(verbose: bool, stream: TextIO | None = None) -> None:
    """A server's warnings and errors go to its stderr (``stream``) as JSON lines: an
    unexpected failure's traceback above all, whose caller got only a ``500``. Without
    it they went nowhere (a library's logs are its user's to route), and the 500s of
    bench/scale.py could not be read. ``--verbose`` already sent everything."""
    if not verbose:
        from tether import _log

        _log.configure(stream, level=logging.WARNING)


def run_serve(ctx: Any, acp: AcpBinding | None = None) -> int:
    """Run the gateway; returns the exit code once it has stopped.

    ``acp``: the ACP door, for ACP over HTTP (:mod:`tether.serve.acp_binding`; handed
    over by :mod:`tether.program`, so that no door imports another).
    """
    inv = ctx.inv
    if inv.words:
        raise UsageError(f"serve takes no arguments (got {inv.words[0]!r})")
    if inv.drain:
        if inv.host or inv.port is not None or inv.unix or inv.fleet_index or inv.router:
            raise UsageError("serve --drain takes no other serve flag: it drains this home's host")
        from tether.fleet.drain_command import run_drain

        return run_drain(ctx)
    server_logs(inv.verbose)
    if inv.unix and (inv.host or inv.port is not None):
        raise UsageError("--unix cannot be combined with --host or --port")
    try:
        import starlette  # noqa: F401 -- probing for the optional extra
        import uvicorn  # noqa: F401 -- probing for the optional extra
    except ImportError:
        raise UsageError(
            "`tether serve` needs the serve extra: pip install 'tether[serve]'"
        ) from None
    from tether.fleet.command import fleet_args

    fleet = fleet_args(inv)
    tls_files = tls.server_files(inv, ctx.config)  # loaded now: a bad pair is said first
    host = inv.host or DEFAULT_HOST
    if fleet is not None and not fleet.router:
        # A fleet host answers only the fleet credential: users come through routers.
        if inv.token is not None:
            raise UsageError("a fleet host takes the fleet credential, not --token")
        token, token_file = fleet.token, None
    else:
        token, token_file = auth.choose_token(inv.token, None if inv.unix else host)
    if fleet is not None and fleet.router:
        return _run_router(ctx, fleet, host, token, token_file, tls_files)
    advertise = None if fleet is None else fleet.advertise
    if tls_files is not None and advertise and not advertise.startswith("https://"):
        raise UsageError(f"--advertise {advertise}: this host serves HTTPS (--tls-cert)")
    return _run_gateway(ctx, acp, fleet, host, (token, token_file), tls_files)


def _run_router(
    ctx: Any, fleet: Any, host: str, token: str, token_file: str | None, tls_files: Any
) -> int:
    from tether.fleet.command import run_router

    host_tls = tls.fleet_client_context(tls.fleet_ca_file(ctx.inv, ctx.config))
    sock = _bind_tcp(host, DEFAULT_PORT if ctx.inv.port is None else ctx.inv.port)
    url = _url(sock, https=tls_files is not None)
    return run_router(
        sock,
        fleet,
        token,
        announce=lambda: _announce(ctx, url, None, token_file, token, role="router"),
        config=ctx.config,
        host_tls=host_tls,
        own_tls=None if tls_files is None else tls.server_context(tls_files),
    )


def _gateway(ctx: Any, acp: AcpBinding | None, token: str, sock: socket.socket) -> Any:
    """The gateway serving on ``sock`` (its Host rule from the address bound)."""
    from tether.serve.app import Gateway
    from tether.serve.stream import HEARTBEAT_S

    allowed = _allowed_hosts(ctx.inv, ctx.config)
    bound = None if ctx.inv.unix else sock.getsockname()
    return Gateway(
        token=token,
        config=ctx.config,
        heartbeat=HEARTBEAT_S,
        ring_entries=_ring_entries(),
        hosts=host_rule(
            None if bound is None else str(bound[0]),
            0 if bound is None else int(bound[1]),
            allowed,
            hostname=socket.gethostname(),
        ),
        acp=acp,
    )


def _run_gateway(
    ctx: Any,
    acp: AcpBinding | None,
    fleet: Any,
    host: str,
    tokens: tuple[str, str | None],
    tls_files: Any,
) -> int:
    """Bind, build the gateway (a fleet host too with ``fleet``) and serve until stopped."""
    import uvicorn

    from tether import _profile
    from tether.serve.app import build_app
    from tether.serve.serving import Release, Server

    inv, (token, token_file) = ctx.inv, tokens
    host_rule(None, 0, _allowed_hosts(inv, ctx.config))  # a bad entry: said before we listen
    sock = (
        _bind_unix(inv.unix)
        if inv.unix
        else _bind_tcp(host, DEFAULT_PORT if inv.port is None else inv.port)
    )
    gateway = _gateway(ctx, acp, token, sock)
    unix_path = os.path.abspath(inv.unix) if inv.unix else None
    release = Release(sock, unix_path, _profile.start("gateway"))  # profile: bench only
    release.stop_launcher = _stop_launcher
    url = _url(sock, https=tls_files is not None)
    dashboard = f"{url}/ui/" if url.startswith("http") else None
    fleet_host: Any = None
    drainer: Any = None
    if fleet is not None:
        try:
            fleet_host, drainer = _fleet_host(fleet, url, gateway, ctx.config)
        except BaseException:
            release()
            raise
    app = build_app(gateway)
    config = uvicorn.Config(
        app if drainer is None else _gated(app, drainer),
        log_level="warning",
        access_log=False,
        # No proxy stands in front of the gateway: X-Forwarded-* from a local client is
        # a claim, and it must never become the peer a terminate records (uvicorn trusts
        # it from 127.0.0.1 by default). One middleware layer fewer on every request, too.
        proxy_headers=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACE_S,
        ssl_certfile=None if tls_files is None else tls_files.cert,
        ssl_keyfile=None if tls_files is None else tls_files.key,
    )
    server = Server(config, gateway, release)
    server.drainer = drainer
    if drainer is not None:
        drainer.server = server
    per_host = _session_hosts(ctx.config)
    if per_host:  # after the fleet host: its id is in our env (and so in the owners')
        release.launcher = gateway.session_hosts = _start_session_hosts(per_host)
    elif _fork_server_enabled(ctx.config):
        release.launcher = gateway.fork_server = _start_fork_server()
    try:
        _announce(ctx, url, dashboard, token_file, token, role="host" if fleet else "gateway")
        server.run(sockets=[sock])
    finally:
        release()  # again, if the server stopped without a signal (or never started)
        if fleet_host is not None:
            fleet_host.stop()
        if drainer is not None:
            from tether.fleet.drain_command import forget_host_record

            forget_host_record()
    return 0


def _fleet_host(fleet: Any, url: str, gateway: Any, config: dict[str, Any]) -> tuple[Any, Any]:
    """Register this host in the fleet and start shipping; its drainer (SIGTERM and
    ``serve --drain`` drain it), with the host recorded in the home for ``--drain``."""
    from tether.fleet.drain_command import record_host
    from tether.fleet.host import FleetHost

    fleet_host = FleetHost(
        fleet.dsn,
        fleet.host_id or os.uname().nodename,
        fleet.advertise or url,
        labels=fleet.labels,
        close_locally=_close_all,
        router_url=fleet.router_url,
        fleet_token=fleet.token,
    )
    # Everything this host starts (owners, keepers, agents) carries its host id: a
    # label for people and tests reading /proc -- never a proof of anything.
    os.environ["TETHER_HOST_ID"] = fleet_host.host_id
    fleet_host.start()
    gateway.fleet_host = fleet_host
    drainer = _drainer(fleet_host, _drain_grace(fleet.drain_grace, config), gateway)
    try:
        record_host(fleet_host.host_id, url, drainer.machine.grace_s)
    except BaseException:
        fleet_host.stop()
        raise
    return fleet_host, drainer


def _fork_server_enabled(config: dict[str, Any]) -> bool:
    """The config's ``serve.ownerForkServer`` (on by default)."""
    return (config.get("serve") or {}).get("ownerForkServer", True) is not False


def _session_hosts(config: dict[str, Any]) -> int:
    """The config's ``serve.sessionHosts``: owners per session host (0, the default: off)."""
    return int((config.get("serve") or {}).get("sessionHosts") or 0)


def _say(line: str) -> None:
    print(f"tether serve: {line}", file=sys.stderr, flush=True)


def _start_fork_server() -> Any:
    """Start the owner fork server and make it this process's owner launcher."""
    from tether import owner_launch
    from tether.forkserver.client import ForkServer

    fork_server = ForkServer(_say)
    fork_server.start()
    owner_launch.set_launcher(fork_server.launch)
    return fork_server


def _start_session_hosts(per_host: int) -> Any:
    """Make a pool of session hosts (started as owners are asked for) the launcher."""
    from tether import owner_launch
    from tether.sessionhost.client import HostPool

    pool = HostPool(per_host, _say)
    owner_launch.set_launcher(pool.launch)
    return pool


def _stop_launcher(launcher: Any) -> None:
    from tether import owner_launch

    owner_launch.set_launcher(None)
    launcher.stop()


def _drain_grace(flag: float | None, config: dict[str, Any]) -> float:
    """``--drain-grace``, else the config's ``serve.drainGrace`` (30 s by default)."""
    if flag is not None:
        return flag
    value = (config.get("serve") or {}).get("drainGrace")
    return float(value) if isinstance(value, int | float) else 30.0


def _drainer(fleet_host: Any, grace_s: float, gateway: Any) -> Any:
    """The host's drain: when it is done the gateway's streams end and the server exits."""
    from tether.fleet.drain import HostDrainer

    drainer: Any = None

    def drained() -> None:
        loop = gateway.loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(gateway.stop)
        drainer.server.should_exit = True

    def log(line: str) -> None:
        print(f"tether serve: {line}", file=sys.stderr, flush=True)

    drainer = HostDrainer(fleet_host, grace_s, on_drained=drained, log=log)
    return drainer


def _gated(app: Any, drainer: Any) -> Any:
    from tether.serve.drain_gate import DrainGate

    return DrainGate(app, drainer)


def _close_all(keys: list[str]) -> None:
    """Close sessions this host no longer owns in the fleet, each by its own proof."""
    from tether import operations
    from tether.errors import TetherError

    for key in keys:
        try:
            operations.close_session(key)
        except TetherError:
            pass  # already gone, or closed by another party meanwhile


_TOKEN_GIVEN = {
    "gateway": "token: as given with --token",
    "router": "token: as given with --token (users); the fleet credential for hosts",
    "host": "token: the fleet credential (users reach this host through a router)",
}


def _announce(
    ctx: Any, url: str, dashboard: str | None, token_file: str | None, token: str, *, role: str
) -> None:
    ctx.output.control(
        {
            "action": "serving",
            "role": role,
            "url": url,
            "dashboard": dashboard,
            "tokenFile": token_file,
            "pid": os.getpid(),
        },
        text=(
            f"serving {url} (pid {os.getpid()}{'' if role == 'gateway' else ', ' + role})\n"
            + (f"dashboard: {dashboard}#token={token}\n" if dashboard and token_file else "")
            + (f"token: {token_file}" if token_file else _TOKEN_GIVEN[role])
        ),
    )
    with contextlib.suppress(OSError):
        sys.stdout.flush()
