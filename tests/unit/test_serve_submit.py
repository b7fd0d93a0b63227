"""Prompts from the gateway's event loop, against a scripted owner on a real Unix
socket: a kept connection serves the next prompt, one the owner dropped is replaced
without a lost or doubled prompt, and an owner that is stopping or silent sends the
gateway down the full path."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tether import sessions
from tether.ipc import protocol
from tether.policy import access
from tether.serve import stream, submit

KEY = "c" * 64


class ScriptedOwner:
    """Says hello, acks every prompt; ``drop_after`` requests per connection, then hangs up."""

    def __init__(self, *, stopping: bool = False, drop_after: int = 0, silent: bool = False):
        self.stopping = stopping
        self.drop_after = drop_after
        self.silent = silent
        self.connections = 0
        self.prompts: list[str] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if not self.silent:
            hello = {"type": "hello", "v": protocol.VERSION, "generation": 1}
            writer.write(json.dumps({**hello, "stopping": self.stopping}).encode() + b"\n")
        served = 0
        while line := await reader.readline():
            rid = json.loads(line)["requestId"]
            self.prompts.append(rid)
            ack = {"type": "ack", "requestId": rid, "queuePosition": 0}
            writer.write(json.dumps(ack).encode() + b"\n")
            await writer.drain()
            served += 1
            if served == self.drop_after:
                break
        writer.close()


async def run(owner: ScriptedOwner, prompts: int, gap: float = 0.0) -> list[Any]:
    path = sessions.socket_path(KEY)
    server = await asyncio.start_unix_server(owner.serve, path=path)
    prompter = submit.Prompter(stream.Hubs())
    payload = {"prompt": [{"type": "text", "text": "hi"}], "wait": False}
    out = []
    try:
        for _ in range(prompts):
            out.append(await prompter.prompt(KEY, payload, None, 1 << 20))
            await asyncio.sleep(gap)
    finally:
        prompter.close_all()
        server.close()
        await server.wait_closed()
        os.unlink(path)
        await asyncio.sleep(0.01)  # the closed transports finish closing
    return out


@pytest.fixture(autouse=True)
def operator(tether_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access, "could_be_agent", lambda *a, **k: False)


def test_the_next_prompt_reuses_the_kept_connection() -> None:
    owner = ScriptedOwner()
    results = asyncio.run(run(owner, 3))
    assert [r["requestId"] for r in results] == owner.prompts
    assert all(r["fromSeq"] == 1 for r in results)
    assert owner.connections == 1


def test_a_connection_the_owner_dropped_is_replaced_once() -> None:
    owner = ScriptedOwner(drop_after=1)
    results = asyncio.run(run(owner, 3, gap=0.05))
    assert [r["requestId"] for r in results] == owner.prompts  # none lost, none twice
    assert owner.connections == 3


def test_a_kept_connection_is_let_go(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(submit, "KEEP_S", 0.01)
    owner = ScriptedOwner()
    asyncio.run(run(owner, 2, gap=0.1))
    assert owner.connections == 2


def test_a_stopping_silent_or_absent_owner_means_the_full_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert asyncio.run(run(ScriptedOwner(stopping=True), 1)) == [None]
    monkeypatch.setattr(submit, "HELLO_S", 0.2)
    assert asyncio.run(run(ScriptedOwner(silent=True), 1)) == [None]

    async def absent() -> Any:
        return await submit.Prompter(stream.Hubs()).prompt(KEY, {}, None, 1 << 20)

    assert not os.path.exists(sessions.socket_path(KEY))
    assert asyncio.run(absent()) is None
