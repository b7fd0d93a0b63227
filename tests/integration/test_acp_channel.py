"""The door for HTTP (``/v1/acp/{serverId}``), without HTTP: POSTs in, answers and an
event stream out, with real owners and the mock agent behind it."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tests.acp_schema import schema_errors
from tests.integration._journal import count, journal_when

from tether import operations, sessions
from tether.acp_door import DoorOptions
from tether.acp_door.channel import AcpChannel
from tether.errors import ClosedResourceError, UsageError

pytestmark = pytest.mark.integration
T = TypeVar("T")
MOCK = [sys.executable, "-m", "tether.testing.mock_agent"]


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return asyncio.run(coro)
    finally:
        for record in operations.list_sessions():
            operations.close_session(record["key"])


def _channel(ring: int = 1024, **owner: Any) -> AcpChannel:
    label = " ".join(MOCK)
    scope = sessions.agent_scope(label, MOCK, named=False)
    return AcpChannel(DoorOptions(label, MOCK, scope, owner_options=owner), ring=ring)


def _req(rid: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    frame = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    assert schema_errors(frame, "client") == []
    return frame


Events = list[tuple[str, dict[str, Any]]]


async def _collect(channel: AcpChannel, after: str | None, into: Events) -> None:
    async for item in channel.events(after):
        into.append(item)


def _prompt(rid: int, sid: str, text: str) -> dict[str, Any]:
    return _req(
        rid, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    )


async def _open(channel: AcpChannel, cwd: Path) -> str:
    """initialize and session/new; the new session's id."""
    await channel.post(_req(1, "initialize", {"protocolVersion": 1}))
    new = await channel.post(_req(2, "session/new", {"cwd": str(cwd), "mcpServers": []}))
    assert new is not None
    return str(new["result"]["sessionId"])


def test_posts_get_their_answers_and_updates_go_to_the_stream(project_dir: Path) -> None:
    """A prompt's POST answers with the stop reason; its updates are stream events; two
    clients using the same JSON-RPC id each get their own answer."""

    async def main() -> None:
        channel = _channel()
        init = await channel.post(_req(1, "initialize", {"protocolVersion": 1}))
        assert init is not None
        assert init["id"] == 1
        assert schema_errors(init, "agent", "initialize") == []
        sid = await _open(channel, project_dir)
        events: Events = []
        stream = asyncio.ensure_future(_collect(channel, None, events))
        await asyncio.sleep(0)
        a, b = await asyncio.gather(
            channel.post(_prompt(7, sid, "echo from a")), channel.post(_req(7, "session/list", {}))
        )
        assert a is not None
        assert b is not None
        assert a["id"] == b["id"] == 7
        assert a["result"]["stopReason"] == "end_turn"
        assert [s["sessionId"] for s in b["result"]["sessions"]] == [sid]
        note = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
        assert await channel.post(note) is None  # a notification: 202, no answer
        await channel.aclose()
        await stream
        texts = [
            f["params"]["update"].get("content", {}).get("text")
            for _, f in events
            if f.get("method") == "session/update"
        ]
        assert "from a" in texts
        ids = [int(i) for i, _ in events]  # one session: each id is its journal seq
        assert ids == sorted(set(ids))
        for _, frame in events:
            assert schema_errors(frame, "agent") == []
        await channel.aclose()  # idempotent
        with pytest.raises(ClosedResourceError):
            await channel.post(_req(9, "session/list", {}))

    _run(main())


