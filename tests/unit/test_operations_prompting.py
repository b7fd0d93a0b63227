"""``operations.prompting`` (and its asyncio flavour): the one payload, the one turn loop
and the caller-leaves rule, over fake owner connections (no processes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import tether.operations.turn_rest as turn_rest
from tether import operations
from tether.errors import OwnerLost, PromptTimeout, WatchLagged
from tether.operations import prompting

HELLO = {"type": "hello", "v": 2, "generation": 3, "journalSeq": 10}


def chunk(seq: int, text: str) -> dict[str, Any]:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    acp = {"jsonrpc": "2.0", "method": "session/update", "params": {"update": update}}
    return {"type": "update", "requestId": "r-1", "seq": seq, "direction": "in", "frame": acp}


ACK = {"type": "ack", "requestId": "r-1", "seq": 11}
RESULT = {"type": "result", "requestId": "r-1", "result": {"stopReason": "end_turn"}}


class FakeAsyncConn:
    """An AsyncOwnerConnection's surface: frames of one request, then EOF (or a loss)."""

    def __init__(self, frames: list[dict[str, Any]], lose: bool = False) -> None:
        self.hello = dict(HELLO)
        self._frames = frames
        self._lose = lose
        self.sent: list[tuple[str, dict[str, Any], str | None]] = []
        self.closed = False

    async def send(
        self,
        kind: str,
        payload: dict[str, Any],
        deadline_ms: int | None,
        *,
        request_id: str | None = None,
        max_bytes: int | None = None,
    ) -> str:
        self.sent.append((kind, payload, request_id))
        return request_id or "r-1"

    async def frames(self, rid: str) -> AsyncIterator[dict[str, Any]]:
        for frame in self._frames:
            await asyncio.sleep(0)
            yield frame
        if self._lose:
            raise OwnerLost("gone")
        await asyncio.sleep(3600)  # the turn goes on: nothing more comes

    async def aclose(self) -> None:
        self.closed = True


class Blocking:
    """Stands for ``run``: records the blocking operations asked of it."""

    def __init__(self, kept: bool = True) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.kept = kept

    async def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        self.calls.append((fn.__name__, args))
        return self.kept if fn.__name__ == "owner_kept_turn" else {"cancelled": True}


