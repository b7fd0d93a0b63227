"""Where Tether keeps things. ``TETHER_HOME`` relocates all of it (the tests always set it).

Layout under the home::

    state.db        SQLite (WAL): instance id, sessions, owners, leases, events, counters
    run/            0700: per-session lock files and sockets (0600)
    logs/           one structured log per session owner
    config.toml     when TETHER_HOME is set, the user config lives here too

Without ``TETHER_HOME``: state under ``$XDG_STATE_HOME/tether`` (``~/.local/state/tether``),
config at ``$XDG_CONFIG_HOME/tether/config.toml``.

Unix socket paths are limited to 108 bytes (``sun_path``); a deep home (pytest's tmp
dirs) would overflow it, so sockets move to a short 0700 directory under ``/tmp`` keyed
by a hash of the home -- acpx does the same for the same reason.

Standard library only: this module is on the thin CLI path.
"""

from __future__ import annotations

import os
from contextvars import ContextVar, Token

from tether._hash import sha256_hex

_SUN_PATH_MAX = 100  # 108 in the kernel; leave room for the socket file name

# Paths are plain strings on purpose: pathlib drags urllib.parse and friends into the
# thin CLI path (several milliseconds), and these are only ever joined and opened.


def _mkdir(path: str) -> str:
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


_home_override: ContextVar[str | None] = ContextVar("tether_home", default=None)


def use_home(path: str | None) -> Token[str | None]:
    """Make ``path`` the home for this context (the library's ``Client(home=...)``)."""
    return _home_override.set(os.path.abspath(os.path.expanduser(path)) if path else None)


def reset_home(token: Token[str | None]) -> None:
    _home_override.reset(token)


def home() -> str:
    """The state directory (created 0700 on first use)."""
    override = _home_override.get()
    if override:
        return _mkdir(override)
    env = os.environ.get("TETHER_HOME")
    if env:
        path = os.path.abspath(os.path.expanduser(env))
    else:
        base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        path = os.path.join(base, "tether")
    return _mkdir(path)


def state_db() -> str:
    return os.path.join(home(), "state.db")


def run_dir() -> str:
    """0700 directory for lock files."""
    path = _mkdir(os.path.join(home(), "run"))
    os.chmod(path, 0o700)
    return path


def socket_dir() -> str:
    """0700 directory for owner sockets, short enough for ``sun_path``."""
    path = run_dir()
    if len(path) + 30 <= _SUN_PATH_MAX:
        return path
    digest = sha256_hex(home())[:12]
    short = _mkdir(f"/tmp/tether-{os.getuid()}-{digest}")  # noqa: S108 -- 0700, chmod below
    os.chmod(short, 0o700)
    return short


def logs_dir() -> str:
    return _mkdir(os.path.join(home(), "logs"))


def user_config_file() -> str:
    if _home_override.get() or os.environ.get("TETHER_HOME"):
        return os.path.join(home(), "config.toml")
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return os.path.join(base, "tether", "config.toml")


def project_config_file(cwd: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(cwd), ".tether.toml")
