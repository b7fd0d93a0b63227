"""``tether acp``: the agent's ``fs/*`` and ``terminal/*`` served by the ACP client itself.

A client that advertises ``fs.readTextFile`` / ``fs.writeTextFile`` / ``terminal``
gets the agent's requests for them (relayed by the owner through the door, the
session id rewritten); one that does not leaves them to Tether, as before. Every
frame both ways is checked against the official schema (:mod:`tests.integration._acp_peer`),
and the official Python SDK's client connection serves terminals in one test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration._acp_peer import AcpPeer, peer, sdk_door, texts
from tests.integration._journal import count, journal_when

from tether import operations

__all__ = ["peer"]  # the fixture, imported

pytestmark = pytest.mark.integration

FS_CAPS = {"fs": {"readTextFile": True, "writeTextFile": True}}


@pytest.fixture(autouse=True)
def _close_everything() -> Iterator[None]:
    """Every session of the home closed at the end (with proof of its tree)."""
    yield
    for record in operations.list_sessions():
        operations.close_session(record["key"])


def test_fs_requests_go_to_a_client_that_serves_files(
    peer: Callable[..., AcpPeer], project_dir: Path
) -> None:
    """Read and write reach the client (the door's session id, the agent's path); the
    agent gets the client's content, the client's error as it was, and nothing is
    written on disk by Tether."""
    (project_dir / "notes.txt").write_text("on disk\n")
    p = peer()
    p.initialize(FS_CAPS)
    sid = p.new_session()
    rid = p.start_prompt(sid, "read notes.txt")
    ask = p.until_request("fs/read_text_file")
    assert ask["params"] == {"sessionId": sid, "path": "notes.txt"}
    p.answer(ask, {"content": "from the client"})
    answer, notes = p.wait(rid)
    assert answer["result"]["stopReason"] == "end_turn"
    assert "from the client" in texts(notes)

    rid = p.start_prompt(sid, "write out.txt hello there")
    ask = p.until_request("fs/write_text_file")
    assert ask["params"] == {"sessionId": sid, "path": "out.txt", "content": "hello there"}
    p.answer(ask, {})
    _, notes = p.wait(rid)
    assert "wrote out.txt" in texts(notes)
    assert not (project_dir / "out.txt").exists()  # the client wrote it, not Tether

    rid = p.start_prompt(sid, "read missing.txt")
    ask = p.until_request("fs/read_text_file")
    error = {"code": -32002, "message": "no such file in the editor"}
    p.send({"jsonrpc": "2.0", "id": ask["id"], "error": error})
    _, notes = p.wait(rid)
    assert "fs error -32002 no such file in the editor" in texts(notes)
    p.disconnect()


def test_a_client_without_the_capabilities_leaves_fs_and_terminals_to_tether(
    peer: Callable[..., AcpPeer], project_dir: Path
) -> None:
    """No fs/terminal advertised: the owner reads the file and runs the terminal, and
    the client never sees a request."""
    (project_dir / "notes.txt").write_text("on disk")
    p = peer()
    p.initialize({"fs": {"readTextFile": False, "writeTextFile": True}})
    sid = p.new_session()
    _, notes = p.prompt(sid, f"read {project_dir / 'notes.txt'}")
    assert "on disk" in texts(notes)
    _, notes = p.prompt(sid, "terminal echo from-tether")
    report = "\n".join(texts(notes))
    assert "exit=0" in report
    assert "from-tether" in report
    assert "id=client-" not in report
    assert not [f for f in p.seen if "method" in f and "id" in f]  # no request to the client
    p.disconnect()


def test_a_client_leaving_mid_request_ends_the_turn_and_the_agent_gets_an_error(
    peer: Callable[..., AcpPeer], project_dir: Path
) -> None:
    """The client goes away while the agent waits for its fs answer: the agent is
    answered with an error at once (never a hang), the turn ends, and the session
    serves the next client."""
    p = peer()
    p.initialize(FS_CAPS)
    sid = p.new_session()
    p.start_prompt(sid, "read notes.txt")
    p.until_request("fs/read_text_file")
    p.disconnect()

    q = peer()
    q.initialize()
    q.request("session/resume", {"sessionId": sid, "cwd": str(project_dir)})
    answer, notes = q.prompt(sid, "echo still here")
    assert answer["stopReason"] == "end_turn"
    assert "still here" in texts(notes)
    entries = journal_when(sid, count("turn_ended", 2))
    ended = [e for e in entries if e.get("kind") == "turn_ended"]
    assert len(ended) == 2
    errors = [
        e["frame"]
        for e in entries
        if e.get("kind") == "acp" and e.get("direction") == "out" and "error" in e.get("frame", {})
    ]
    assert any("went away" in str(f["error"].get("message")) for f in errors), errors
    q.disconnect()


class _TerminalClient:
    """An SDK ``Client`` that serves terminals (and fs) itself, recording each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.updates: list[Any] = []

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update)

    async def create_terminal(self, command: str, session_id: str, **kw: Any) -> Any:
        import acp

        self.calls.append(("create", {"command": command, "sessionId": session_id, **kw}))
        return acp.schema.CreateTerminalResponse(terminal_id="1")

    async def terminal_output(self, session_id: str, terminal_id: str, **_: Any) -> Any:
        import acp

        self.calls.append(("output", {"sessionId": session_id, "terminalId": terminal_id}))
        exit_status = acp.schema.TerminalExitStatus(exit_code=0)
        return acp.schema.TerminalOutputResponse(
            output="client ran it\n", truncated=False, exit_status=exit_status
        )

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **_: Any) -> Any:
        import acp

        self.calls.append(("wait", {"sessionId": session_id, "terminalId": terminal_id}))
        return acp.schema.WaitForTerminalExitResponse(exit_code=0)

    async def release_terminal(self, session_id: str, terminal_id: str, **_: Any) -> Any:
        import acp

        self.calls.append(("release", {"sessionId": session_id, "terminalId": terminal_id}))
        return acp.schema.ReleaseTerminalResponse()

    async def kill_terminal(self, session_id: str, terminal_id: str, **_: Any) -> Any:
        import acp

        self.calls.append(("kill", {"sessionId": session_id, "terminalId": terminal_id}))
        return acp.schema.KillTerminalResponse()


