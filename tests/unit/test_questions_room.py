"""The owner's questions room in-process: controllers are fake outboxes, time is short."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest

from tether.errors import AlreadyAnswered, VisibilityDenied
from tether.ipc import protocol
from tether.owner.job import Job
from tether.owner.question_table import RECENT_KEPT
from tether.owner.questions import Questions, inside_tree

OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]
PARAMS: dict[str, Any] = {
    "sessionId": "s",
    "toolCall": {"toolCallId": "c1", "title": "rm -rf build", "kind": "execute"},
    "options": OPTIONS,
}


class FakeOutbox:
    """What a Job needs of an outbox; frames are kept decoded."""

    def __init__(self, pid: int) -> None:
        self.detached = False
        self.lag_handlers: list[Any] = []
        self.peer = {"pid": pid, "uid": 1000}
        self.frames: list[dict[str, Any]] = []

    def write(self, data: bytes) -> None:
        self.frames.extend(json.loads(line) for line in data.splitlines())

    def flush(self) -> None:
        pass

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == kind]


def controller(rid: str, pid: int) -> tuple[Job, FakeOutbox]:
    outbox = FakeOutbox(pid)
    env = protocol.Envelope(rid, "watch", {"control": True})
    return Job(env, outbox, 0.0), outbox  # type: ignore[arg-type]


def room(timeout: float = 30.0) -> tuple[Questions, list[tuple[str, dict[str, Any]]]]:
    records: list[tuple[str, dict[str, Any]]] = []
    rooms = Questions(timeout=timeout, record=lambda k, p, _r: records.append((k, p)))
    return rooms, records


def test_first_answer_wins_and_both_controllers_see_it() -> None:
    """Of two answers in one loop pass, the first reaches the agent; the second is
    refused; both controllers get the same resolution."""

    async def main() -> None:
        q, records = room()
        (a, out_a), (b, out_b) = controller("w-a", 11), controller("w-b", 12)
        q.attach(a)
        q.attach(b)
        ask = asyncio.ensure_future(q.ask_permission(PARAMS))
        await asyncio.sleep(0)
        iid = out_a.of("interaction")[0]["interaction"]["id"]
        assert out_b.of("interaction")[0]["interaction"]["id"] == iid
        q.answer(iid, "deny", by=out_b.peer)
        with pytest.raises(AlreadyAnswered):
            q.answer(iid, "allow", by=out_a.peer)
        assert await ask == {"outcome": {"outcome": "selected", "optionId": "reject"}}
        seen = [out.of("interaction_resolved") for out in (out_a, out_b)]
        assert seen[0] == [{**seen[1][0], "requestId": "w-a"}]
        assert seen[0][0]["interaction"]["by"] == {"pid": 12, "uid": 1000}
        assert [k for k, _ in records] == ["interaction_opened", "interaction_resolved"]

    asyncio.run(main())


def test_a_late_controller_is_offered_the_open_question() -> None:
    async def main() -> None:
        q, _ = room()
        early, _out = controller("w-1", 1)
        q.attach(early)
        ask = asyncio.ensure_future(q.ask_permission(PARAMS))
        await asyncio.sleep(0)
        late, out_late = controller("w-2", 2)
        q.attach(late)
        [offered] = out_late.of("interaction")
        assert offered["interaction"]["toolCall"]["title"] == "rm -rf build"
        assert [p["id"] for p in q.pending()] == [offered["interaction"]["id"]]
        q.answer(offered["interaction"]["id"], "allow")
        await ask
        assert q.pending() == []

    asyncio.run(main())


def test_no_controller_the_policy_decides_at_once() -> None:
    async def main() -> None:
        q, records = room()
        gone, out = controller("w", 1)
        out.detached = True  # a controller whose connection went is none
        q.attach(gone)
        result = await q.ask_permission(PARAMS)
        assert result == {"outcome": {"outcome": "selected", "optionId": "reject"}}
        assert records[-1][1]["how"] == "policy"
        assert await q.ask_elicitation({"message": "who?"}) == {"action": "decline"}

    asyncio.run(main())


def test_the_deadline_decides() -> None:
    async def main() -> None:
        q, records = room(timeout=0.01)
        job, out = controller("w", 1)
        q.attach(job)
        result = await q.ask_permission(PARAMS)
        assert result == {"outcome": {"outcome": "selected", "optionId": "reject"}}
        assert out.of("interaction_resolved")[0]["interaction"]["how"] == "deadline"
        assert records[-1][1]["how"] == "deadline"

    asyncio.run(main())


def test_cancelling_the_wait_resolves_it_cancelled() -> None:
    """The connection cancels the hook when the turn is cancelled: the question is
    resolved `cancelled` for the controllers, and the cancellation propagates."""

    async def main() -> None:
        q, _ = room()
        job, out = controller("w", 1)
        q.attach(job)
        ask = asyncio.ensure_future(q.ask_permission(PARAMS))
        await asyncio.sleep(0)
        iid = out.of("interaction")[0]["interaction"]["id"]
        ask.cancel()
        with pytest.raises(asyncio.CancelledError):
            await ask
        resolved = out.of("interaction_resolved")[0]["interaction"]
        assert (resolved["id"], resolved["how"]) == (iid, "cancelled")
        with pytest.raises(AlreadyAnswered):
            q.answer(iid, "allow")

    asyncio.run(main())


def test_closing_answers_every_open_question() -> None:
    async def main() -> None:
        q, _ = room()
        job, out = controller("w", 1)
        q.attach(job)
        perm = asyncio.ensure_future(q.ask_permission(PARAMS))
        form = asyncio.ensure_future(q.ask_elicitation({"mode": "form", "message": "?"}))
        await asyncio.sleep(0)
        q.cancel_all()
        assert await perm == {"outcome": {"outcome": "cancelled"}}
        assert await form == {"action": "cancel"}
        assert len(out.of("interaction_resolved")) == 2

    asyncio.run(main())


def test_an_answer_from_inside_the_agent_tree_is_refused() -> None:
    """A process below the agent run's keeper cannot answer; the question stays open."""

    async def main() -> None:
        here = os.getpid()
        q = Questions(agent_tree=lambda: (os.getppid(),))  # we stand below the "keeper"
        job, out = controller("w", 1)
        q.attach(job)
        ask = asyncio.ensure_future(q.ask_permission(PARAMS))
        await asyncio.sleep(0)
        iid = out.of("interaction")[0]["interaction"]["id"]
        with pytest.raises(VisibilityDenied):
            q.answer(iid, "allow", by={"pid": here, "uid": 0})
        assert [p["id"] for p in q.pending()] == [iid]
        q.agent_tree = lambda: (2**22 + 7,)  # no such process above us
        q.answer(iid, "allow", by={"pid": here, "uid": 0})
        await ask

    asyncio.run(main())


