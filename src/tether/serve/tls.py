"""TLS for ``tether serve``: which files, checked before anything listens.

A gateway, a fleet host or a router serves HTTPS when given a certificate and its key
(``--tls-cert FILE --tls-key FILE``, or ``tlsCert`` / ``tlsKey`` in the config's
``[serve]`` table). The gateway and hosts hand the files to uvicorn (its own
``ssl_certfile`` / ``ssl_keyfile``); a router, which is not uvicorn, wraps its listener
with the same files through :func:`server_context`. We never write a TLS layer.

A router reaches ``https://`` hosts with :func:`fleet_client_context`: the certificate a
host presents must chain to ``--fleet-ca FILE`` (the fleet's own CA) and name the host
of the URL it advertised. Without ``--fleet-ca`` the system's trust store is used, so a
host with a private certificate is refused -- the router's answer says why.

Every file is loaded here once at start, so a wrong path or a key that does not match
its certificate is a usage error before the process announces it serves, never a
traceback from inside the server.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.errors import UsageError


@dataclass(frozen=True, slots=True)
class ServerFiles:
    cert: str
    key: str


def _serve_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    return config.get("serve") or {}


def server_files(inv: Any, config: Mapping[str, Any]) -> ServerFiles | None:
    """The certificate and key to serve HTTPS with (flags before the config), checked.

    Raises:
        UsageError: one without the other, or files that do not load as a pair.
    """
    serve = _serve_config(config)
    cert = inv.tls_cert or serve.get("tlsCert")
    key = inv.tls_key or serve.get("tlsKey")
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise UsageError("--tls-cert and --tls-key go together (or tlsCert and tlsKey)")
    if inv.unix:
        raise UsageError("--tls-cert is for TCP: a --unix socket is reached without TLS")
    files = ServerFiles(cert, key)
    server_context(files)  # loads them: a bad pair is said now
    return files


def server_context(files: ServerFiles) -> ssl.SSLContext:
    """A server-side context holding the certificate chain and its key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(files.cert, files.key)
    except FileNotFoundError:
        # ssl names no file here (its filename is None): say which one is missing.
        missing = [f for f in (files.cert, files.key) if not os.path.exists(f)]
        raise UsageError(
            f"--tls-cert/--tls-key: no such file {' or '.join(missing) or files.cert}"
        ) from None
    except (OSError, ssl.SSLError) as e:
        raise UsageError(
            f"--tls-cert {files.cert} --tls-key {files.key}: cannot load them ({e})"
        ) from None
    return ctx


def fleet_ca_file(inv: Any, config: Mapping[str, Any]) -> str | None:
    """The CA a router trusts hosts' certificates by (``--fleet-ca`` or ``fleetCa``)."""
    ca = inv.fleet_ca or _serve_config(config).get("fleetCa")
    return str(ca) if ca else None


def fleet_client_context(ca_file: str | None) -> ssl.SSLContext:
    """The context a router opens ``https://`` host connections with: certificates are
    verified, host names checked; against ``ca_file`` when given, else the system's.

    Raises:
        UsageError: ``ca_file`` cannot be read or holds no certificate.
    """
    if ca_file is None:
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    except FileNotFoundError:
        raise UsageError(f"--fleet-ca {ca_file}: no such file") from None
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"--fleet-ca {ca_file}: cannot load it ({e})") from None
