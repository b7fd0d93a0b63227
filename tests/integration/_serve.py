"""A real ``tether serve`` process for tests, and an HTTP client of it.

The gateway runs as a subprocess on a free loopback port of the test's own
``TETHER_HOME``; stopping it closes every session it still lists (so their owners and
agents end), then SIGTERMs the process we started and reaps it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import python_env


class Gateway:
    """One running gateway: its process, URL and token, and an authorized client."""

    def __init__(self, proc: subprocess.Popen[str], url: str, token: str, home: Path) -> None:
        self.proc = proc
        self.url = url
        self.token = token
        self.home = home
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0
        )

    def ensure(self, cwd: Path, name: str = "", agent: str = "mock", **extra: Any) -> str:
        r = self.http.post(
            "/v1/sessions", json={"agent": agent, "cwd": str(cwd), "name": name, **extra}
        )
        assert r.status_code in (200, 201), r.text
        return str(r.json()["id"])

    def prompt(self, sid: str, text: str) -> dict[str, Any]:
        r = self.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": text})
        assert r.status_code == 202, r.text
        return dict(r.json())

    def events(
        self, sid: str, *, query: str = "", last_id: int | None = None
    ) -> Iterator[tuple[str, Any]]:
        """``(event, data)`` pairs of the session's SSE stream (data decoded from JSON)."""
        headers = {"Last-Event-ID": str(last_id)} if last_id is not None else {}
        with self.http.stream("GET", f"/v1/sessions/{sid}/events{query}", headers=headers) as r:
            assert r.status_code == 200, r.read()
            assert r.headers["content-type"].startswith("text/event-stream")
            yield from parse_sse(r.iter_lines())

    def until_turn_end(self, sid: str, rid: str, *, query: str = "") -> list[dict[str, Any]]:
        """Entries from the stream until the turn ``rid`` has ended."""
        out = []
        for event, data in self.events(sid, query=query):
            if event != "message":
                continue
            out.append(data)
            if data["kind"] == "turn_ended" and data.get("requestId") == rid:
                return out
        raise AssertionError("the stream ended before the turn did")

    def close_all(self) -> None:
        r = self.http.get("/v1/sessions")
        if r.status_code == 200:
            for item in r.json()["sessions"]:
                self.http.delete(f"/v1/sessions/{item['id']}")

    def stop(self) -> int:
        """SIGTERM the gateway we started, reap it; its exit code."""
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code

    def stderr(self) -> str:
        return (self.home / f"serve-{self.proc.pid}.err").read_text()


def parse_sse(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    event, data, comment = "message", [], False
    for line in lines:
        if line == "":
            if data:
                yield event, json.loads("\n".join(data))
            elif comment:
                yield "comment", None
            event, data, comment = "message", [], False
        elif line.startswith(":"):
            comment = True
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])


def spawn_gateway(
    home: Path, *args: str, env: dict[str, str] | None = None, pidns: bool = False
) -> Gateway:
    """Start ``tether serve`` on a free port of ``home`` (or ``--unix PATH`` when given);
    wait for its announcement.

    ``pidns``: in a pid namespace of its own (``tests/fleet/_pidns.py``); ``proc`` is then
    the host process as seen from here, not a ``Popen``."""
    full_env = {**python_env(), "TETHER_HOME": str(home), **(env or {})}
    port = [] if "--unix" in args else ["--port", "0"]  # a socket path, or a free port
    err_path = home / "serve-starting.err"
    argv = [sys.executable, "-m", "tether", "serve", *port, "--format", "json", *args]
    if pidns:
        from tests.fleet import _pidns

        argv = _pidns.wrap(argv)
    with open(err_path, "w") as err:
        popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=full_env)
    proc: Any = popen
    if pidns:
        from tests.fleet import _pidns

        proc = _pidns.NamespacedHost(popen)
    err_path.rename(home / f"serve-{proc.pid}.err")
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=5)
        proc.stdout.close()
        raise AssertionError(
            f"tether serve did not start: {(home / f'serve-{proc.pid}.err').read_text()}"
        )
    announced = json.loads(line)
    token = (home / "serve-token").read_text().strip() if announced["tokenFile"] else ""
    return Gateway(proc, announced["url"], token, home)


@contextlib.contextmanager
def running_gateway(home: Path, *args: str) -> Iterator[Gateway]:
    """A gateway for the ``with`` block: its sessions closed and it stopped after."""
    gw = spawn_gateway(home, *args)
    try:
        yield gw
    finally:
        try:
            gw.close_all()
        finally:
            gw.stop()


@pytest.fixture
def gateway(tether_home: Path) -> Iterator[Gateway]:
    with running_gateway(tether_home) as gw:
        yield gw


def mock_with_modes_config(home: Path) -> None:
    """A config agent ``mockx``: the mock agent with modes and config options."""
    argv = [sys.executable, "-m", "tether.testing.mock_agent", "--modes", "--config-options"]
    (home / "config.toml").write_text(f"[agents.mockx]\nargv = {json.dumps(argv)}\n")
    os.chmod(home / "config.toml", 0o600)
