"""The two servers ``bench/scale.py`` grows sessions on, behind one small interface.

* :class:`TetherSide` -- ``tether serve`` on a temporary ``TETHER_HOME``: a session is
  ``POST /v1/sessions`` (returns once its owner serves: *create -> ready*), made warm by
  one prompt (the owner starts its agent then); a prompt is ``POST .../prompt`` and its
  SSE stream until the turn ends (``bench/rawhttp.py``, as in ``bench/serve.py``). The
  processes of a session are read from ``GET /v1/sessions/{id}`` (owner, keeper, agent).
* :class:`PeerSide` -- sandbox-agent 0.4.2 on the same mock agent (``bench/serve_peer.py``
  says how it runs offline): a session is an ACP server id with ``initialize`` and
  ``session/new`` (its agent starts on the first POST: *create -> ready* includes it), made
  warm by one prompt; a prompt is one POST that returns at the turn's end. Its processes
  are the server and its descendants (one agent per server id).

Both are measured with the same minimal client. Neither side is ever signalled by
name: each ``stop`` ends the one process this module started (SIGTERM, then SIGKILL on
a timeout), and ``bench/scale.py`` proves afterwards that no descendant is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import rawhttp

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))  # the suite's /proc walk (tests/_proctree.py), reused as it is

from tests import _proctree  # noqa: E402 -- after the path

TETHER = str(Path(sys.executable).parent / "tether")
STOP_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 60.0  # every request is bounded: a hang becomes an error


def smaps_kib(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in KiB; (0, 0) when it is gone."""
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1])
    except OSError:
        return 0, 0
    return pss, rss


def end_process(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM the process we started, SIGKILL it after a timeout, reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)


class TetherSide:
    """``tether serve`` and the sessions created through it."""

    name = "tether"

    def __init__(self, tmp: Path, env: dict[str, str], config: str = "") -> None:
        self.home = tmp / "tether-home"
        self.home.mkdir()
        if config:  # e.g. "[serve]\nownerForkServer = false\n" (bench/idle_memory.py)
            (self.home / "config.toml").write_text(config)
            os.chmod(self.home / "config.toml", 0o600)
        self.cwd = tmp / "project"
        self.cwd.mkdir(exist_ok=True)
        self.err = open(self.home / "serve.err", "wb")  # noqa: SIM115 -- closed in stop()
        self.proc = subprocess.Popen(
            [TETHER, "serve", "--port", "0", "--format", "json"],
            stdout=subprocess.PIPE,
            stderr=self.err,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**env, "TETHER_HOME": str(self.home)},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # its one announcement line
        if not line:
            end_process(self.proc)
            raise RuntimeError("tether serve did not start (see serve.err)")
        self.url = str(json.loads(line)["url"])
        token = (self.home / "serve-token").read_text().strip()
        self.headers = {"Authorization": f"Bearer {token}"}
        self.http = httpx.Client(base_url=self.url, headers=self.headers, timeout=REQUEST_TIMEOUT_S)
        self.sessions: list[str] = []

    def create(self, i: int) -> float:
        """Create session ``i``; seconds until its owner serves."""
        t0 = time.perf_counter()
        r = self.http.post(
            "/v1/sessions", json={"agent": "mock", "cwd": str(self.cwd), "name": f"s{i}"}
        )
        elapsed = time.perf_counter() - t0
        r.raise_for_status()
        self.sessions.append(str(r.json()["id"]))
        return elapsed

    async def prompt(self, i: int) -> None:
        """One warm prompt on session ``i``, POST to the turn's end."""
        await rawhttp.tether_prompt(self.url, self.headers, self.sessions[i])

    def server_pids(self) -> list[int]:
        """The gateway and, when it runs one, its owner fork server (tether.forkserver)."""
        fork_server = self.http.get("/v1/health").json().get("forkServer") or {}
        return [self.proc.pid] + ([fork_server["pid"]] if fork_server.get("pid") else [])

    def session_pids(self) -> dict[str, list[int]]:
        """Every session's processes by role: owner, keeper, agent."""
        out: dict[str, list[int]] = {"own": [], "agents": []}
        for sid in self.sessions:
            status = self.http.get(f"/v1/sessions/{sid}").json()["status"]
            for role, group in (("ownerPid", "own"), ("keeperPid", "own"), ("agentPid", "agents")):
                if isinstance(status.get(role), int):
                    out[group].append(status[role])
        # A session host is the owner of several sessions: counted once.
        return {group: list(dict.fromkeys(pids)) for group, pids in out.items()}

    def stop(self) -> list[str]:
        """Close every session (four at a time), then end the gateway; errors met."""
        errors: list[str] = []

        def close(sid: str) -> None:
            try:
                self.http.delete(f"/v1/sessions/{sid}").raise_for_status()
            except httpx.HTTPError as exc:
                errors.append(f"close {sid[:12]}: {type(exc).__name__}: {exc}")

        if self.proc.poll() is None:
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(close, self.sessions))
        self.http.close()
        end_process(self.proc)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.err.close()
        return errors


class PeerSide:
    """sandbox-agent 0.4.2 and the ACP servers (one agent each) created on it."""

    name = "sandbox-agent"

    def __init__(self, binary: str, tmp: Path, env: dict[str, str]) -> None:
        sys.path.insert(0, str(BENCH))
        import serve_peer

        self.cwd = tmp / "project"
        self.cwd.mkdir(exist_ok=True)
        self.peer = serve_peer.Peer(binary, tmp, env, sys.executable)
        self.url = self.peer.url
        self.proc = self.peer.proc
        self.sessions: list[tuple[str, str]] = []
        self.next_id = 10_000

    def create(self, i: int) -> float:
        """Create server ``s<i>`` with its ACP session; seconds (its agent starts here)."""
        t0 = time.perf_counter()
        session = self.peer.session(f"s{i}", self.cwd)
        elapsed = time.perf_counter() - t0
        self.sessions.append((f"s{i}", session))
        return elapsed

    async def prompt(self, i: int) -> None:
        """One warm prompt on server ``s<i>``: its POST returns at the turn's end."""
        self.next_id += 1  # unique: it keys pending requests by the client's id
        server, session = self.sessions[i]
        await rawhttp.peer_prompt(self.url, server, session, self.next_id)

    def server_pids(self) -> list[int]:
        """sandbox-agent itself: one process."""
        return [self.proc.pid]

    def session_pids(self) -> dict[str, list[int]]:
        """Its agents are its descendants; it has no process of its own per session."""
        agents = [
            p for p, (state, _) in _proctree.descendants(self.proc.pid).items() if state != "Z"
        ]
        return {"own": [], "agents": agents}

    def stop(self) -> list[str]:
        """DELETE every server (until one hangs), then end sandbox-agent (serve_peer)."""
        try:
            self.peer.stop()
        except Exception as exc:
            return [f"stop: {type(exc).__name__}: {exc}"]
        return []


def sandbox_agent_binary(explicit: str | None) -> tuple[str | None, str]:
    """sandbox-agent's Linux binary: the flag's, else the bench's own npm install; why not."""
    candidates = [explicit] if explicit else []
    candidates.append(
        str(
            ROOT / ".cache/sandbox-agent/node_modules/@sandbox-agent/"
            "cli-linux-x64/bin/sandbox-agent"
        )
    )
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path, ""
    return None, (
        "sandbox-agent not found (npm install --prefix .cache/sandbox-agent "
        "@sandbox-agent/cli@0.4.2, or --sandbox-agent BIN): Tether measured alone"
    )
