"""sandbox-agent 0.4.2 on the same mock agent, for ``bench/serve.py --sandbox-agent BIN``.

How it runs offline (``shared/notes/multi-party.md`` §6): its Linux binary from npm
(``npm install --prefix .cache/sandbox-agent @sandbox-agent/cli@0.4.2``), a private
``HOME`` where ``install-agent mock`` writes the launcher script
``~/.local/share/sandbox-agent/bin/agent_processes/mock-acp``, which we replace with one
that execs Tether's mock agent. Its API is ACP over HTTP: ``POST /v1/acp/{id}?agent=mock``
(JSON-RPC in; the answer in the response), ``GET /v1/acp/{id}`` (SSE: every frame from
the agent, from a 1,024-entry in-memory ring), ``DELETE /v1/acp/{id}``.

What differs from Tether's figures: its prompt POST blocks until the turn ends (one
120 s timeout on every request), so its round trip is the POST alone; it keeps no
journal (replay is the in-memory ring only); there is no token here (``--no-token``).
The agent is the same: sandbox-agent runs Tether's Python mock agent as its child (one
per server; checked in its process tree), talking to it over stdio from Rust, where
Tether has a gateway, an owner process per session and a journal in between.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

MOCK = '#!/bin/sh\nexec {python} -m tether.testing.mock_agent "$@"\n'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Peer:
    def __init__(self, binary: str, tmp: Path, env: dict[str, str], python: str) -> None:
        home = tmp / "sa-home"
        home.mkdir()
        self.env = {**env, "HOME": str(home)}
        subprocess.run(
            [binary, "install-agent", "mock"], env=self.env, check=True, capture_output=True
        )
        launcher = home / ".local/share/sandbox-agent/bin/agent_processes/mock-acp"
        launcher.write_text(MOCK.format(python=python))
        os.chmod(launcher, 0o755)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [binary, "server", "--no-token", "--no-telemetry", "-p", str(port)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.http = httpx.Client(base_url=self.url, timeout=60)  # a hang becomes an error
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if self.http.get("/v1/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        self.ids: list[str] = []
        self.next_id = 100

    def rpc(self, server: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        query = "?agent=mock" if server not in self.ids else ""
        if server not in self.ids:
            self.ids.append(server)
        r = self.http.post(
            f"/v1/acp/{server}{query}",
            json={"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params},
        )
        r.raise_for_status()
        return dict(r.json())

    def session(self, server: str, cwd: Path) -> str:
        self.rpc(server, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        return str(
            self.rpc(server, "session/new", {"cwd": str(cwd), "mcpServers": []})["result"][
                "sessionId"
            ]
        )

    def prompt(self, server: str, session: str, text: str) -> dict[str, Any]:
        blocks = [{"type": "text", "text": text}]
        return self.rpc(server, "session/prompt", {"sessionId": session, "prompt": blocks})

    def stop(self) -> None:
        """DELETE every server (until one hangs), then end the process we started."""
        for server in self.ids:
            try:
                self.http.delete(f"/v1/acp/{server}", timeout=5)
            except httpx.TransportError:
                break  # it stopped answering: ending it ends its agents (stdin EOF)
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


def rtt(peer: Peer, server: str, session: str, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        peer.prompt(server, session, "echo hi")
        out.append(time.perf_counter() - t0)
    return out


def relay(peer: Peer, server: str, session: str, chunks: int) -> tuple[float, int, bool]:
    """(updates/s at an SSE client during a ``chunks``-chunk turn, updates it received,
    whether the prompt's POST returned)."""
    host, port = peer.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        f"GET /v1/acp/{server} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    sock.recv(65536)
    sock.settimeout(10)
    import threading

    done = threading.Event()

    def post() -> None:
        try:
            peer.prompt(server, session, f"stream {chunks} x")
        except httpx.HTTPError:
            return  # no answer within the client's 60 s: reported as not returned
        done.set()

    thread = threading.Thread(target=post)
    first = None
    seen = 0
    thread.start()
    while seen < chunks:
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            break
        if not data:
            break
        if first is None:
            first = time.perf_counter()
        seen += data.count(b'"agent_message_chunk"')
    end = time.perf_counter()
    thread.join()
    sock.close()
    return (seen / (end - first) if first else 0.0), seen, done.is_set()


async def concurrent(peer: Peer, pairs: list[tuple[str, str]]) -> list[float]:
    """One prompt on each server at once (its POST returns at the turn's end), with the
    same minimal client as Tether's figure (``rawhttp``)."""
    import rawhttp

    base = int(time.time() * 1000) % 1_000_000 * 1000
    return await rawhttp.timed(
        rawhttp.peer_prompt(peer.url, s, sess, base + i) for i, (s, sess) in enumerate(pairs)
    )


def idle_streams(peer: Peer, servers: list[str], count: int) -> int:
    """Open ``count`` SSE connections; how many got ``200`` and stay open."""
    host, port = peer.url.removeprefix("http://").split(":")
    socks = []
    for i in range(count):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(
            f"GET /v1/acp/{servers[i % len(servers)]} HTTP/1.1\r\nHost: x\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        socks.append(sock)
    import selectors

    held = 0
    waiting = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        waiting.register(sock, selectors.EVENT_READ)
    deadline = time.monotonic() + 60
    while waiting.get_map() and time.monotonic() < deadline:
        for key, _ in waiting.select(timeout=1):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                if sock.recv(4096).startswith(b"HTTP/1.1 200"):
                    held += 1
            except OSError:
                pass
            waiting.unregister(sock)
    waiting.close()
    for sock in socks:
        sock.close()
    return held
