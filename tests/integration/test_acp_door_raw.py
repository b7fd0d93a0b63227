"""``tether acp`` driven by a raw client (issue 21): bytes in, lines out, no schema checks.

For what a schema-checking peer cannot send or keep up with: long turns read as fast as
a client can (the owner lets a door that falls behind go; the door finishes the turn
from the journal, as ``tether prompt`` does), single huge updates, and invalid JSON-RPC,
which must be answered, never left hanging. Each test closes the sessions it opened.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether import operations

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 60.0
MOCK = f"{sys.executable} -m tether.testing.mock_agent"


class RawDoor:
    """``tether acp --agent mock`` as a child; raw lines in both directions."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether", "--cwd", str(cwd), "acp", "--agent", MOCK],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, data: bytes | dict[str, Any]) -> None:
        raw = data if isinstance(data, bytes) else json.dumps(data).encode() + b"\n"
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw)
        self.proc.stdin.flush()

    def line(self) -> bytes:
        line = self.lines.get(timeout=READ_TIMEOUT_S)
        assert line is not None, "the door exited"
        return line

    def frame(self) -> Any:
        return json.loads(self.line())

    def answer_to(self, rid: Any) -> dict[str, Any]:
        """Read until the answer to request ``rid`` (skipping notifications)."""
        while True:
            frame = self.frame()
            if isinstance(frame, dict) and "method" not in frame and frame.get("id") == rid:
                return frame

    def session(self) -> str:
        self.send({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {}})
        assert "result" in self.answer_to("i")
        params = {"cwd": str(self.cwd), "mcpServers": []}
        self.send({"jsonrpc": "2.0", "id": "n", "method": "session/new", "params": params})
        return str(self.answer_to("n")["result"]["sessionId"])

    def prompt(self, sid: str, text: str, rid: str = "p") -> None:
        blocks = [{"type": "text", "text": text}]
        params = {"sessionId": sid, "prompt": blocks}
        self.send({"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": params})

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=READ_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def door(project_dir: Path) -> Iterator[RawDoor]:
    d = RawDoor(project_dir)
    try:
        yield d
    finally:
        d.close()
        for record in operations.list_sessions():
            operations.close_session(record["key"])


def test_a_200000_chunk_turn_read_as_fast_as_possible_arrives_whole(door: RawDoor) -> None:
    """The owner drops a door that falls behind (``lagged``); the door then relays the
    rest of the turn from the journal and answers it -- every chunk once, in order (it
    answered -32603 "the owner ended the turn without an answer" after ~100,000)."""
    sid = door.session()
    door.prompt(sid, "stream 200000")
    seen: list[int] = []
    while True:
        line = door.line()
        if b'"method"' not in line[:40]:
            answer = json.loads(line)
            assert answer.get("id") == "p", answer
            break
        if b'"agent_message_chunk"' in line:
            text = json.loads(line)["params"]["update"]["content"]["text"]
            seen.append(int(text.split()[1]))
    assert "error" not in answer, answer
    assert answer["result"]["stopReason"] == "end_turn"
    assert len(seen) == 200000
    assert seen == list(range(200000))


def test_one_update_of_9_mib_reaches_the_client_and_the_turn_ends(door: RawDoor) -> None:
    """Larger than the owner's 8 MiB output bound for one caller: carried whole (it
    failed the turn with QUEUE_DISCONNECTED_BEFORE_COMPLETION)."""
    sid = door.session()
    door.prompt(sid, "big 9000000")
    texts = []
    while True:
        frame = door.frame()
        if frame.get("id") == "p":
            break
        update = frame.get("params", {}).get("update", {})
        if update.get("sessionUpdate") == "agent_message_chunk":
            texts.append(update["content"]["text"])
    assert frame.get("result", {}).get("stopReason") == "end_turn", frame
    assert texts == ["x" * 9_000_000]


