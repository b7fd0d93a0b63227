"""Questions for a human with a real agent: claude-agent-acp's scripted Bash tool use
(through the loopback fake Anthropic API) relayed to a controller that allows it -- the
tool runs -- and to one that denies it -- it does not, and the turn goes on."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.realagents.fake_anthropic import FakeAnthropic
from tests.realagents.test_owner_real import TOOL_PROMPT, Cli, owner_session, tether_env
from tether import sessions

pytestmark = pytest.mark.realagents


class Controller:
    """A raw IPC ``watch`` with ``control: true``: it is offered the owner's questions."""

    def __init__(self, key: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(str(sessions.socket_path(key)))
        self.file = self.sock.makefile("rb")
        self.file.readline()  # hello
        self.send("w", "watch", {"control": True})

    def send(self, rid: str, kind: str, payload: dict[str, Any]) -> None:
        frame = {"v": 2, "requestId": rid, "kind": kind, "payload": payload}
        self.sock.sendall(json.dumps(frame).encode() + b"\n")

    def next_of(self, frame_type: str) -> dict[str, Any]:
        while True:
            line = self.file.readline()
            assert line, f"the owner closed before a {frame_type} frame"
            frame: dict[str, Any] = json.loads(line)
            if frame.get("type") == frame_type:
                return frame

    def close(self) -> None:
        self.file.close()
        self.sock.close()


@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_owner_claude_bash_question_relayed_to_a_controller(
    answer: str,
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
) -> None:
    """Under approve-reads, claude's Bash tool use becomes a question for the attached
    controller; its answer decides whether the command runs."""
    cli = Cli(claude_agent_cmd[0], tether_env(claude_agent_env), project_dir)
    with owner_session(cli):
        ctl = Controller(cli.status()["sessionKey"])
        try:
            with cli.popen("prompt", TOOL_PROMPT) as proc:
                question = ctl.next_of("interaction")["interaction"]
                assert question["question"] == "permission"
                assert question["toolCall"]["rawInput"]["command"] == "echo hi > out.txt"
                ctl.send("a", "answer", {"interactionId": question["id"], "answer": answer})
                resolved = ctl.next_of("interaction_resolved")["interaction"]
                assert (resolved["answer"], resolved["how"]) == (answer, "controller")
                out, err = proc.communicate(timeout=45)
            assert proc.returncode == 0, err
            assert out.rstrip().rpartition("\n")[2].startswith("[done] end_turn")
            assert (project_dir / "out.txt").exists() is (answer == "allow")
        finally:
            ctl.close()
