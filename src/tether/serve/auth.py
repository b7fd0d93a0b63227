"""The gateway's bearer token and the bind rules, with the standard library only.

A token is always required. Unless one is given (``--token``), the gateway uses the one
stored in ``TETHER_HOME/serve-token`` and creates it (0600, 256 random bits) on first
start; two gateways on one home share it. Binding an address that is not loopback
without an explicit token is refused: a token nobody chose, generated on a machine
someone reaches over the network, is too easy to forget about. TLS is a choice per
deployment: ``--tls-cert``/``--tls-key`` (:mod:`tether.serve.tls`) or a reverse proxy.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets

from tether import paths
from tether.errors import StatePermission, UsageError

TOKEN_FILE = "serve-token"
MIN_TOKEN_CHARS = 16  # a chosen token shorter than this is refused as guessable


def token_path() -> str:
    return os.path.join(paths.home(), TOKEN_FILE)


def load_or_create_token() -> str:
    """The home's stored token, created on first use (0600, never rewritten).

    Raises:
        StatePermission: the token file is readable by others, or cannot be read.
    """
    path = token_path()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return _read_token(path)
    except OSError as exc:
        raise paths.state_error(exc, path) from exc
    token = secrets.token_urlsafe(32)
    try:
        os.write(fd, (token + "\n").encode())
    finally:
        os.close(fd)
    return token


def _read_token(path: str) -> str:
    try:
        st = os.stat(path)
        if st.st_mode & 0o077:
            raise StatePermission(
                f"{path} is readable by other users (mode {st.st_mode & 0o777:o});"
                f" run `chmod 600 {path}` or remove it to get a new token",
                path=path,
            )
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise paths.state_error(exc, path) from exc
    if len(token) < MIN_TOKEN_CHARS:
        # Someone else's half-written file (two first starts at once): wait for it once.
        import time

        time.sleep(0.05)
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
        if len(token) < MIN_TOKEN_CHARS:
            raise StatePermission(f"{path} holds no usable token; remove it", path=path)
    return token


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def choose_token(given: str | None, host: str | None) -> tuple[str, str | None]:
    """The token to require and where it is stored (None when given on the command line).

    Raises:
        UsageError: a non-loopback bind without ``--token``, or a token that is too short.
    """
    if given is not None:
        if len(given) < MIN_TOKEN_CHARS:
            raise UsageError(f"--token must be at least {MIN_TOKEN_CHARS} characters")
        return given, None
    if host is not None and not is_loopback(host):
        raise UsageError(
            f"--host {host} is not a loopback address: give an explicit --token"
            " (and serve TLS: --tls-cert/--tls-key, or a reverse proxy in front)"
        )
    return load_or_create_token(), token_path()


def authorized(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <token>`` (constant time)."""
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), token.encode())
