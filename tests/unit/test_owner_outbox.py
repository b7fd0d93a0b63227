"""The owner's bounded output to one caller (:class:`tether.owner.job.Outbox`), over real
sockets, without processes."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from tether.ipc import protocol
from tether.owner import job
from tether.owner.job import Job, Outbox


async def _pair(
    limit: int,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, list[asyncio.StreamWriter]]:
    """(the caller's reader, the owner's writer, the writers to close at the end)."""
    a, b = socket.socketpair()
    reader, caller_writer = await asyncio.open_unix_connection(sock=a, limit=limit)
    _owner_reader, owner_writer = await asyncio.open_unix_connection(sock=b)
    return reader, owner_writer, [caller_writer, owner_writer]


async def _frames(reader: asyncio.StreamReader) -> list[dict[str, Any]]:
    frames = []
    while line := await reader.readline():
        frames.append(json.loads(line))
    return frames


def _prompt_job(outbox: Outbox, rid: str = "r-1") -> Job:
    return Job(protocol.Envelope(rid, "prompt", {"prompt": []}), outbox, 0.0)


def test_a_prompt_without_updates_gets_its_ack_and_result_only() -> None:
    """``"updates": false`` (the gateway's 202 prompts, which follow the journal): the
    turn's frames are not relayed to the caller; its ack and one terminal frame are."""

    async def main() -> list[dict[str, Any]]:
        reader, owner_writer, writers = await _pair(limit=1 << 20)
        outbox = Outbox(owner_writer)
        env = protocol.Envelope("r-1", "prompt", {"prompt": [], "wait": False, "updates": False})
        turn = Job(env, outbox, 0.0)
        turn.ack(1)
        turn.update_line("in", b'{"text":"chunk"}', seq=7)
        turn.finish({"stopReason": "end_turn"})
        await outbox.drain(10.0)
        owner_writer.close()
        frames = await _frames(reader)
        for w in writers:
            w.close()
        return frames

    frames = asyncio.run(main())
    assert [f["type"] for f in frames] == ["ack", "result"]


def test_one_frame_larger_than_the_limit_is_carried_whole_not_lagged() -> None:
    """An agent message of 12 MiB through an 8 MiB outbox: the caller gets it, then the
    turn's result -- a single big frame is not a lagging caller (issue 21 item 1)."""
    big = b'{"text":"' + b"x" * (12 << 20) + b'"}'

    async def main() -> list[dict[str, Any]]:
        reader, owner_writer, writers = await _pair(limit=32 << 20)
        outbox = Outbox(owner_writer, limit=8 << 20)
        turn = _prompt_job(outbox)
        turn.update_line("in", big, seq=7)
        await asyncio.sleep(0)  # the flush of this pass
        turn.update_line("in", b'{"text":"after"}', seq=8)
        turn.finish({"stopReason": "end_turn"})
        await outbox.drain(10.0)
        owner_writer.close()
        frames = await _frames(reader)
        for w in writers:
            w.close()
        return frames

    frames = asyncio.run(main())
    assert [f["type"] for f in frames] == ["update", "update", "result"]
    assert len(frames[0]["frame"]["text"]) == 12 << 20
    assert frames[1]["frame"]["text"] == "after"


def test_a_lagged_caller_that_read_everything_leaves_no_error_in_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dropped with ``lagged``, the caller still reads what was sent (the transport closes
    after it): the later cut-off must not abort that closed transport (it raised in the
    loop: "Exception in callback _SelectorTransport.abort()")."""
    monkeypatch.setattr(job, "CUT_OFF_S", 0.2)
    errors: list[dict[str, Any]] = []

    async def main() -> list[dict[str, Any]]:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        reader, owner_writer, writers = await _pair(limit=1 << 20)
        outbox = Outbox(owner_writer, limit=64 * 1024)
        turn = _prompt_job(outbox)
        for seq in range(1, 20001):  # nobody reads meanwhile: the unsent bytes pile up
            turn.update_line("in", b'{"pad":"%s"}' % (b"y" * 200), seq=seq)
            if seq % 200 == 0:
                await asyncio.sleep(0)
            if outbox.lagged:
                break
        assert outbox.lagged
        frames = await _frames(reader)  # everything, then EOF: the transport is closed
        await asyncio.sleep(0.5)  # past the cut-off
        for w in writers:
            w.close()
        await asyncio.sleep(0)
        return frames

    frames = asyncio.run(main())
    assert frames[-1]["type"] == "lagged"
    assert errors == []
