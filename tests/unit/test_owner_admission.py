"""Admission: queued and running requests, a caller that leaves, a close that supersedes.

No sockets and no agent: outboxes without a writer (they drop what they are given) and a
fake agent slot that records cancels. Each step asserts the whole visible state.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

from tether.errors import OwnerShuttingDown
from tether.ipc import protocol
from tether.owner.admission import Admission
from tether.owner.agent_slot import AgentSlot
from tether.owner.job import Job, Outbox


class FakeSlot:
    """Records ``cancel()``; says whether the turn had reached the agent."""

    def __init__(self, reached: bool = True) -> None:
        self.cancels = 0
        self.reached = reached

    def cancel(self) -> bool:
        self.cancels += 1
        return self.reached


def job(rid: str, outbox: Outbox, *, kind: str = "prompt", wait: bool = True) -> Job:
    payload: dict[str, Any] = {"prompt": [{"type": "text", "text": rid}], "wait": wait}
    if kind != "prompt":
        payload = {"modeId": "plan"}
    return Job(protocol.Envelope(rid, kind, payload), outbox, admitted_at=0.0)


def state(a: Admission, slot: FakeSlot) -> tuple[str | None, list[str], int]:
    return (a.active.request_id if a.active else None, a.queue.request_ids(), slot.cancels)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_walkthrough_a_caller_that_leaves_cancels_only_its_own_waiting_prompts() -> None:
    """EOF of a caller cancels its running turn and dequeues its waiting ones; a
    --no-wait prompt and other callers' requests are not touched."""

    async def scenario() -> None:
        slot = FakeSlot()
        a = Admission("k", max_depth=8, slot=cast("AgentSlot", slot))
        mine, other = Outbox(None), Outbox(None)
        running, queued, no_wait, theirs = (
            job("r-run", mine),
            job("r-q", mine),
            job("r-nowait", mine, wait=False),
            job("r-theirs", other),
        )
        a.active = running
        for j in (queued, no_wait, theirs):
            a.enqueue(j)
        assert state(a, slot) == ("r-run", ["r-q", "r-nowait", "r-theirs"], 0)
        assert a.waits(mine)
        assert a.waits(other)
        a.detach(mine)
        assert state(a, slot) == ("r-run", ["r-nowait", "r-theirs"], 1)
        assert queued.done  # answered QUEUE_REQUEST_CANCELLED (to nobody)
        assert not running.done  # the turn ends `cancelled` through the agent
        assert a.waits(other)  # the other caller still waits for its request

    run(scenario())


def test_a_leaving_caller_whose_turn_has_not_reached_the_agent_defers_the_cancel() -> None:
    """If the agent is still starting, the turn is marked never to be sent."""

    async def scenario() -> None:
        slot = FakeSlot(reached=False)
        a = Admission("k", max_depth=8, slot=cast("AgentSlot", slot))
        mine = Outbox(None)
        a.active = job("r-run", mine)
        a.detach(mine)
        assert a.active.cancel_requested
        assert state(a, slot) == ("r-run", [], 1)

    run(scenario())


def test_close_supersedes_the_running_request_and_shutdown_answers_the_queue() -> None:
    """On close the running request's own outcome is held back; the waiting ones get the
    error they are drained with."""

    async def scenario() -> None:
        slot = FakeSlot()
        a = Admission("k", max_depth=8, slot=cast("AgentSlot", slot))
        out = Outbox(None)
        running, waiting = job("r-run", out), job("r-wait", out)
        a.active = running
        a.enqueue(waiting)
        held = a.stop(closing=True)
        assert held is running
        assert (running.superseded, running.cancel_requested, running.done) == (True, True, False)
        running.finish({"stopReason": "cancelled"})  # its own outcome: ignored
        assert not running.done
        drained = a.drain(OwnerShuttingDown("closing"))
        assert drained == [waiting]
        assert waiting.done
        assert state(a, slot) == ("r-run", [], 1)

    run(scenario())


def test_a_stop_that_is_not_a_close_supersedes_nothing() -> None:
    """SIGTERM or the idle TTL cancel the running turn; its outcome is its own."""

    async def scenario() -> None:
        slot = FakeSlot()
        a = Admission("k", max_depth=8, slot=cast("AgentSlot", slot))
        a.active = job("r-run", Outbox(None))
        assert a.stop(closing=False) is None
        assert not a.active.superseded
        assert a.active.cancel_requested

    run(scenario())


class SentFrames(Outbox):
    """An outbox that keeps what it is given (decoded), instead of writing it."""

    def __init__(self) -> None:
        super().__init__(None)
        self.detached = False
        self.frames: list[dict[str, Any]] = []

    def write(self, data: bytes) -> None:
        self.frames.extend(json.loads(line) for line in data.splitlines())

    def flush(self) -> None:
        pass


def test_a_prompts_ack_names_its_first_journal_entry() -> None:
    """The ack of a prompt carries the seq of its ``prompt_queued`` entry (a stream cursor
    the gateway needs no lookup for); other requests' acks carry none."""

    async def main() -> list[dict[str, Any]]:
        a = Admission("k", 4, cast("AgentSlot", FakeSlot()))
        seqs = iter(range(41, 100))
        recorded: list[tuple[str, int]] = []

        def record(kind: str, _payload: dict[str, Any], _rid: str | None) -> int:
            recorded.append((kind, seq := next(seqs)))
            return seq

        a.record = record
        out = SentFrames()
        a.enqueue(job("r-1", out))
        a.enqueue(job("r-2", out, kind="set_mode"))
        assert recorded == [("prompt_queued", 41)]
        return out.frames

    frames = run(main())
    assert frames == [
        {"type": "ack", "requestId": "r-1", "queuePosition": 1, "seq": 41},
        {"type": "ack", "requestId": "r-2", "queuePosition": 2},
    ]
