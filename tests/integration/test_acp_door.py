"""``tether acp``: Tether as an ACP agent, driven by a schema-checking ACP client.

Every frame both ways is validated against the official ACP schema by the peer
(:mod:`tests.integration._acp_peer`). Each test closes the sessions it opened, so no
owner, keeper or agent outlives it (the suite's leak check proves it).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.integration._acp_peer import MOCK, AcpPeer, peer, texts
from tests.integration._journal import count, journal_when

from tether import operations

__all__ = ["peer"]  # the fixture, imported

pytestmark = pytest.mark.integration

MOCK_FULL = f"{MOCK} --modes --config-options"


def _journal_kinds(key: str, kind: str, *, wait: bool = False) -> list[dict[str, object]]:
    """The stored entries of ``kind``; with ``wait``, once there is one (bounded: the
    writer commits within milliseconds of the answer)."""
    entries = journal_when(key, count(kind), timeout=10.0 if wait else 0.0)
    return [e for e in entries if e.get("kind") == kind]


def test_a_session_lifecycle_speaks_schema_valid_acp(peer: Callable[..., AcpPeer]) -> None:
    """initialize, new, prompt (updates in order, then the stop reason), set_mode,
    set_config_option, list, resume, close: every frame is schema-valid."""
    p = peer(MOCK_FULL)
    init = p.initialize()
    caps = init["agentCapabilities"]
    assert caps["loadSession"] is True
    assert set(caps["sessionCapabilities"]) == {"list", "resume", "close"}
    assert "_tether/session/terminate" in caps["_meta"]["tether"]["extensions"]
    sid = p.new_session()
    result, notes = p.prompt(sid, "stream 5 part")
    assert result["stopReason"] == "end_turn"
    assert texts(notes) == [f"part {i}\n" for i in range(5)]
    assert {n["params"]["sessionId"] for n in notes} == {sid}
    p.request("session/set_mode", {"sessionId": sid, "modeId": "plan"})
    result, _ = p.request(
        "session/set_config_option", {"sessionId": sid, "configId": "model", "value": "mock-large"}
    )
    assert isinstance(result["configOptions"], list)
    listed, _ = p.request("session/list", {"cwd": str(p.cwd)})
    assert [s["sessionId"] for s in listed["sessions"]] == [sid]
    p.request("session/resume", {"sessionId": sid, "cwd": str(p.cwd)})
    p.request("session/close", {"sessionId": sid})
    assert operations.offline_status(sid)["status"] == "closed"
    load = {"sessionId": sid, "cwd": str(p.cwd), "mcpServers": []}
    unknown, _ = p.wait(p.start("session/load", load))
    assert unknown["error"]["code"] == -32002  # a closed session is not found
    p.disconnect()


def test_new_load_and_resume_answer_the_agents_modes_and_config_options(
    peer: Callable[..., AcpPeer],
) -> None:
    """session/new starts the agent and answers what its session/new said (modes,
    configOptions); load and resume answer them too, as set since."""
    p = peer(MOCK_FULL)
    p.initialize()
    new, _ = p.request("session/new", {"cwd": str(p.cwd), "mcpServers": []})
    sid = new["sessionId"]
    assert new["modes"]["currentModeId"] == "default"
    assert {m["id"] for m in new["modes"]["availableModes"]} >= {"default", "plan"}
    assert [o["id"] for o in new["configOptions"]] == ["model", "fast"]
    p.request("session/set_mode", {"sessionId": sid, "modeId": "plan"})
    p.request(
        "session/set_config_option", {"sessionId": sid, "configId": "model", "value": "mock-large"}
    )
    load = {"sessionId": sid, "cwd": str(p.cwd), "mcpServers": []}
    for method in ("session/load", "session/resume"):
        answer, _ = p.request(method, load)
        assert answer["modes"]["currentModeId"] == "plan", method
        model = next(o for o in answer["configOptions"] if o["id"] == "model")
        assert model["currentValue"] == "mock-large", method
    plain = peer()
    plain.initialize()
    bare, _ = plain.request("session/new", {"cwd": str(p.cwd), "mcpServers": []})
    assert "modes" not in bare  # the agent offered none: none answered
    assert "configOptions" not in bare


def test_resume_during_another_clients_turn_answers_at_once(
    peer: Callable[..., AcpPeer],
) -> None:
    """A second client resumes while the first one's turn runs: it gets the agent's
    modes at once (from the owner's status), not after the turn; the turn then ends."""
    p = peer(MOCK_FULL)
    p.initialize()
    sid = p.new_session()
    rid = p.start_prompt(sid, "echo started ; sleep 600000")
    p.until_text("started")
    q = peer(MOCK_FULL)
    q.initialize()
    resumed, _ = q.request("session/resume", {"sessionId": sid, "cwd": str(p.cwd)})
    assert resumed["modes"]["currentModeId"] == "default"
    p.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    answer, _ = p.wait(rid)
    assert answer["result"]["stopReason"] == "cancelled"
    q.disconnect()
    p.disconnect()


def test_session_cancel_ends_the_turn_cancelled(peer: Callable[..., AcpPeer]) -> None:
    """session/cancel during a turn: the prompt answers stopReason cancelled; the
    session stays usable."""
    p = peer()
    p.initialize()
    sid = p.new_session()
    rid = p.start_prompt(sid, "echo started ; sleep 60000")
    p.until_text("^started$")
    p.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    answer, _ = p.wait(rid)
    assert answer["result"]["stopReason"] == "cancelled"
    _, notes = p.prompt(sid, "echo again")
    assert texts(notes) == ["again"]
    p.disconnect()


def test_a_second_client_loads_the_history_of_a_disconnected_one(
    peer: Callable[..., AcpPeer],
) -> None:
    """The first client leaves; the session stays warm; a second client's session/load
    replays the conversation (prompt and answer) before answering, then prompts."""
    first = peer()
    first.initialize()
    sid = first.new_session()
    first.prompt(sid, "echo the first answer")
    owner = operations.status(sid)["ownerPid"]
    first.disconnect()
    assert operations.status(sid)["ownerPid"] == owner  # still warm

    second = peer()
    second.initialize()
    _, replay = second.request(
        "session/load", {"sessionId": sid, "cwd": str(second.cwd), "mcpServers": []}
    )
    assert texts(replay, "user_message_chunk") == ["echo the first answer"]
    assert texts(replay) == ["the first answer"]
    _, notes = second.prompt(sid, "echo the second answer")
    assert texts(notes) == ["the second answer"]
    assert operations.status(sid)["ownerPid"] == owner
    second.disconnect()


def test_a_turn_of_another_client_is_relayed_to_an_attached_one(
    peer: Callable[..., AcpPeer],
) -> None:
    """Two clients on one session: the one that did not prompt sees the prompt and the
    updates of the other's turn; the prompter sees its own updates once."""
    a, b = peer(), peer()
    a.initialize()
    b.initialize()
    sid = a.new_session()
    b.request("session/resume", {"sessionId": sid, "cwd": str(b.cwd)})
    _, notes = a.prompt(sid, "echo from a")
    assert texts(notes) == ["from a"]
    seen: list[dict[str, object]] = []
    while texts(seen) != ["from a"]:
        seen.append({"method": "session/update", "params": b.until("session/update")})
    assert texts(seen, "user_message_chunk") == ["echo from a"]
    rest = a.disconnect()
    assert texts(rest) == []  # a never got its own turn twice
    b.disconnect()


def test_terminate_twice_second_is_a_no_op_reporting_the_first(
    peer: Callable[..., AcpPeer],
) -> None:
    """_tether/session/terminate ends the session at once; a second call changes nothing
    and reports the first end; the journal holds exactly one session_ended."""
    p = peer()
    p.initialize()
    sid = p.new_session()
    p.prompt(sid, "echo warm")
    owner = operations.status(sid)["ownerPid"]
    first, _ = p.request("_tether/session/terminate", {"sessionId": sid})
    assert first == {
        "terminated": True,
        "reason": "terminated",
        "terminatedBy": "daemon",
        "_meta": first["_meta"],
    }
    assert first["_meta"]["tether"]["alreadyEnded"] is False
    assert first["_meta"]["tether"]["survivors"] == []
    second, _ = p.request("_tether/session/terminate", {"sessionId": sid})
    assert second["reason"] == "terminated"
    assert second["_meta"]["tether"]["alreadyEnded"] is True
    ended = _journal_kinds(sid, "session_ended")
    assert len(ended) == 1
    assert ended[0]["reason"] == "terminated"
    assert ended[0]["requestedBy"]["door"] == "acp"  # type: ignore[index]
    assert ended[0]["requestedBy"]["client"] == "tether-tests"  # type: ignore[index]
    assert operations.offline_status(sid)["status"] == "closed"
    assert operations.status(sid)["ownerPid"] in (owner, None)  # gone, or going
    p.disconnect()


def test_ended_reaches_each_of_two_attached_clients_exactly_once(
    peer: Callable[..., AcpPeer],
) -> None:
    """A session terminated from outside (the operations layer, as `sessions terminate`):
    each attached client gets _tether/session/ended once, with seed 004's fields."""
    a, b = peer(), peer()
    a.initialize()
    b.initialize()
    sid = a.new_session()
    b.request("session/resume", {"sessionId": sid, "cwd": str(b.cwd)})
    a.prompt(sid, "echo warm")
    result = operations.terminate(sid)
    assert result["terminated"] is True
    for client in (a, b):
        ended = client.until("_tether/session/ended")
        assert ended == {
            "sessionId": sid,
            "reason": "terminated",
            "terminatedBy": "daemon",
            "message": ended["message"],
            "exitCode": ended["exitCode"],
            "stderr": ended["stderr"],
        }
    for client in (a, b):
        rest = client.disconnect()
        all_frames = client.seen + rest
        assert [f.get("method") for f in all_frames].count("_tether/session/ended") == 1


def test_terminate_during_a_tool_tree_leaves_no_process(peer: Callable[..., AcpPeer]) -> None:
    """A turn whose agent spawned a setsid child and a double-forked daemon is running;
    terminate ends it at once: the prompt fails, every process of the tree is gone."""
    p = peer()
    p.initialize()
    sid = p.new_session()
    rid = p.start(
        "session/prompt",
        {
            "sessionId": sid,
            "prompt": [{"type": "text", "text": "spawn-setsid ; spawn-daemon ; sleep 600000"}],
        },
    )
    pids = [int(p.until_text(r"spawned pid=(\d+)").group(1)) for _ in range(2)]
    starttimes = {pid: _starttime(pid) for pid in pids}
    assert all(starttimes.values())
    other = peer()
    other.initialize()
    result, _ = other.request("_tether/session/terminate", {"sessionId": sid})
    assert result["terminated"] is True
    assert result["_meta"]["tether"]["survivors"] == []
    answer, _ = p.wait(rid)
    assert answer["error"]["code"] == -32002  # the session is gone under the turn
    for pid, start in starttimes.items():
        assert _starttime(pid) != start, f"pid {pid} survived the terminate"
    sent = [e["frame"].get("method") for e in _journal_kinds(sid, "acp") if e["direction"] == "out"]  # type: ignore[union-attr]
    assert "session/cancel" not in sent  # the operator's end does not ask the agent
    assert "session/close" not in sent
    other.disconnect()
    p.disconnect()


def _starttime(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def test_close_on_exit_closes_the_clients_sessions(peer: Callable[..., AcpPeer]) -> None:
    """--close-on-exit: when the client leaves, the sessions it used are closed."""
    p = peer(MOCK, "--close-on-exit")
    p.initialize()
    sid = p.new_session()
    p.prompt(sid, "echo bye")
    p.disconnect()
    assert operations.offline_status(sid)["status"] == "closed"


def test_list_shows_every_open_session_in_creation_order(peer: Callable[..., AcpPeer]) -> None:
    """session/list: the home's open sessions, oldest first; a bad cursor is an error."""
    p = peer()
    p.initialize()
    made = [p.new_session() for _ in range(3)]
    listed, _ = p.request("session/list", {})
    assert [s["sessionId"] for s in listed["sessions"]] == made
    assert "nextCursor" not in listed
    bad, _ = p.wait(p.start("session/list", {"cursor": "nope"}))
    assert bad["error"]["code"] == -32602
    p.disconnect()


def test_bad_input_gets_a_json_rpc_error_and_the_door_goes_on(
    peer: Callable[..., AcpPeer],
) -> None:
    """A malformed line, an unknown method and a prompt for an unopened session get
    errors; the door keeps serving."""
    p = peer()
    p.initialize()
    assert p.proc.stdin is not None
    p.proc.stdin.write(b"{not json\n")
    p.proc.stdin.flush()
    parse_error = p.next()
    assert parse_error is not None
    assert parse_error["error"]["code"] == -32700
    unknown, _ = p.wait(p.start("_other/thing", {}))
    assert unknown["error"]["code"] == -32601
    missing, _ = p.wait(
        p.start("session/prompt", {"sessionId": "nope", "prompt": [{"type": "text", "text": "x"}]})
    )
    assert missing["error"]["code"] == -32002
    relative, _ = p.wait(p.start("session/new", {"cwd": "relative", "mcpServers": []}))
    assert relative["error"]["code"] == -32602
    p.new_session()
    p.disconnect()


def test_a_client_leaving_mid_turn_cancels_its_turn_and_keeps_the_session(
    peer: Callable[..., AcpPeer],
) -> None:
    """EOF during a turn: the turn ends cancelled in its owner; the session stays warm
    and answers the next client."""
    p = peer()
    p.initialize()
    sid = p.new_session()
    p.start_prompt(sid, "echo started ; sleep 60000")
    p.until_text("^started$")
    p.disconnect()
    deadline = time.monotonic() + 30.0
    while not (ended := _journal_kinds(sid, "turn_ended")):  # the owner notices, then records
        assert time.monotonic() < deadline, "the turn never ended"
        time.sleep(0.05)
    assert [e.get("stopReason") for e in ended] == ["cancelled"]
    assert operations.status(sid)["ownerPid"] is not None  # still warm
    q = peer()
    q.initialize()
    q.request("session/resume", {"sessionId": sid, "cwd": str(q.cwd)})
    _, notes = q.prompt(sid, "echo still here")
    assert texts(notes) == ["still here"]
    q.disconnect()


def test_sigterm_ends_the_door_and_keeps_its_sessions(peer: Callable[..., AcpPeer]) -> None:
    """SIGTERM to `tether acp`: it exits 0 at once; its sessions stay open and warm."""
    p = peer()
    p.initialize()
    sid = p.new_session()
    p.prompt(sid, "echo warm")
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(timeout=30) == 0
    assert operations.status(sid)["status"] == "idle"


@pytest.mark.parametrize(
    ("option", "said"),
    [
        pytest.param("allow", "permission: allowed", id="allowed"),
        pytest.param("reject", "permission: denied", id="rejected"),
    ],
)
def test_a_permission_the_policy_leaves_open_is_put_to_the_client(
    peer: Callable[..., AcpPeer], option: str, said: str
) -> None:
    """approve-reads leaves an execute tool call open: the client gets it as its own
    session/request_permission (the agent's tool call and options, the door's session
    id), and the option it selects is what the agent gets."""
    p = peer()
    p.initialize()
    sid = p.new_session()
    rid = p.start_prompt(sid, "tool execute rm -rf build")
    ask = p.until_request("session/request_permission")
    assert ask["params"]["sessionId"] == sid
    assert ask["params"]["toolCall"]["title"] == "rm -rf build"
    assert {o["optionId"] for o in ask["params"]["options"]} == {"allow", "allow-always", "reject"}
    p.send(
        {
            "jsonrpc": "2.0",
            "id": ask["id"],
            "result": {"outcome": {"outcome": "selected", "optionId": option}},
        }
    )
    answer, notes = p.wait(rid)
    assert answer["result"]["stopReason"] == "end_turn"
    assert said in texts(notes)
    resolved = _journal_kinds(sid, "interaction_resolved", wait=True)
    assert [(r["answer"], r["how"]) for r in resolved] == [(option, "controller")]
    p.disconnect()


def test_stdio_to_regular_files_works(project_dir: Path, tmp_path: Path) -> None:
    """stdin and stdout may be plain files (a recorded session, `> out.ndjson`): the door
    answers into the file instead of dying on "Pipe transport is only for pipes"."""
    import json
    import os
    import subprocess
    import sys

    requests = tmp_path / "in.ndjson"
    requests.write_text(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": 1, "clientCapabilities": {}},
            }
        )
        + "\n"
    )
    answers = tmp_path / "out.ndjson"
    with requests.open("rb") as stdin, answers.open("wb") as stdout:
        proc = subprocess.run(
            [sys.executable, "-m", "tether", "--cwd", str(project_dir), "acp", "--agent", "mock"],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=dict(os.environ),
            timeout=60,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr
    frames = [json.loads(line) for line in answers.read_text().splitlines()]
    assert frames[0]["id"] == 1
    assert frames[0]["result"]["protocolVersion"] == 1
