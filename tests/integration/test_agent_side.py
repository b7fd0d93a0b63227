"""Everything Tether runs for an agent is the agent (issue 20, items 1 and 3).

Real owners and the mock agent: a command the agent runs in an ACP terminal (its own
keeper under the owner) cannot answer the session's questions.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import pytest
from tests.integration.test_owner import Cli, finish
from tests.integration.test_questions import controller, wait_controllers

pytestmark = pytest.mark.integration

FAKES = Path(__file__).resolve().parent.parent / "fake_agents"
SELF_ANSWER = FAKES / "self_answer.py"


def test_a_terminal_the_agent_created_cannot_answer_its_question(mock: Cli, tmp_path: Path) -> None:
    """A ``tether answer`` run in the agent's own terminal is refused; the question stays
    open for the operator's controller, whose answer is the one the agent gets."""
    key = mock.status()["sessionKey"]
    raw = controller(key, "w1")
    try:
        wait_controllers(mock, 1)
        out = tmp_path / "answer.txt"
        helper = [sys.executable, str(SELF_ANSWER), str(out), "--cwd", str(mock.project), "mock"]
        prompt = mock.popen("prompt", f"terminal --keep {shlex.join(helper)} ; tool edit x")
        frame = None
        while frame is None:
            got = raw.read()
            assert got is not None, "EOF before the question"
            if got.get("type") == "interaction":
                frame = got
        # The helper writes what its answer got: refused (or it would have resolved it).
        for _ in range(2000):  # bounded: 20 s
            if out.exists() and out.read_text().endswith("\n"):
                break
            time.sleep(0.01)
        result = out.read_text()
        code, _, text = result.partition("\n")
        assert code == "5", result
        assert "own" in text, result
        iid = frame["interaction"]["id"]
        raw.request("a1", "answer", {"interactionId": iid, "answer": "deny"})
        rc, stdout, _ = finish(prompt)
        assert rc == 0
        assert "permission: denied" in stdout or "rejected" in stdout, stdout
    finally:
        raw.__exit__()