def test_inside_tree() -> None:
    assert inside_tree(os.getpid(), (os.getpid(),))
    assert inside_tree(os.getpid(), (os.getppid(),))
    assert not inside_tree(os.getppid(), (os.getpid(),))


def test_memory_stays_bounded_over_many_questions() -> None:
    """Thousands of questions decided by the policy leave a bounded record behind."""

    async def main() -> None:
        q, _ = room()
        for i in range(1000):
            params = {**PARAMS, "toolCall": {**PARAMS["toolCall"], "title": f"t{i}"}}
            await q.ask_permission(params)
        assert len(q._meta) <= 2 * RECENT_KEPT + 1
        assert len(q.board) == 0

    asyncio.run(main())


def test_issue20_item4_the_agents_own_tree_cannot_attach_as_controller() -> None:
    """A watch --control from below the agent run's keeper is refused (its one terminal
    frame, VISIBILITY_DENIED) and never offered a question: the policy decides at once."""

    async def main() -> None:
        q = Questions(agent_tree=lambda: (os.getppid(),))  # we stand below the "keeper"
        job, out = controller("w", os.getpid())
        assert q.admit_watch(job) is False
        (error,) = out.of("error")
        assert error["error"]["detailCode"] == "VISIBILITY_DENIED"
        with pytest.raises(VisibilityDenied):
            q.attach(job)
        assert q.controllers() == []
        reject = {"outcome": {"outcome": "selected", "optionId": "reject"}}
        assert await q.ask_permission(PARAMS) == reject  # no wait for a controller
        other, _ = controller("w2", 1)
        assert q.admit_watch(other) is True

    asyncio.run(main())


def test_issue20_item4_the_last_controller_leaving_hands_open_questions_to_the_policy() -> None:
    """While another controller remains a question stays open; when the last one's
    connection goes, the policy decides it at once (`how: policy`), and every record
    says so."""

    async def main() -> None:
        q, records = room()
        (a, out_a), (b, out_b) = controller("w-a", 11), controller("w-b", 12)
        q.attach(a)
        q.attach(b)
        ask = asyncio.ensure_future(q.ask_permission(PARAMS))
        await asyncio.sleep(0)
        out_a.detached = True
        q.controller_left()
        await asyncio.sleep(0)
        assert not ask.done()
        out_b.detached = True
        q.controller_left()
        assert await ask == {"outcome": {"outcome": "selected", "optionId": "reject"}}
        assert q.pending() == []
        kind, resolved = records[-1]
        assert kind == "interaction_resolved"
        assert resolved["how"] == "policy"

    asyncio.run(main())
