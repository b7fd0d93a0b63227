"""``tether doctor [--repair]``: check the state directory, and mend what is safe to mend.

Checks, each reported as ``ok``, ``warn`` or ``fail``:

- the state directory (``TETHER_HOME``): it exists, is ours, is not open to others,
  and is writable; ``run/`` and the socket directory likewise;
- free space on its file system;
- the state database: SQLite's ``integrity_check`` (read-only: the check changes
  nothing), the schema version against ours, and its owner and mode;
- the journal: every stored chunk decoded (:mod:`tether.cli._doctor_journal`);
- owner sockets nobody listens on (stale; harmless: the next owner replaces them);
- the configuration files (the same validation every command runs);
- cgroup supervision: whether runs get a cgroup v2 of their own (a writable, delegated
  subtree with ``cgroup.kill``), the same probe a run makes; without one runs are bounded
  by process group, session and keeper, which is a warning, not a failure;
- crash logs written by the CLI's last line of defence, and the notes owners leave when
  ``state.db`` was removed or replaced under them.

``--repair`` acts only where the fix cannot lose anything still in use:

- a damaged database is moved aside, never deleted, with its ``-wal`` and ``-shm``
  (``state.db.corrupt-<UTC time>``), and a fresh one is created. It refuses while an
  owner still answers on a socket: that owner would keep writing to the moved file.
- ``run/`` and the socket directory get their 0700 mode back when they are ours.
- damaged journal chunks are set aside: saved under ``damaged/``, then removed.

Exit status: 0 when nothing failed (after repairs), 1 otherwise.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from typing import Any

from tether import config, paths
from tether.errors import ConfigError, StateError

_LOW_SPACE_WARN = 64 << 20  # below 64 MiB free, say so before SQLite finds out
_LOW_SPACE_FAIL = 1 << 20  # below 1 MiB, writes are about to fail (as in _state_errors)


class Report:
    """The checks run so far and the repairs made."""

    def __init__(self) -> None:
        self.checks: list[dict[str, str]] = []
        self.repaired: list[str] = []

    def add(self, name: str, status: str, detail: str) -> None:
        self.checks.append({"name": name, "status": status, "detail": detail})

    @property
    def failed(self) -> bool:
        return any(c["status"] == "fail" for c in self.checks)


def _directory(report: Report, name: str, path: str, *, repair: bool) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        report.add(name, "ok", f"{path} does not exist yet (created on first use)")
        return
    except OSError as exc:
        report.add(name, "fail", str(paths.state_error(exc, path)))
        return
    if not stat.S_ISDIR(st.st_mode):
        report.add(name, "fail", f"{path} is not a directory")
        return
    if st.st_uid != os.geteuid():
        report.add(name, "fail", f"{paths.owner_of(path)}, not to you: use a TETHER_HOME of yours")
        return
    if not os.access(path, os.W_OK | os.X_OK):
        report.add(name, "fail", f"{path} is not writable ({paths.owner_of(path)})")
        return
    mode = st.st_mode & 0o777
    if mode & 0o077:
        if repair:
            os.chmod(path, 0o700)
            report.repaired.append(f"chmod 0700 {path} (was {mode:04o})")
            report.add(name, "ok", f"{path} (mode fixed to 0700)")
        else:
            report.add(name, "warn", f"{path} is mode {mode:04o}; expected 0700 (--repair fixes)")
        return
    report.add(name, "ok", path)


def _free_space(report: Report, home: str) -> None:
    try:
        st = os.statvfs(home if os.path.isdir(home) else os.path.dirname(home))
    except OSError as exc:
        report.add("disk space", "warn", f"cannot tell: {exc.strerror}")
        return
    free = st.f_bavail * st.f_frsize
    status = "fail" if free < _LOW_SPACE_FAIL else "warn" if free < _LOW_SPACE_WARN else "ok"
    report.add("disk space", status, f"{free // (1 << 20)} MiB free under {home}")


def database_problem(path: str) -> tuple[str, str]:
    """``(status, detail)`` for the database at ``path``, read-only: nothing is changed."""
    from tether.state.inspect import integrity
    from tether.state.registry import SCHEMA_VERSION

    try:
        rows, version = integrity(path)
    except StateError as exc:
        return "fail", str(exc)
    if rows != ["ok"]:
        return "fail", f"{path} is damaged: {'; '.join(rows[:3])} (--repair moves it aside)"
    if version > SCHEMA_VERSION:
        return "fail", f"{path} has schema v{version}, newer than this Tether's v{SCHEMA_VERSION}"
    st = os.stat(path)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return "warn", f"{path}: {paths.owner_of(path)}; expected yours, mode 0600"
    migrate = "" if version == SCHEMA_VERSION else f" (v{version}: migrated on next use)"
    return "ok", f"{path}: integrity ok, schema v{version}{migrate}"


def _database(report: Report, path: str) -> bool:
    """Check the database; True when it is damaged (what --repair can fix)."""
    if not os.path.exists(path):
        report.add("state database", "ok", f"{path} does not exist yet (created on first use)")
        return False
    status, detail = database_problem(path)
    report.add("state database", status, detail)
    _stopped_writer(report, path)
    return status == "fail" and ("damaged" in detail or "not a database" in detail)


def _stopped_writer(report: Report, path: str) -> None:
    """A process stopped while holding the write lock wedges every writer on the host."""
    from tether.state.lock_holders import describe_holders

    stopped = describe_holders(path, stopped_only=True)
    if stopped is not None:
        report.add(
            "state database lock",
            "fail",
            f"held by {stopped}: every write on this host waits for it (STATE_BUSY);"
            " continue or end it",
        )


def _live_sockets(directory: str) -> tuple[list[str], list[str]]:
    """``(live, stale)`` owner sockets in ``directory``: connect, nothing else."""
    live: list[str] = []
    stale: list[str] = []
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".sock"))
    except OSError:
        return live, stale
    for name in names:
        path = os.path.join(directory, name)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            stale.append(path)
        except OSError:
            live.append(path)  # it exists and may be busy: count it as in use
        else:
            live.append(path)
        finally:
            probe.close()
    return live, stale


def _config(report: Report, cwd: str) -> None:
    warnings: list[str] = []
    try:
        config.load(cwd, warn=warnings.append)
    except ConfigError as exc:
        report.add("configuration", "fail", str(exc))
        return
    for warning in warnings:
        report.add("configuration", "warn", warning)
    if not warnings:
        report.add("configuration", "ok", "valid")


def _cgroups(report: Report) -> None:
    from tether.supervise.cgroups import probe_cgroup

    mount, reason = probe_cgroup()
    if mount is not None:
        report.add("cgroup supervision", "ok", f"{reason}: each run gets its own cgroup")
    else:
        report.add(
            "cgroup supervision",
            "warn",
            f"{reason}: runs are bounded by process group, session and keeper, without"
            " a cgroup of their own (no cgroup.kill)",
        )


def _crash_logs(report: Report, home: str) -> None:
    logs = os.path.join(home, "logs")
    try:
        crashes = sorted(n for n in os.listdir(logs) if n.startswith("crash-"))
    except OSError:
        crashes = []
    if crashes:
        report.add(
            "crash logs",
            "warn",
            f"{len(crashes)} in {logs}; latest {crashes[-1]} (please report it)",
        )


def _state_lost(report: Report, home: str) -> None:
    """Notes owners left when they found ``state.db`` removed or replaced under them
    (:mod:`tether.owner.state_watch`)."""
    logs = os.path.join(home, "logs")
    try:
        notes = sorted(n for n in os.listdir(logs) if n.startswith("state-lost-"))
    except OSError:
        notes = []
    if not notes:
        return
    try:
        with open(os.path.join(logs, notes[-1]), encoding="utf-8", errors="replace") as f:
            last = f.read(1000).strip()
    except OSError:
        last = notes[-1]
    report.add(
        "state database",
        "warn",
        f"{len(notes)} time(s) an owner found it removed or replaced under it and stopped;"
        f" the latest: {last}. What was recorded before is gone; delete"
        f" {os.path.join(logs, 'state-lost-*')} once read",
    )


def _move_aside(path: str) -> list[str]:
    """Rename ``path`` and its ``-wal``/``-shm`` to ``path.corrupt-<UTC time>``; list moves."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for suffix in ("", "-wal", "-shm"):
        source = path + suffix
        if os.path.exists(source):
            target = f"{path}.corrupt-{stamp}{suffix}"
            os.rename(source, target)
            moved.append(f"moved {source} aside to {target}")
    return moved


