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

TYPE_CHECKING = False  # typing costs milliseconds on the thin CLI path; mypy reads the name
if TYPE_CHECKING:
    from tether.errors import TetherError

_SUN_PATH_MAX = 100  # 108 in the kernel; leave room for the socket file name

# Paths are plain strings on purpose: pathlib drags urllib.parse and friends into the
# thin CLI path (several milliseconds), and these are only ever joined and opened.


def _mkdir(path: str) -> str:
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise state_error(exc, path) from exc
    return path


def _chmod(path: str, mode: int) -> None:
    try:
        os.chmod(path, mode)
    except OSError as exc:
        raise state_error(exc, path) from exc


def owner_of(path: str) -> str:
    """Who owns ``path`` (or its nearest existing parent), for error messages.

    Returns e.g. ``"/srv/tether belongs to root (mode 0700)"``; never raises.
    """
    probe = os.path.abspath(path)
    st: os.stat_result | None = None
    while st is None:
        try:
            st = os.stat(probe)
        except OSError:
            parent = os.path.dirname(probe)
            if parent == probe:
                return f"{path}: owner unknown"
            probe = parent
    import pwd  # a small C module, only on this error path

    try:
        who = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        who = f"uid {st.st_uid}"
    return f"{probe} belongs to {who} (mode {st.st_mode & 0o7777:04o})"


def _me() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def state_error(exc: OSError, path: str) -> TetherError:
    """Translate an OS error on a state path into the ``StateError`` family.

    The one place where OS errors about TETHER_HOME become Tether errors (the registry
    does the same for sqlite3's); the message names the path, the owner and the way out.
    """
    import errno

    from tether.errors import StateError, StateFull, StatePermission

    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return StatePermission(
            f"cannot use the state directory: {reason}: {path}; {owner_of(path)} and you"
            f" are {_me()}. Set TETHER_HOME to a directory of your own.",
            path=path,
        )
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return StateFull(
            f"no space left for Tether's state: {reason}: {path}. Free some space and"
            " retry; nothing was half-written.",
            path=path,
        )
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        # makedirs says "File exists" of a file where a directory (or its parent) goes
        return StateError(
            f"cannot use the state directory: {path} (or a directory above it) exists and"
            " is not a directory. Set TETHER_HOME to a directory.",
            path=path,
        )
    return StateError(f"cannot use the state directory: {reason}: {path}", path=path)


_home_override: ContextVar[str | None] = ContextVar("tether_home", default=None)


FileId = tuple[int, int]  # (st_dev, st_ino): which file is at a path


def file_id(path: str) -> FileId | None:
    """Which file is at ``path`` now, or None if none is. Other errors propagate: an
    unreadable path is no verdict."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def use_home(path: str | None) -> Token[str | None]:
    """Make ``path`` the home for this context (the library's ``Client(home=...)``)."""
    return _home_override.set(os.path.abspath(os.path.expanduser(path)) if path else None)


def reset_home(token: Token[str | None]) -> None:
    _home_override.reset(token)


def home_path() -> str:
    """The state directory's path, without creating it."""
    override = _home_override.get()
    if override:
        return override
    env = os.environ.get("TETHER_HOME")
    if env:
        return os.path.abspath(os.path.expanduser(env))
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(base, "tether")


def home() -> str:
    """The state directory (created 0700 on first use)."""
    return _mkdir(home_path())


def state_db() -> str:
    return os.path.join(home(), "state.db")


def run_dir() -> str:
    """0700 directory for lock files."""
    path = _mkdir(os.path.join(home(), "run"))
    _chmod(path, 0o700)
    return path


def members_dir_path(home_dir: str | None = None) -> str:
    """Where recorded run members leave a mark (``run/members``), without creating it.

    One empty file per member, named ``PID.STARTTIME``: the requester hint
    (:func:`tether.policy.access.could_be_agent`) checks a process's chain against it with a
    ``stat`` per hop -- no database on the thin path. The registry's ``run_members``
    table is the record; these marks follow it.
    """
    return os.path.join(home_dir or home_path(), "run", "members")


def socket_dir_path() -> str:
    """Where :func:`socket_dir` is, without creating or changing anything."""
    home_dir = home_path()
    path = os.path.join(home_dir, "run")
    if len(path) + 30 <= _SUN_PATH_MAX:
        return path
    digest = sha256_hex(home_dir)[:12]
    return f"/tmp/tether-{os.getuid()}-{digest}"  # noqa: S108 -- 0700, see socket_dir


def socket_dir() -> str:
    """0700 directory for owner sockets, short enough for ``sun_path``."""
    path = run_dir()
    short = socket_dir_path()
    if short == path:
        return path
    _mkdir(short)
    _chmod(short, 0o700)
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