def test_a_lagging_follower_never_lets_the_doors_turn_overtake_older_entries(
    project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other parties' entries come through the journal follower, the door's own turn
    through its IPC stream: the turn waits for the follower to pass what was journaled
    before it, so events go out in journal order and each id is a plain seq."""
    from tether.operations import watching

    real = watching.follow_session

    def slow_follow(key: str, emit: Any, **kw: Any) -> int:
        if kw.get("door") != "acp":  # the ACP door's followers only
            return real(key, emit, **kw)

        def lagging(seq: int, line: str) -> None:
            time.sleep(0.05)  # a follower thread starved of CPU
            emit(seq, line)

        return real(key, lagging, **kw)

    monkeypatch.setattr(watching, "follow_session", slow_follow)

    async def main() -> None:
        channel = _channel()
        await channel.post(_req(1, "initialize", {"protocolVersion": 1}))
        sid = await _open(channel, project_dir)
        events: Events = []
        stream = asyncio.ensure_future(_collect(channel, None, events))
        await asyncio.sleep(0)
        answer = await channel.post(_prompt(2, sid, "echo in order"))
        assert answer is not None
        assert answer["result"]["stopReason"] == "end_turn"
        await channel.aclose()
        await stream
        ids = [i for i, _ in events]
        assert all(i.isdigit() for i in ids), ids
        assert [int(i) for i in ids] == sorted({int(i) for i in ids})
        kinds = [f["params"]["update"]["sessionUpdate"] for _, f in events if "params" in f]
        assert kinds.index("available_commands_update") < kinds.index("agent_message_chunk")

    _run(main())


def test_last_event_id_resumes_without_gap_or_duplicate(project_dir: Path) -> None:
    """Each event's id is its journal seq. A stream reopened after any event gets the
    rest, each once: from the ring when it holds the id, from the journal when it does
    not (an id it never gave, or one before everything: "0"), with the same ids."""

    async def main() -> None:
        channel = _channel()
        sid = await _open(channel, project_dir)
        live: Events = []
        stream = asyncio.ensure_future(_collect(channel, "0", live))
        await channel.post(_prompt(3, sid, "stream 6 c"))
        await channel.post(_prompt(4, sid, "stream 6 d"))
        await channel.aclose()  # the streams below read what the ring holds, then end
        await stream
        seqs = [int(i) for i, _ in live]
        assert seqs == sorted(set(seqs))
        assert [f["params"]["sessionId"] for _, f in live] == [sid] * len(live)
        from_ring: Events = []
        await _collect(channel, live[4][0], from_ring)
        assert from_ring == live[5:]
        # A seq that is no event of this stream (a control entry between two turns'
        # updates): the ring cannot place it, the journal can.
        gap = next(k for k in range(1, len(seqs)) if seqs[k] > seqs[k - 1] + 1)
        from_journal: Events = []
        await _collect(channel, str(seqs[gap - 1] + 1), from_journal)
        assert from_journal == live[gap:]
        everything: Events = []
        await _collect(channel, "0", everything)
        assert everything == live
        with pytest.raises(UsageError):
            await _collect(channel, "not-an-id", [])

    _run(main())


def test_a_stream_older_than_the_ring_resumes_from_the_journal(project_dir: Path) -> None:
    """A ring of 2 events: a stream from the start ("0") comes from the journal, each
    update once, in order, each id the seq of the journal entry it relays."""

    async def main() -> None:
        channel = _channel(ring=2)
        sid = await _open(channel, project_dir)
        await channel.post(_prompt(3, sid, "stream 6 x"))
        await channel.aclose()
        events: Events = []
        await _collect(channel, "0", events)
        seqs = [int(i) for i, _ in events]
        assert seqs == sorted(set(seqs))
        texts = [
            f["params"]["update"].get("content", {}).get("text")
            for _, f in events
            if f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        ]
        assert texts == [f"x {i}\n" for i in range(6)]
        stored = journal_when(sid, count("turn_ended"))
        entries = {e["seq"]: e for e in stored}
        for seq, frame in zip(seqs, (f for _, f in events), strict=True):
            assert entries[seq]["frame"]["params"]["update"] == frame["params"]["update"]

    _run(main())


def test_an_abandoned_prompt_post_cancels_its_turn(project_dir: Path) -> None:
    """The HTTP client of a prompt goes away: the turn gets session/cancel and ends
    `cancelled`; the session stays and answers the next prompt."""

    async def main() -> None:
        channel = _channel()
        sid = await _open(channel, project_dir)
        long = asyncio.ensure_future(channel.post(_prompt(3, sid, "echo started ; sleep 60000")))
        async for _, frame in channel.events("0"):
            if "started" in str(frame):
                break  # the turn has begun
        long.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long
        again = await channel.post(_prompt(4, sid, "echo again"))
        assert again is not None
        assert again["result"]["stopReason"] == "end_turn"
        deadline = time.monotonic() + 30.0
        while [t["stopReason"] for t in operations.history(sid)][-1:] != ["end_turn"]:
            assert time.monotonic() < deadline  # the journal is written in batches, after
            await asyncio.sleep(0.05)
        assert [t["stopReason"] for t in operations.history(sid)] == ["cancelled", "end_turn"]
        await channel.aclose()

    _run(main())


def test_the_doors_wait_for_a_relayed_answer_ends_with_the_owners(project_dir: Path) -> None:
    """The client never answers the agent's fs/read_text_file: when the owner gives up
    (its timeout) the agent gets an error and the door stops waiting too -- it tells the
    client ``$/cancel_request`` while the turn still runs; the client's late answer is
    then dropped and counted, and never reaches the agent."""

    async def main() -> None:
        channel = _channel(permission_timeout=0.5)
        caps = {"fs": {"readTextFile": True, "writeTextFile": False}}
        init = {"protocolVersion": 1, "clientCapabilities": caps}
        await channel.post(_req(1, "initialize", init))
        new = await channel.post(
            _req(2, "session/new", {"cwd": str(project_dir), "mcpServers": []})
        )
        assert new is not None
        sid = new["result"]["sessionId"]
        turn = asyncio.ensure_future(channel.post(_prompt(3, sid, "read notes.txt ; sleep 60000")))
        asked: dict[str, Any] = {}
        async with asyncio.timeout(60):  # a bound on a hang, not a timing
            async for _, frame in channel.events(from_start=True):
                assert schema_errors(frame, "agent") == []
                if frame.get("method") == "fs/read_text_file":
                    asked = frame
                if frame.get("method") == "$/cancel_request":
                    assert frame["params"] == {"requestId": asked["id"]}
                    break
        assert not turn.done()  # the door's wait ended with the owner's, not the turn's
        assert channel.late_answers == 0
        late = {"jsonrpc": "2.0", "id": asked["id"], "result": {"content": "too late"}}
        assert schema_errors(late, "client", "fs/read_text_file") == []
        assert await channel.post(late) is None
        await channel.post(_req(4, "session/list", {}))  # the late answer was read before
        assert channel.late_answers == 1
        cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
        await channel.post(cancel)
        answer = await turn
        assert answer is not None
        assert answer["result"]["stopReason"] == "cancelled"
        await channel.aclose()
        stored = journal_when(sid, count("turn_ended"))
        agent_got = [e for e in stored if e.get("kind") == "acp" and e.get("direction") == "out"]
        assert "too late" not in str(agent_got)
        errors = [e["frame"]["error"]["message"] for e in agent_got if "error" in e["frame"]]
        assert any("did not answer fs/read_text_file" in m for m in errors), errors

    _run(main())
