"""Issue 21 item 12 and issue 20 item 4: questions told truly, and controllers that may be.

Real owners, the mock agent, `sessions watch --control` and raw IPC controllers
(helpers shared with ``test_owner.py`` and ``test_questions.py``).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from typing import Any

import pytest
from tests.integration.test_owner import Cli, cli, finish, mock, wait_for
from tests.integration.test_questions import (
    answer_raw,
    control_watcher,
    controller,
    next_of,
    wait_controllers,
)

from tether.owner.settings import OwnerSettings

pytestmark = pytest.mark.integration

__all__ = ["cli", "mock"]  # fixtures, imported for pytest


def test_issue21_item12_a_late_answer_typed_into_watch_control_is_told(mock: Cli) -> None:
    """Another controller answers first: the watcher's resolution line names the winner's
    pid and uid, and the line typed afterwards is told it was not sent."""
    watch = control_watcher(mock)
    assert watch.stdin is not None
    assert watch.stderr is not None
    key = mock.status()["sessionKey"]
    raw = controller(key, "w-win")
    try:
        wait_controllers(mock, 2)
        prompt = mock.popen("prompt", "tool execute make deploy")
        assert watch.stderr.readline().startswith("[permission p-")
        iid = next_of(raw, "interaction")["interaction"]["id"]
        answer_raw(raw, "ans-win", iid, "allow")
        won = raw.until_terminal("ans-win")["result"]["interaction"]
        resolved = watch.stderr.readline()
        assert resolved.startswith(f"[answered {iid}] allow (controller by pid ")
        assert f"by pid {won['by']['pid']} uid {os.getuid()})" in resolved, resolved
        watch.stdin.write("n\n")  # typed too late: someone else won
        watch.stdin.flush()
        told = watch.stderr.readline()
        assert told.startswith("[already answered]"), told
        assert "not sent" in told
        assert iid in told
        rc, out, _ = finish(prompt)
        assert rc == 0
        assert "permission: allowed" in out
    finally:
        raw.__exit__()
    mock.run("sessions", "close")
    finish(watch)


def test_issue21_item12_deny_always_is_remembered_though_not_offered(mock: Cli) -> None:
    """The mock agent offers no reject_always: `deny-always` is remembered all the same,
    and the same tool call is then rejected at once, without asking."""
    key = mock.status()["sessionKey"]
    raw = controller(key, "w-d")
    try:
        wait_controllers(mock, 1)
        prompt = mock.popen("prompt", "tool execute rm -rf build")
        asked = next_of(raw, "interaction")["interaction"]
        assert "reject_always" not in [o["kind"] for o in asked["options"]]
        answered = mock.run("answer", asked["id"], "deny-always").stdout
        assert f"uid {os.getuid()})" in answered, answered
        assert "permission: denied" in finish(prompt)[1]
        again = mock.popen("prompt", "tool execute rm -rf build")
        rc, out, _ = finish(again)
        assert rc == 0
        assert "permission: denied" in out
    finally:
        raw.__exit__()
    resolved = [e for e in mock.journal() if e["kind"] == "interaction_resolved"]
    assert [r["how"] for r in resolved] == ["controller", "remembered"]


def _departure_order(entries: list[dict[str, Any]], request_id: str) -> list[str]:
    """The journal's order, for one turn: ``cancel`` (session/cancel sent), ``answer``
    (the permission request answered), ``resolved`` (the interaction's record)."""
    order = []
    for e in entries:
        frame = e.get("frame") if e["kind"] == "acp" and e.get("direction") == "out" else None
        if isinstance(frame, dict) and frame.get("method") == "session/cancel":
            order.append("cancel")
        elif (
            isinstance(frame, dict)
            and "method" not in frame
            and "outcome" in frame.get("result", {})
        ):
            order.append("answer")
        elif e["kind"] == "interaction_resolved" and e.get("requestId") == request_id:
            order.append("resolved")
    return order


def test_issue21_item12_a_caller_leaving_with_a_question_open_cancels_first(mock: Cli) -> None:
    """A prompter SIGKILLed while its permission question is open: `session/cancel` is
    sent before the question is answered `cancelled` (journal order), and the turn ends
    `cancelled` -- every time (it ended `end_turn` one time in five)."""
    key = mock.status()["sessionKey"]
    raw = controller(key, "w-l")
    try:
        wait_controllers(mock, 1)
        for _ in range(5):
            seen = len(mock.journal())
            prompt = mock.popen("prompt", "tool edit leave")
            asked = next_of(raw, "interaction")["interaction"]
            prompt.kill()  # our own child: the caller goes away, its turn is cancelled
            finish(prompt)
            assert next_of(raw, "interaction_resolved")["interaction"]["how"] == "cancelled"
            wait_for(lambda: mock.status()["status"] == "idle", "the turn to end")
            entries = mock.journal()[seen:]
            (ended,) = [e for e in entries if e["kind"] == "turn_ended"]
            assert ended.get("stopReason") == "cancelled", ended
            assert _departure_order(entries, asked["turn"]) == ["cancel", "answer", "resolved"]
    finally:
        raw.__exit__()


def test_issue20_item4_an_agent_cannot_attach_as_its_own_controller(mock: Cli) -> None:
    """From inside its own tree, `sessions watch --control` of its own session is refused
    (VISIBILITY_DENIED, exit 5) like an answer would be, at once; so its next tool call
    is decided by the policy at once, not left waiting for a controller."""
    watch = shlex.join(mock.argv("sessions", "watch", "--control", fmt="json"))
    out = mock.run("prompt", f"run {watch}", fmt="quiet").stdout
    head, _, body = out.partition("\n")
    assert head == "exit=5", out
    error = json.loads(body.splitlines()[0])["error"]
    assert error["data"]["detailCode"] == "VISIBILITY_DENIED"
    assert "cannot control its own session" in error["message"]
    assert mock.status()["watchers"] == 0
    assert "permission: denied" in mock.run("prompt", "tool execute make deploy").stdout


def test_issue20_item4_the_last_controller_dying_hands_the_question_to_the_policy(
    mock: Cli,
) -> None:
    """The only controller is SIGKILLed while a question is open: the question goes back
    to the policy at once (`how: policy`), not after permissionTimeout (300 s)."""
    watch = control_watcher(mock)
    assert watch.stderr is not None
    prompt = mock.popen("prompt", "tool execute make deploy")
    assert watch.stderr.readline().startswith("[permission p-")
    watch.kill()  # our own child
    finish(watch)
    rc, out, err = finish(prompt)  # would wait out the 300 s permissionTimeout
    assert rc == 0, err
    assert "permission: denied" in out
    (resolved,) = [e for e in mock.journal() if e["kind"] == "interaction_resolved"]
    assert resolved["how"] == "policy"


def test_issue20_item4_a_silent_controller_is_not_taken_for_one_that_left(mock: Cli) -> None:
    """A human who thinks longer than the owner's idle timeout for silent connections
    keeps the question: a controller's connection is never dropped for silence (it would
    otherwise count as the last controller leaving, and the policy would answer)."""
    watch = control_watcher(mock)
    assert watch.stdin is not None
    assert watch.stderr is not None
    prompt = mock.popen("prompt", "tool execute make deploy")
    assert watch.stderr.readline().startswith("[permission p-")
    time.sleep(OwnerSettings().connection_idle_timeout + 1)  # silent past the idle drop
    assert [q["question"] for q in mock.status()["interactions"]] == ["permission"]
    watch.stdin.write("y\n")
    watch.stdin.flush()
    assert watch.stderr.readline().startswith("[answered p-")
    rc, out, _ = finish(prompt)
    assert rc == 0
    assert "permission: allowed" in out
    mock.run("sessions", "close")
    finish(watch)