@pytest.mark.parametrize(
    ("line", "code", "rid"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":"x"}', -32602, 1),
        (b'{"jsonrpc":"2.0","id":2,"method":5}', -32600, 2),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"initialize","params":{}}', -32600, None),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"initialize","params":{}}', -32600, None),
        (b'{"jsonrpc":"2.0","id":true,"method":"initialize","params":{}}', -32600, None),
        (b"42", -32600, None),
        (b'{"jsonrpc":"2.0","id":3,"method":"session/list","params":[1]}', -32602, 3),
    ],
)
def test_every_invalid_request_is_answered_and_the_door_goes_on(
    door: RawDoor, line: bytes, code: int, rid: object
) -> None:
    """JSON-RPC 2.0: -32600 / -32602 with the request's id where it has a valid one
    (none of these got an answer, and `session/list` with `[1]` was taken as `{}`)."""
    door.send(line + b"\n")
    reply = door.frame()
    assert reply["id"] == rid
    assert reply["error"]["code"] == code
    door.send({"jsonrpc": "2.0", "id": "after", "method": "initialize", "params": {}})
    assert "result" in door.answer_to("after")


def test_a_batch_is_answered_with_an_array(door: RawDoor) -> None:
    door.send(
        b'[{"jsonrpc":"2.0","id":"b1","method":"session/list","params":{}},'
        b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}]\n'
    )
    reply = door.frame()
    assert isinstance(reply, list)
    assert [(r["id"], r["error"]["code"]) for r in reply] == [("b1", -32600)]


def test_a_20_mib_prompt_through_the_door_is_taken_and_its_echo_comes_back(
    door: RawDoor,
) -> None:
    """The prompt limit is 64 MiB on every path: the door read at most 16 MiB from its
    client and answered a bigger prompt with an id-less parse error (the client hung)."""
    sid = door.session()
    text = "z" * (20 * 1024 * 1024)
    door.prompt(sid, text)
    texts = []
    while True:
        frame = door.frame()
        if frame.get("id") == "p":
            break
        update = frame.get("params", {}).get("update", {})
        if update.get("sessionUpdate") == "agent_message_chunk":
            texts.append(update["content"]["text"])
    assert frame.get("result", {}).get("stopReason") == "end_turn", frame
    assert texts == [text]


def test_a_prompt_over_the_limit_is_answered_under_its_id(
    project_dir: Path, tether_home: Path
) -> None:
    """A line over the door's limit cannot be decoded, but its head shows its id: the
    client gets its answer (it got an id-less parse error and waited forever)."""
    (tether_home / "config.toml").write_text("promptMaxBytes = 1048576\n")
    door = RawDoor(project_dir)
    try:
        sid = door.session()
        door.prompt(sid, "w" * (3 * 1024 * 1024), rid="big")
        reply = door.answer_to("big")
        assert reply["error"]["code"] == -32600
        assert "promptMaxBytes" in reply["error"]["message"]
        door.prompt(sid, "echo still serving", rid="next")
        assert door.answer_to("next")["result"]["stopReason"] == "end_turn"
    finally:
        door.close()
        for record in operations.list_sessions():
            operations.close_session(record["key"])


def test_a_client_leaving_while_its_turn_comes_from_the_journal_cancels_it(
    door: RawDoor,
) -> None:
    """Once the owner has let the door go (``lagged``) it no longer hears the door leave:
    the door cancels the turn in its owner itself, as a client leaving always does."""
    from tether.state.journal import store
    from tether.state.journal.entry import parse_line
    from tether.state.registry import Registry

    sid = door.session()
    door.prompt(sid, "stream 200000 ; sleep 120000")
    chunks = 0
    while chunks < 200000:
        if b'"agent_message_chunk"' in door.line():
            chunks += 1
    door.close()  # stdin EOF while the agent sleeps: the door leaves

    def turn_end() -> dict[str, Any] | None:
        with Registry() as registry:
            lines = [line for _, line in store.iter_lines(registry._db, sid)]
        ends = [e for e in map(parse_line, lines) if e.get("kind") == "turn_ended"]
        return ends[-1] if ends else None

    deadline = time.monotonic() + 30.0
    while (ended := turn_end()) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ended is not None, "the turn went on after its client left"
    assert ended.get("stopReason") == "cancelled", ended