class Journal:
    """What the fake TurnRest finds and records."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str, int, bool]] = []
        self.frames_: list[tuple[int, dict[str, Any]]] = []
        self.outcome_: dict[str, Any] = {"stopReason": "end_turn"}


JOURNAL = Journal()


class FakeRest:
    """Stands for TurnRest: the journal holds ``frames_`` and ``outcome_``."""

    def __init__(self, key: str, rid: str, after: int, *, follow: bool, door: Any = None) -> None:
        JOURNAL.made.append((key, rid, after, follow))
        self.outcome = dict(JOURNAL.outcome_)

    async def frames(self) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        for item in JOURNAL.frames_:
            yield item

    def read(self, on_frame: Any) -> None:
        for seq, frame in JOURNAL.frames_:
            on_frame(seq, "in", frame)

    def stop_reason(self) -> str:
        if "stopReason" not in self.outcome:
            raise OwnerLost("no end in the journal")
        return str(self.outcome["stopReason"])


@pytest.fixture
def journal(monkeypatch: pytest.MonkeyPatch) -> Journal:
    JOURNAL.__init__()  # type: ignore[misc]  # a fresh journal for each test
    monkeypatch.setattr(turn_rest, "TurnRest", FakeRest)
    return JOURNAL


def read_all(conn: FakeAsyncConn, run: Blocking, **how: Any) -> tuple[list[Any], Any]:
    async def main() -> tuple[list[Any], Any]:
        payload = operations.prompt_payload([{"type": "text", "text": "hi"}], client="t")
        turn = await operations.asubmit(conn, "k", payload, run=run, **how)  # type: ignore[arg-type]
        seen = [frame async for frame in turn.frames()]
        await turn.aclose()
        return seen, turn

    return asyncio.run(main())


def test_the_payload_is_built_in_one_place() -> None:
    """Defaults: a waited turn, relayed updates; each option adds only its own field;
    ``relay`` only for an owner whose hello lists the feature."""
    blocks = [{"type": "text", "text": "hi"}]
    assert operations.prompt_payload(blocks, client="cli") == {
        "prompt": blocks,
        "wait": True,
        "client": "cli",
    }
    full = operations.prompt_payload(
        blocks,
        client="http",
        wait=False,
        updates=False,
        control=True,
        permission_mode="approve-all",
        permission_policy="p.toml",
    )
    assert full == {
        "prompt": blocks,
        "wait": False,
        "client": "http",
        "permissionMode": "approve-all",
        "permissionPolicy": "p.toml",
        "control": True,
        "updates": False,
    }
    relay = {"methods": ["fs/read_text_file"]}
    old = operations.prompt_payload(blocks, client="acp", relay=relay, hello=HELLO)
    new = operations.prompt_payload(
        blocks, client="acp", relay=relay, hello={**HELLO, "features": ["relay"]}
    )
    assert "relay" not in old
    assert new["relay"] == relay


def test_a_turn_read_on_its_connection() -> None:
    """The ack, the relayed frames and the result, in order; nothing cancelled at the end."""
    conn = FakeAsyncConn([ACK, chunk(12, "a"), RESULT])
    run = Blocking()
    seen, turn = read_all(conn, run)
    assert seen == [ACK, chunk(12, "a"), RESULT]
    assert conn.sent[0][0] == "prompt"
    assert (turn.result, turn.ended, turn.let_go) == ({"stopReason": "end_turn"}, True, False)
    assert (turn.end.stop_reason, turn.end.last_seq, turn.end.from_journal) == (
        "end_turn",
        12,
        False,
    )
    assert run.calls == []
    assert conn.closed


def test_a_lagged_turn_is_finished_from_the_journal(journal: Journal) -> None:
    """After ``lagged`` the rest comes from the journal (followed, after the last seq
    given), as relayed updates, and the turn ends with a result frame all the same."""
    journal.frames_ = [(14, chunk(0, "b")["frame"])]
    journal.outcome_ = {"stopReason": "end_turn", "cancel": {"by": "x"}}
    conn = FakeAsyncConn([ACK, chunk(12, "a"), {"type": "lagged", "lastSeq": 13}])
    seen, turn = read_all(conn, Blocking())
    assert journal.made == [("k", "r-1", 13, True)]
    assert seen[-2] == {
        "type": "update",
        "seq": 14,
        "direction": "in",
        "frame": chunk(0, "b")["frame"],
    }
    assert seen[-1]["result"] == {"stopReason": "end_turn", "cancel": {"by": "x"}}
    assert turn.let_go


@pytest.mark.parametrize(("kept", "follow"), [(True, True), (False, False)])
def test_a_cut_connection_asks_whether_the_owner_kept_the_turn(
    journal: Journal, kept: bool, follow: bool
) -> None:
    """OwnerLost after the ack: the same generation still serving means a lagged frame
    was lost -- follow the journal; else read what is stored."""
    run = Blocking(kept=kept)
    read_all(FakeAsyncConn([ACK, chunk(12, "a")], lose=True), run)
    assert run.calls[0] == ("owner_kept_turn", ("k", 3))
    assert journal.made == [("k", "r-1", 12, follow)]


def test_leaving_a_waited_turn_cancels_it_by_its_request_id() -> None:
    """The caller-leaves rule: a waited turn left before its end is cancelled in its
    owner (by request id, through ``run``), then the connection is closed."""
    conn = FakeAsyncConn([ACK, chunk(12, "a")])
    run = Blocking()

    async def main() -> None:
        payload = operations.prompt_payload([], client="t")
        turn = await operations.asubmit(conn, "k", payload, run=run)  # type: ignore[arg-type]
        frames = turn.frames()
        assert (await anext(frames))["type"] == "ack"
        await frames.aclose()
        await turn.aclose()

    asyncio.run(main())
    assert run.calls == [("cancel", ("k", "r-1"))]
    assert conn.closed


def test_leaving_a_detached_turn_never_cancels_it() -> None:
    """A turn nobody waits on (``wait: false``) runs on when its submitter goes."""
    conn = FakeAsyncConn([ACK])
    run = Blocking()

    async def main() -> None:
        payload = operations.prompt_payload([], client="http", wait=False)
        turn = await operations.asubmit(conn, "k", payload, run=run)  # type: ignore[arg-type]
        await turn.aclose()

    asyncio.run(main())
    assert run.calls == []
    assert conn.closed


def test_the_turns_error_ends_it_without_a_cancel() -> None:
    error = PromptTimeout("too slow").to_wire()
    conn = FakeAsyncConn([ACK, {"type": "error", "requestId": "r-1", "error": error}])
    run = Blocking()
    with pytest.raises(PromptTimeout):
        read_all(conn, run)
    assert run.calls == []


class FakeConn:
    """The blocking OwnerConnection's surface for run_turn: ``wait`` relays, then raises."""

    def __init__(self, frames: list[dict[str, Any]], error: Exception) -> None:
        self.hello = dict(HELLO)
        self.generation = 3
        self._frames = frames
        self._error = error

    def wait(self, rid: str, *, on_frame: Any, deadline_ms: int | None = None) -> dict[str, Any]:
        for frame in self._frames:
            on_frame(frame)
        raise self._error


def test_the_blocking_loop_finishes_a_lagged_turn_from_the_journal(
    journal: Journal,
) -> None:
    journal.frames_ = [(15, chunk(0, "b")["frame"])]
    shown: list[dict[str, Any]] = []
    conn = FakeConn([chunk(12, "a")], WatchLagged("behind", last_seq=13))
    end = prompting.run_turn(conn, "k", "r-1", shown.append)  # type: ignore[arg-type]
    assert (end.request_id, end.stop_reason, end.result) == (
        "r-1",
        "end_turn",
        {"stopReason": "end_turn"},
    )
    assert (end.last_seq, end.from_journal) == (15, True)
    assert journal.made == [("k", "r-1", 13, True)]
    assert [f["seq"] for f in shown] == [12, 15]


def test_the_blocking_loop_reads_what_a_dead_owner_left(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OwnerLost and another generation (or none) serving: the journal, not followed;
    without an end there, the outcome is unknown."""
    monkeypatch.setattr(prompting, "owner_kept_turn", lambda key, generation: False)
    journal.outcome_ = {}
    conn = FakeConn([chunk(12, "a")], OwnerLost("gone"))
    with pytest.raises(OwnerLost):
        prompting.run_turn(conn, "k", "r-1", lambda _f: None)  # type: ignore[arg-type]
    assert journal.made == [("k", "r-1", 12, False)]
