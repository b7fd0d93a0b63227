"""A real PostgreSQL for the fleet tests: Debian's server binaries, a cluster in a
temporary directory, listening on 127.0.0.1 only, started and stopped by pid.

As root (CI, our machines) the server runs as ``nobody``: PostgreSQL refuses to run as
root. Everything the tests rely on is set here, not inherited: no autovacuum or
parallel workers (a worker forked at the end of a test would look like a process the
test leaked), fsync off (a test cluster, thrown away).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psycopg

from tests import _proctree

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def find_bindir() -> Path | None:
    """The newest installed server's bin directory (Debian: /usr/lib/postgresql/N/bin)."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("postgres")
    return Path(found).resolve().parent if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One cluster: ``start()``, ``stop()``, ``start()`` again (same data), ``dsn(db)``."""

    def __init__(self, base: Path, bindir: Path) -> None:
        self.bindir = bindir
        self.base = base
        self.data = base / "data"
        self.sockets = base / "sockets"
        self.log = base / "server.log"
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._as_nobody = os.geteuid() == 0

    def _demote(self) -> list[str]:
        if not self._as_nobody:
            return []
        return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]

    def init(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.sockets.mkdir(exist_ok=True)
        if self._as_nobody:
            nobody = pwd.getpwnam("nobody")
            for p in (self.base.parent, self.base, self.sockets):
                os.chown(p, nobody.pw_uid, nobody.pw_gid)
        r = subprocess.run(
            [*self._demote(), str(self.bindir / "initdb"), "-D", str(self.data), "-U", "tether",
             "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed: {r.stderr.strip() or r.stdout.strip()}")

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        logf = open(self.log, "ab")  # noqa: SIM115 -- handed to the child, closed below
        try:
            self.proc = subprocess.Popen(
                [*self._demote(), str(self.bindir / "postgres"), "-D", str(self.data),
                 "-p", str(self.port), "-k", str(self.sockets),
                 "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                 "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                 "-c", "autovacuum=off", "-c", "max_parallel_workers_per_gather=0",
                 "-c", "max_connections=300", "-c", "shared_buffers=32MB"],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
            )  # fmt: skip
        finally:
            logf.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                psycopg.connect(self.dsn("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    tail = self.log.read_text(errors="replace")[-2000:]
                    self.stop()
                    raise RuntimeError(f"PostgreSQL did not start:\n{tail}") from None
                time.sleep(0.05)

    def dsn(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=tether dbname={dbname}"

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self) -> None:
        """Fast shutdown of the server we started; whatever of it outlives that is ended
        by (pid, start time), never by name."""
        proc = self.proc
        if proc is None:
            return
        tree = _proctree.live_descendants_of(proc.pid)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # our own child: PostgreSQL's fast shutdown
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
        leftovers = {p: s for p, s in tree.items() if _proctree.is_alive(p, s[1])}
        if leftovers:
            _proctree.kill_verified(leftovers)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the postmaster we started (fault injection), then end what it left."""
        assert self.proc is not None
        tree = _proctree.live_descendants_of(self.proc.pid)
        self.proc.kill()
        self.proc.wait(STOP_TIMEOUT_S)
        self.proc = None
        leftovers = {p: s for p, s in tree.items() if _proctree.is_alive(p, s[1])}
        if leftovers:
            _proctree.kill_verified(leftovers)
