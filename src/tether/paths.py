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

import hashlib
import os
from pathlib import Path

_SUN_PATH_MAX = 100  # 108 in the kernel; leave room for the socket file name


def home() -> Path:
    """The state directory (created 0700 on first use)."""
    env = os.environ.get("TETHER_HOME")
    if env:
        path = Path(env).expanduser().absolute()
    else:
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        path = Path(base) / "tether"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def state_db() -> Path:
    return home() / "state.db"


def run_dir() -> Path:
    """0700 directory for lock files."""
    path = home() / "run"
    path.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def socket_dir() -> Path:
    """0700 directory for owner sockets, short enough for ``sun_path``."""
    path = run_dir()
    if len(str(path)) + 24 <= _SUN_PATH_MAX:
        return path
    digest = hashlib.sha256(str(home()).encode()).hexdigest()[:12]
    short = Path("/tmp") / f"tether-{os.getuid()}-{digest}"  # noqa: S108 -- 0700, owner-checked below
    short.mkdir(mode=0o700, exist_ok=True)
    os.chmod(short, 0o700)
    return short


def logs_dir() -> Path:
    path = home() / "logs"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def user_config_file() -> Path:
    if os.environ.get("TETHER_HOME"):
        return home() / "config.toml"
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tether" / "config.toml"


def project_config_file(cwd: Path) -> Path:
    return cwd / ".tether.toml"
