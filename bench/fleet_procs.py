"""The processes of ``bench/fleet.py``: a real PostgreSQL (the fleet tests' own harness,
``tests/fleet/_pg.py``), hosts and routers as real ``tether serve`` processes, and the
end of all of them by the pids we started.

The bench makes itself a child subreaper, so every owner, keeper and agent a host
starts stays our descendant even when its host dies: the final ``/proc`` walk of our
children finds whatever is left, and only those processes (same pid, same start time)
are ever signalled.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the fleet tests' PostgreSQL harness, reused as it is

from tests import _proctree  # noqa: E402 -- after the path
from tests.fleet._pg import PostgresServer, find_bindir  # noqa: E402

TETHER = str(Path(sys.executable).parent / "tether")
USER_TOKEN = "bench-user-token-of-the-routers-0123456789"
FLEET_TOKEN = "bench-fleet-credential-0123456789abcdef"
STOP_TIMEOUT_S = 20.0
START_TIMEOUT_S = 60.0


def mem_available_kib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def pss_kib(pids: list[int]) -> int:
    """Proportional set size summed over ``pids`` (shared pages counted once overall)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue  # gone meanwhile
    return total


class Server:
    """One ``tether serve`` we started: a host or a router, its URL and a client."""

    def __init__(
        self,
        name: str,
        home: Path,
        args: list[str],
        env: dict[str, str],
        token: str,
        verify: Any = True,
    ):
        self.name = name
        self.home = home
        self.args = args
        self.token = token
        self.headers = {"Authorization": f"Bearer {token}"}
        home.mkdir(parents=True, exist_ok=True)
        with open(home / "serve.err", "ab") as err:
            self.proc = subprocess.Popen(
                [TETHER, "serve", "--port", "0", "--format", "json", *args],
                stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True,
                env={**env, "TETHER_HOME": str(home)},
            )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the server's one announcement line
        if not line:
            self.proc.wait(STOP_TIMEOUT_S)
            raise RuntimeError(f"{name} did not start: {(home / 'serve.err').read_text()[-2000:]}")
        self.url = str(json.loads(line)["url"])
        self.http = httpx.Client(base_url=self.url, headers=self.headers, timeout=60, verify=verify)

    def close_all(self) -> int:
        """Close every session this server lists (a host: its own ones); how many."""
        r = self.http.get("/v1/sessions")
        if r.status_code != 200:
            return 0
        ids = [s["id"] for s in r.json()["sessions"]]
        for sid in ids:
            self.http.delete(f"/v1/sessions/{sid}", timeout=60)
        return len(ids)

    def stop(self) -> None:
        """SIGTERM the server we started (SIGCONT first: it may be the frozen one), reap."""
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Fleet:
    """PostgreSQL, hosts and routers, all ours; :meth:`end` ends every one of them."""

    def __init__(self) -> None:
        _proctree.become_subreaper()
        self.base = Path(tempfile.mkdtemp(prefix="tether-bench-fleet-"))
        self.project = self.base / "project"
        self.project.mkdir()
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL server binaries (Debian: apt-get install postgresql)")
        # Its own temporary directory, as the tests' fixture does: the server runs as
        # nobody when we are root, and mkdtemp's 0700 directory is chowned to it.
        self.pg_base = Path(tempfile.mkdtemp(prefix="tether-bench-fleet-pg-"))
        self.pg = PostgresServer(self.pg_base / "cluster", bindir)
        self.hosts: dict[str, Server] = {}
        self.routers: list[Server] = []
        self.dsn = ""
        self.env: dict[str, str] = {}

    def start_index(self) -> None:
        self.pg.init()
        self.pg.start()
        self.dsn = self.pg.create_database("fleet")
        self.env = {
            **os.environ,
            "TETHER_FLEET_INDEX": self.dsn,
            "TETHER_FLEET_TOKEN": FLEET_TOKEN,
            "PYTHONUNBUFFERED": "1",
        }

    def host(
        self, host_id: str, *labels: str, extra: tuple[str, ...] = (), verify: Any = True
    ) -> Server:
        """A host; ``extra`` flags (``--tls-cert``...), ``verify`` for our client of it."""
        flags = ["--host-id", host_id, *(f"--label={label}" for label in labels), *extra]
        gw = Server(host_id, self.base / "hosts" / host_id, flags, self.env, FLEET_TOKEN, verify)
        self.hosts[host_id] = gw
        return gw

    def router(self, *extra: str) -> Server:
        name = f"router{len(self.routers)}"
        gw = Server(name, self.base / name, ["--router", "--token", USER_TOKEN, *extra],
                    self.env, USER_TOKEN)  # fmt: skip
        self.routers.append(gw)
        return gw

    def retire(self, server: Server) -> None:
        """Close a server's sessions and stop it for good (a host deregisters)."""
        if server in self.routers:
            self.routers.remove(server)
        else:
            server.close_all()
            del self.hosts[server.name]
        server.stop()

    def wait_available(self, *host_ids: str) -> None:
        """Until every router sees each of ``host_ids`` available."""
        deadline = time.monotonic() + START_TIMEOUT_S
        for router in self.routers:
            while True:
                hosts = router.http.get("/v1/fleet/hosts").json()["hosts"]
                if set(host_ids) <= {h["hostId"] for h in hosts if h["available"]}:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{router.name} never saw {host_ids} available")
                time.sleep(0.05)

    def end(self) -> dict[str, Any]:
        """Close every session, stop every server and PostgreSQL, prove nothing is left.

        A host we killed comes back on its storage under its id to close what its owners
        still run (owners outlive a gateway, as they should); then everything stops.
        """
        report: dict[str, Any] = {"errors": []}

        def attempt(what: str, fn: Any) -> None:
            try:
                fn()
            except Exception as e:
                report["errors"].append(f"{what}: {type(e).__name__}: {e}")

        for router in self.routers:
            attempt(f"stop {router.name}", router.stop)
        for host_id, gw in list(self.hosts.items()):
            if gw.proc.poll() is None:
                gw.proc.send_signal(signal.SIGCONT)  # harmless unless it was frozen
            else:
                attempt(f"reap {host_id}", gw.stop)
                attempt(f"restart {host_id}", lambda h=host_id, g=gw: self._restart(h, g))
        for host_id, gw in list(self.hosts.items()):
            attempt(f"close {host_id}'s sessions", lambda g=gw: g.close_all())
            attempt(f"stop {host_id}", self.hosts[host_id].stop)
        attempt("stop PostgreSQL", self.pg.stop)
        survivors = _proctree.wait_for_no_new_descendants(set(), timeout=30)
        report["survivors"] = sorted(survivors)
        if survivors:
            _proctree.kill_verified(survivors)  # by (pid, start time), our descendants only
        report["survivors_after_kill"] = sorted(_proctree.wait_for_no_new_descendants(set(), 10))
        shutil.rmtree(self.base, ignore_errors=True)
        shutil.rmtree(self.pg_base, ignore_errors=True)
        return report

    def _restart(self, host_id: str, gw: Server) -> None:
        self.hosts[host_id] = Server(host_id, gw.home, gw.args, self.env, FLEET_TOKEN)


def descendant_pids() -> list[int]:
    return sorted(_proctree.live_descendants())
