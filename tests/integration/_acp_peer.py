"""A small ACP client driving a real ``tether acp`` process, checking every frame.

Each frame the client sends and each frame the door sends is validated against the
official ACP schema (``tests/acp_schema.py``); a problem fails the test at once.
Waits are bounded reads from a queue filled by a reader thread, never sleeps.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from tests.acp_schema import schema_errors

from tether import operations

READ_TIMEOUT_S = 30.0
MOCK = f"{sys.executable} -m tether.testing.mock_agent"


class AcpPeer:
    """``tether acp --agent AGENT`` as a child process, spoken to as an ACP client."""

    def __init__(self, cwd: Path, agent: str = MOCK, *extra: str) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether", "--cwd", str(cwd), "acp", "--agent", agent, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.cwd = cwd
        self.frames: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []  # every frame the door sent, in order
        self._methods: dict[Any, str] = {}
        self._next_id = 0
        self.problems: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            frame = json.loads(line)
            answered = self._methods.get(frame.get("id")) if "method" not in frame else None
            errs = schema_errors(frame, "agent", answered)
            if errs:
                self.problems.append(f"{frame}: {errs}")
            self.frames.put(frame)
        self.frames.put(None)

    def answer(self, request: dict[str, Any], result: dict[str, Any]) -> None:
        """Answer the door's request ``request`` (a frame) with ``result``."""
        self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})

    def send(self, frame: dict[str, Any]) -> None:
        errs = schema_errors(frame, "client")
        assert not errs, f"the test client sent an invalid frame: {errs}"
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(frame) + "\n").encode())
        self.proc.stdin.flush()

    def start(self, method: str, params: dict[str, Any]) -> int:
        """Send a request; returns its id (see :meth:`wait`)."""
        rid = self._next_id
        self._next_id += 1
        self._methods[rid] = method
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def next(self, timeout: float = READ_TIMEOUT_S) -> dict[str, Any] | None:
        frame = self.frames.get(timeout=timeout)
        if frame is not None:
            self.seen.append(frame)
        assert not self.problems, self.problems
        return frame

    def wait(self, rid: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Read until the answer to ``rid``: (answer, the notifications before it)."""
        notes: list[dict[str, Any]] = []
        while True:
            frame = self.next()
            assert frame is not None, f"the door exited: {self.stderr_tail()}"
            if frame.get("id") == rid and "method" not in frame:
                return frame, notes
            notes.append(frame)

    def request(self, method: str, params: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
        """One request: (its result, the notifications before it); an error fails."""
        answer, notes = self.wait(self.start(method, params))
        assert "error" not in answer, answer
        return answer["result"], notes

    def until(self, method: str) -> dict[str, Any]:
        """Read until a notification ``method`` arrives; returns its params."""
        while True:
            frame = self.next()
            assert frame is not None, f"the door exited: {self.stderr_tail()}"
            if frame.get("method") == method:
                params: dict[str, Any] = frame["params"]
                return params

    def until_request(self, method: str) -> dict[str, Any]:
        """Read until the door sends the client a request ``method``; returns the frame."""
        while True:
            frame = self.next()
            assert frame is not None, f"the door exited: {self.stderr_tail()}"
            if frame.get("method") == method and "id" in frame:
                return frame

    def until_text(self, pattern: str) -> re.Match[str]:
        """Read updates until an agent message chunk matches ``pattern``."""
        while True:
            note = self.until("session/update")
            content = note["update"].get("content")
            text = content.get("text", "") if isinstance(content, dict) else ""
            if m := re.search(pattern, text):
                return m

    def initialize(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        caps = capabilities or {"fs": {"readTextFile": False, "writeTextFile": False}}
        result, _ = self.request(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": caps,
                "clientInfo": {"name": "tether-tests", "version": "0"},
            },
        )
        return dict(result)

    def new_session(self) -> str:
        result, _ = self.request("session/new", {"cwd": str(self.cwd), "mcpServers": []})
        return str(result["sessionId"])

    def start_prompt(self, sid: str, text: str) -> int:
        """Send a text prompt without waiting; returns its request id."""
        blocks = [{"type": "text", "text": text}]
        return self.start("session/prompt", {"sessionId": sid, "prompt": blocks})

    def prompt(self, sid: str, text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        result, notes = self.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        )
        return result, notes

    def disconnect(self) -> list[dict[str, Any]]:
        """Close stdin; returns every frame the door sent until it exited (status 0)."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        rest: list[dict[str, Any]] = []
        while (frame := self.next()) is not None:
            rest.append(frame)
        assert self.proc.wait(timeout=READ_TIMEOUT_S) == 0, self.stderr_tail()
        return rest

    def stderr_tail(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")[-2000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=READ_TIMEOUT_S)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def texts(notes: list[dict[str, Any]], kind: str = "agent_message_chunk") -> list[str]:
    """The text of every ``session/update`` of ``kind`` among ``notes``."""
    out = []
    for note in notes:
        update = note.get("params", {}).get("update", {})
        if note.get("method") == "session/update" and update.get("sessionUpdate") == kind:
            out.append(update.get("content", {}).get("text", ""))
    return out


@pytest.fixture
def peer(project_dir: Path) -> Iterator[Callable[..., AcpPeer]]:
    """A factory of ``tether acp`` clients; at the end every door is gone and every
    session of the home closed (with proof of its tree). Import it into a test module
    to use it."""
    made: list[AcpPeer] = []

    def make(agent: str = MOCK, *extra: str) -> AcpPeer:
        p = AcpPeer(project_dir, agent, *extra)
        made.append(p)
        return p

    try:
        yield make
    finally:
        for p in made:
            p.kill()
        for record in operations.list_sessions():
            operations.close_session(record["key"])


def sdk_door(client: Any, cwd: Path) -> AbstractAsyncContextManager[tuple[Any, Any]]:
    """``tether acp --agent mock`` spawned by the official SDK for ``client``:
    ``async with sdk_door(client, cwd) as (conn, proc)``."""
    import acp

    return acp.spawn_agent_process(  # type: ignore[no-any-return]
        client, sys.executable, "-m", "tether", "--cwd", str(cwd), "acp", "--agent", MOCK,
        env=dict(os.environ),  # the SDK's default env drops TETHER_HOME: the user's home
    )  # fmt: skip