def test_the_official_sdk_client_serves_the_agents_terminal(project_dir: Path) -> None:
    """The SDK's ClientSideConnection advertises terminal: create, wait, output and
    release reach its handlers with the door's session id and its own terminal id;
    the agent sees a ``client-`` id of Tether's and the client's output."""
    import acp

    async def main() -> None:
        client = _TerminalClient()
        async with sdk_door(client, project_dir) as (conn, _proc):
            caps = acp.schema.ClientCapabilities(terminal=True)
            await conn.initialize(protocol_version=1, client_capabilities=caps)
            new = await conn.new_session(cwd=str(project_dir), mcp_servers=[])
            answer = await conn.prompt(
                session_id=new.session_id, prompt=[acp.text_block("terminal echo hi")]
            )
            assert answer.stop_reason == "end_turn"
            assert [name for name, _ in client.calls] == ["create", "wait", "output", "release"]
            assert all(c["sessionId"] == new.session_id for _, c in client.calls)
            assert client.calls[0][1]["command"] == "echo"
            assert client.calls[0][1]["args"] == ["hi"]
            assert {c.get("terminalId") for _, c in client.calls[1:]} == {"1"}
            chunks = [
                u.content.text for u in client.updates if u.session_update == "agent_message_chunk"
            ]
            report = "\n".join(chunks)
            assert "terminal id=client-" in report, report
            assert "client ran it" in report

    asyncio.run(main())


def test_elicitations_go_to_a_client_that_advertised_them(
    peer: Callable[..., AcpPeer], project_dir: Path
) -> None:
    """A client that advertised form elicitations gets the agent's elicitation/create
    (the door's session id, the agent's message and schema) and its accepted content
    reaches the agent; a url elicitation, a mode it did not advertise, is declined at
    the door, and so is every elicitation of a client that advertised none."""
    p = peer()
    p.initialize({"elicitation": {"form": {}}})
    sid = p.new_session()
    rid = p.start_prompt(sid, "elicit form your name ; elicit url page")
    ask = p.until_request("elicitation/create")
    assert ask["params"]["sessionId"] == sid
    assert ask["params"]["mode"] == "form"
    assert ask["params"]["message"] == "your name"
    assert ask["params"]["requestedSchema"]["required"] == ["name"]
    p.answer(ask, {"action": "accept", "content": {"name": "Ada"}})
    answer, notes = p.wait(rid)
    assert answer["result"]["stopReason"] == "end_turn"
    assert texts(notes) == ['elicitation: accept {"name": "Ada"}', "elicitation: decline"]
    assert [f["method"] for f in p.seen if "method" in f and "id" in f] == ["elicitation/create"]
    p.disconnect()

    q = peer()
    q.initialize()
    q.request("session/resume", {"sessionId": sid, "cwd": str(project_dir)})
    _, notes = q.prompt(sid, "elicit form again")
    assert texts(notes) == ["elicitation: decline"]
    assert not [f for f in q.seen if "method" in f and "id" in f]  # nothing was asked
    q.disconnect()


def test_a_url_elicitation_and_its_completion_reach_the_client(
    peer: Callable[..., AcpPeer],
) -> None:
    """A client that advertised url elicitations gets the agent's elicitation/create
    (its elicitationId and url) and, once it accepted, the agent's
    elicitation/complete for it."""
    p = peer()
    p.initialize({"elicitation": {"url": {}}})
    sid = p.new_session()
    rid = p.start_prompt(sid, "elicit url sign-in")
    ask = p.until_request("elicitation/create")
    assert ask["params"]["sessionId"] == sid
    assert ask["params"]["mode"] == "url"
    assert ask["params"]["url"] == "https://example.invalid/sign-in"
    p.answer(ask, {"action": "accept"})
    done = p.until("elicitation/complete")
    assert done == {"elicitationId": ask["params"]["elicitationId"]}
    answer, _ = p.wait(rid)
    assert answer["result"]["stopReason"] == "end_turn"
    said = [t for t in texts(p.seen) if t.startswith("elicitation:")]
    assert said == ["elicitation: accept {}"]
    p.disconnect()
