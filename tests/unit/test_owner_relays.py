"""The owner's relays room: routing, exactly one answer, timeout, client gone, terminal ids."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tether.errors import AlreadyAnswered, TetherError
from tether.ipc import protocol
from tether.owner.job import Job, Outbox
from tether.owner.relays import ClientRelays

ALL = ["fs/read_text_file", "fs/write_text_file", "terminal/create"]


class _Writer:
    """Enough of an asyncio StreamWriter for an Outbox: records what is written."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.transport = self

    def write(self, data: bytes) -> None:
        self.frames.extend(json.loads(line) for line in data.splitlines())

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, _name: str) -> None:
        return None


def _job(kind: str, payload: dict[str, Any], outbox: Outbox, rid: str = "r-1") -> Job:
    return Job(protocol.Envelope(rid, kind, payload), outbox, 0.0)


def _prompt(methods: list[str], token: str = "door-1") -> tuple[Job, _Writer]:
    writer = _Writer()
    outbox = Outbox(writer)  # type: ignore[arg-type]
    payload = {
        "prompt": [{"type": "text", "text": "hi"}],
        "control": True,
        "relay": {"methods": methods, "client": token},
    }
    return _job("prompt", payload, outbox), writer


def _answer(relays: ClientRelays, job: Job, relay_id: str, **answer: Any) -> Job:
    reply = _job("relay_answer", {"relayId": relay_id, **answer}, job.outbox, rid="r-answer")
    relays.admit_answer(reply)
    return reply


async def _asked(writer: _Writer) -> dict[str, Any]:
    """The next client_request frame written to the prompter."""
    while True:
        for frame in writer.frames:
            if frame.get("type") == "client_request":
                writer.frames.remove(frame)
                return frame
        await asyncio.sleep(0)


def test_only_listed_methods_of_a_controlling_prompt_are_relayed() -> None:
    async def main() -> None:
        job, _ = _prompt(["fs/read_text_file"])
        relays = ClientRelays(lambda: job)
        assert relays.wants("fs/read_text_file", {})
        assert not relays.wants("fs/write_text_file", {})
        assert not relays.wants("terminal/output", {"terminalId": "0" * 32})
        assert not ClientRelays(lambda: None).wants("fs/read_text_file", {})

    asyncio.run(main())


def test_the_first_answer_wins_and_others_are_refused() -> None:
    async def main() -> None:
        job, writer = _prompt(ALL)
        relays = ClientRelays(lambda: job)
        call = asyncio.ensure_future(relays.call("fs/read_text_file", {"path": "/x"}))
        asked = await _asked(writer)
        assert asked["method"] == "fs/read_text_file"
        assert asked["params"] == {"path": "/x"}
        stranger, _ = _prompt(ALL)
        refused = _answer(relays, stranger, asked["relayId"], result={"content": "no"})
        assert refused.done
        _answer(relays, job, asked["relayId"], result={"content": "yes"})
        assert await call == {"result": {"content": "yes"}}
        late = _job("relay_answer", {"relayId": asked["relayId"]}, job.outbox, rid="r-late")
        relays.admit_answer(late)
        assert late.done
        errors = [f for f in writer.frames if f.get("type") == "error"]
        assert [e["error"]["detailCode"] for e in errors] == [AlreadyAnswered.default_detail_code]

    asyncio.run(main())


def test_a_client_error_is_the_agents_error() -> None:
    async def main() -> None:
        job, writer = _prompt(ALL)
        relays = ClientRelays(lambda: job)
        call = asyncio.ensure_future(relays.call("fs/write_text_file", {"path": "/x"}))
        asked = await _asked(writer)
        _answer(relays, job, asked["relayId"], error={"code": -32002, "message": "nope"})
        assert await call == {"error": {"code": -32002, "message": "nope"}}

    asyncio.run(main())