def _repair_database(report: Report, path: str) -> None:
    live, _ = _live_sockets(paths.socket_dir_path())
    if live:
        report.add(
            "repair",
            "fail",
            f"{len(live)} session owner(s) still answer ({', '.join(live[:3])}); they would"
            " keep writing to the damaged file. Close those sessions (`tether sessions close`)"
            " and run `tether doctor --repair` again.",
        )
        return
    from tether.state.registry import Registry

    report.repaired.extend(_move_aside(path))
    try:
        Registry(path).close()
    except StateError as exc:
        report.add("repair", "fail", f"a fresh database could not be created: {exc}")
        return
    report.repaired.append(
        f"started a fresh state database at {path}; the sessions and leases recorded in"
        " the old one are not carried over (processes they named are not signalled)"
    )
    report.checks = [c for c in report.checks if c["name"] != "state database"]
    status, detail = database_problem(path)
    report.add("state database", status, detail)


def diagnose(cwd: str, *, repair: bool = False) -> Report:
    """Run every check (and, with ``repair``, the safe repairs); never raises StateError."""
    report = Report()
    home = paths.home_path()
    _directory(report, "state directory", home, repair=repair)
    if any(c["status"] == "fail" for c in report.checks):
        return report  # nothing below can be read or mended
    run = os.path.join(home, "run")
    _directory(report, "run directory", run, repair=repair)
    sockets = paths.socket_dir_path()
    if sockets != run:
        _directory(report, "socket directory", sockets, repair=repair)
    _free_space(report, home)
    database = os.path.join(home, "state.db")
    damaged = _database(report, database)
    if os.path.exists(database) and not damaged:
        from tether.cli._doctor_journal import check_journal

        check_journal(report, database, repair=repair)
    _, stale = _live_sockets(sockets)
    if stale:
        report.add(
            "owner sockets",
            "warn",
            f"{len(stale)} stale (no owner listens; the next owner replaces them): {stale[0]}",
        )
    _state_lost(report, home)
    _config(report, cwd)
    _cgroups(report)
    _crash_logs(report, home)
    if damaged and repair:
        _repair_database(report, database)
    elif damaged:
        report.add(
            "recovery",
            "warn",
            "`tether doctor --repair` moves the damaged database aside (nothing is deleted)"
            " and starts a fresh one",
        )
    return report


def run_doctor(inv: Any, output: Any, cwd: str) -> int:
    """The ``doctor`` command: print the report in the chosen format."""
    report = diagnose(cwd, repair=inv.repair)
    marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
    lines = [f"{marks[c['status']]} {c['name']}: {c['detail']}" for c in report.checks]
    lines += [f"repaired: {what}" for what in report.repaired]
    output.control(
        {
            "action": "doctor",
            "ok": not report.failed,
            "checks": report.checks,
            "repaired": report.repaired,
            "home": paths.home_path(),
        },
        text="\n".join(lines),
        quiet="ok" if not report.failed else "fail",
    )
    return 1 if report.failed else 0
