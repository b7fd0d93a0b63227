"""The wait route's answer (tether.serve.prompt_wait) from each source, without a server:
the owner connection's frames, the journal after a lagged connection or a lost owner, and
the thread path's journal read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("starlette", reason="tether serve needs the serve extra")

from tether.errors import OwnerLost
from tether.serve import prompt_wait

ACK = {"requestId": "r-1", "sessionKey": "k", "queuePosition": 1, "fromSeq": 10}


def chunk(text: str) -> dict[str, Any]:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"update": update}}


def update(seq: int, frame: dict[str, Any], direction: str = "in") -> dict[str, Any]:
    return {
        "type": "update",
        "requestId": "r-1",
        "seq": seq,
        "direction": direction,
        "frame": frame,
    }


class FakePrompter:
    """Hands the reader the given frames after its ack; or raises; or None (no owner)."""

    def __init__(self, frames: list[dict[str, Any]] | None, lose: bool = False) -> None:
        self.frames = frames
        self.lose = lose
        self.payloads: list[dict[str, Any]] = []

    async def prompt(
        self, key: str, payload: dict[str, Any], _d: int | None, _m: int, turn: Any = None
    ) -> dict[str, Any] | None:
        self.payloads.append(payload)
        if self.frames is None:
            return None
        turn.admitted(ACK)
        for frame in self.frames:
            turn.frame(frame)
        if self.lose:
            raise OwnerLost("gone")
        return ACK


class Journal:
    """What the fake TurnRest is given and records."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str, int, bool]] = []
        self.frames: list[tuple[int, dict[str, Any]]] = []
        self.outcome: dict[str, Any] = {"stopReason": "end_turn"}


JOURNAL = Journal()


class FakeRest:
    """Stands for TurnRest: records how it was asked, yields the journal's frames."""

    def __init__(self, key: str, rid: str, after: int, *, follow: bool) -> None:
        JOURNAL.made.append((key, rid, after, follow))
        self.outcome = dict(JOURNAL.outcome)

    async def frames(self) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        for item in JOURNAL.frames:
            yield item

    def stop_reason(self) -> str:
        if "stopReason" not in self.outcome:
            raise OwnerLost("no end in the journal")
        return str(self.outcome["stopReason"])


@pytest.fixture(autouse=True)
def fake_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    JOURNAL.__init__()  # type: ignore[misc]  # a fresh journal for each test
    monkeypatch.setattr(prompt_wait, "TurnRest", FakeRest)


def run(prompter: FakePrompter, submit: Any = None) -> tuple[str, dict[str, Any]]:
    return asyncio.run(
        prompt_wait.wait_for_turn(
            prompter,  # type: ignore[arg-type]  # the fake has the one method used
            "k",
            {"prompt": [{"type": "text", "text": "hi"}], "wait": True},
            None,
            1 << 20,
            submit or (lambda *_: pytest.fail("no thread path expected")),
        )
    )


def test_the_answer_from_the_owner_connection() -> None:
    """Chunks joined, updates counted by kind, the request's own frames only from the
    agent; sent as a prompt nobody waits on; no journal read."""
    plan = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"update": {"sessionUpdate": "plan"}},
    }
    result = {"stopReason": "end_turn", "permissionDenied": 0}
    prompter = FakePrompter(
        [
            update(11, {"jsonrpc": "2.0", "id": 2, "method": "session/prompt"}, "out"),
            update(12, chunk("x 0\n")),
            update(13, plan),
            update(14, chunk("x 1\n")),
            update(15, {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}),
            {"type": "result", "requestId": "r-1", "result": result},
        ]
    )
    path, answer = run(prompter)
    assert path == "loop"
    assert prompter.payloads[0]["wait"] is False
    assert answer == {
        "requestId": "r-1",
        "sessionKey": "k",
        "stopReason": "end_turn",
        "text": "x 0\nx 1\n",
        "updates": {"agent_message_chunk": 2, "plan": 1},
        "fromSeq": 10,
        "lastSeq": 15,
        "events": "/v1/sessions/k/events?from=10",
        "permissionDenied": 0,
    }
    assert JOURNAL.made == []


def test_the_text_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prompt_wait, "TEXT_MAX_CHARS", 5)
    prompter = FakePrompter(
        [update(11, chunk("abc")), update(12, chunk("defgh")), {"type": "result", "result": {}}]
    )
    answer = run(prompter)[1]
    assert answer["text"] == "abcde"
    assert answer["textTruncated"] is True
    assert answer["updates"] == {"agent_message_chunk": 2}


def test_a_lagged_connection_reads_the_rest_from_the_journal() -> None:
    """After ``lagged``, the turn's rest comes from the journal, after the last seq seen,
    following it to the turn's end."""
    JOURNAL.frames = [(13, chunk("two"))]
    prompter = FakePrompter([update(12, chunk("one")), {"type": "lagged", "lastSeq": 12}])
    path, answer = run(prompter)
    assert JOURNAL.made == [("k", "r-1", 12, True)]
    assert (path, answer["text"], answer["lastSeq"]) == ("loop", "onetwo", 13)


def test_an_owner_lost_mid_turn_is_what_the_journal_holds() -> None:
    """The owner died after admitting it: the journal is read (not followed), and without
    an end there, the answer is OwnerLost."""
    JOURNAL.outcome = {}
    with pytest.raises(OwnerLost):
        run(FakePrompter([update(12, chunk("one"))], lose=True))
    assert JOURNAL.made == [("k", "r-1", 12, False)]


def test_no_warm_owner_takes_the_thread_path_and_the_journal() -> None:
    """No owner reached from the loop: the blocking submit (which may start one), then
    the turn from the journal from its cursor."""
    JOURNAL.frames = [(20, chunk("hi"))]
    asked: list[dict[str, Any]] = []

    def submit(key: str, payload: dict[str, Any], _d: int | None, _m: int) -> dict[str, Any]:
        asked.append(payload)
        return {**ACK, "fromSeq": 18}

    path, answer = run(FakePrompter(None), submit)
    assert path == "thread"
    assert asked[0]["wait"] is False
    assert JOURNAL.made == [("k", "r-1", 17, True)]
    assert (answer["text"], answer["fromSeq"]) == ("hi", 18)