def test_a_silent_client_times_out_and_a_gone_one_fails_at_once() -> None:
    async def main() -> None:
        job, writer = _prompt(ALL)
        relays = ClientRelays(lambda: job, timeout=0.01)
        answer = await relays.call("fs/read_text_file", {})
        assert answer["error"]["code"] == -32603
        assert "did not answer" in answer["error"]["message"]
        await asyncio.sleep(0)  # the outbox flushes at the end of the loop pass
        asked = await _asked(writer)
        expired = [f for f in writer.frames if f.get("type") == "relay_expired"]
        # the prompter is told, so that its own wait for its client ends too
        assert expired == [
            {"type": "relay_expired", "requestId": "r-1", "relayId": asked["relayId"]}
        ]
        writer.frames.clear()
        late = _answer(relays, job, asked["relayId"], result={"content": "late"})
        assert late.done
        await asyncio.sleep(0)
        errors = [f["error"]["detailCode"] for f in writer.frames if f.get("type") == "error"]
        assert errors == [AlreadyAnswered.default_detail_code]  # refused: not the agent's
        writer.frames.clear()
        relays.timeout = 0  # forever: only the client leaving ends it
        call = asyncio.ensure_future(relays.call("fs/read_text_file", {}))
        await _asked(writer)
        relays.detach(job.outbox)
        gone = await call
        assert "went away" in gone["error"]["message"]
        assert relays.pending() == 0
        assert not [f for f in writer.frames if f.get("type") == "relay_expired"]  # it left

    asyncio.run(main())


def test_client_terminal_ids_are_mapped_and_routed_to_their_door() -> None:
    async def main() -> None:
        job, writer = _prompt(ALL)
        current: list[Job | None] = [job]
        relays = ClientRelays(lambda: current[0])
        create = asyncio.ensure_future(relays.call("terminal/create", {"command": "ls"}))
        asked = await _asked(writer)
        _answer(relays, job, asked["relayId"], result={"terminalId": "1"})
        ours = (await create)["result"]["terminalId"]
        assert ours.startswith("client-")
        assert ours != "1"
        # A later turn of the same door (a new connection) serves the terminal.
        later, later_writer = _prompt(ALL)
        current[0] = later
        assert relays.wants("terminal/output", {"terminalId": ours})
        assert not relays.wants("terminal/output", {"terminalId": "1"})
        output = asyncio.ensure_future(relays.call("terminal/output", {"terminalId": ours}))
        asked = await _asked(later_writer)
        assert asked["params"] == {"terminalId": "1"}
        _answer(relays, later, asked["relayId"], result={"output": "", "truncated": False})
        assert "result" in await output
        # Its door gone: the terminal's requests fail (never Tether's own terminals).
        current[0] = None
        relays.detach(later.outbox)
        relays.detach(job.outbox)
        failed = await relays.call("terminal/release", {"terminalId": ours})
        assert "gone" in failed["error"]["message"]
        assert not relays.wants("terminal/output", {"terminalId": ours})

    asyncio.run(main())


def test_relay_answer_is_validated() -> None:
    line = protocol.request_frame("r", "relay_answer", {"relayId": "x", "error": "bad"})
    with pytest.raises(protocol.IpcRejected):
        protocol.parse_request(line)
    assert issubclass(AlreadyAnswered, TetherError)


def test_the_door_asks_for_relays_only_of_an_owner_that_knows_them() -> None:
    from tether.acp_door.turns import prompt_payload

    blocks = [{"type": "text", "text": "hi"}]
    relay = {"methods": ["fs/read_text_file"], "client": "t"}
    old = prompt_payload(blocks, {"type": "hello", "v": 2}, relay)
    assert "relay" not in old
    assert old["control"] is True
    new = prompt_payload(blocks, {"type": "hello", "v": 2, "features": ["relay"]}, relay)
    assert new["relay"] == relay
    # The owner side ignores what it does not know: a v2 prompt with `relay` is valid.
    line = protocol.request_frame("r", "prompt", new)
    assert protocol.parse_request(line).payload["relay"] == relay
