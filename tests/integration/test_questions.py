"""Questions for a human end to end: real owners, the mock agent, raw IPC controllers.

A controller here is a raw ``watch`` connection with ``control: true``; the prompt is a
``tether prompt`` subprocess; answers go through ``tether answer`` or raw ``answer``
requests. Every session is closed at the end (the ``cli`` fixture).
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import threading
import time
from typing import Any

import pytest
from tests.integration.test_owner import Cli, Raw, finish, wait_for

pytestmark = pytest.mark.integration

Frame = dict[str, Any]


def controller(key: str, rid: str) -> Raw:
    raw = Raw(key)
    raw.request(rid, "watch", {"follow": True, "control": True})
    return raw


def next_of(raw: Raw, frame_type: str) -> Frame:
    """The first frame of ``frame_type`` not yet taken (read already, or read now)."""
    taken: list[Frame] = raw.__dict__.setdefault("taken", [])
    for frame in raw.frames:
        if frame.get("type") == frame_type and not any(frame is t for t in taken):
            taken.append(frame)
            return frame
    while True:
        frame = raw.read()
        assert frame is not None, f"EOF before a {frame_type} frame"
        if frame.get("type") == frame_type:
            taken.append(frame)
            return frame


def wait_controllers(c: Cli, n: int) -> None:
    wait_for(lambda: c.status()["watchers"] >= n, f"{n} watchers to attach")


def control_watcher(c: Cli) -> subprocess.Popen[str]:
    """`sessions watch --control` with stdin and stderr piped, attached as controller."""
    watch = subprocess.Popen(
        c.argv("sessions", "watch", "--control"),
        env=c.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    c.callers.append(watch)
    wait_controllers(c, 1)
    return watch


def answer_raw(raw: Raw, rid: str, interaction_id: str, answer: str) -> None:
    raw.request(rid, "answer", {"interactionId": interaction_id, "answer": answer})


def test_two_controllers_race_one_answer_reaches_the_agent(mock: Cli) -> None:
    """Two controllers answer one question at once: exactly one answer reaches the
    agent, the other gets ALREADY_ANSWERED, and both see the same resolution."""
    key = mock.status()["sessionKey"]
    a, b = controller(key, "w-a"), controller(key, "w-b")
    try:
        wait_controllers(mock, 2)
        prompt = mock.popen("prompt", "tool edit change deploy.yaml")
        qa, qb = next_of(a, "interaction"), next_of(b, "interaction")
        assert qa["interaction"] == qb["interaction"]
        question = qa["interaction"]
        assert question["toolCall"]["title"] == "change deploy.yaml"
        assert question["toolCall"]["kind"] == "edit"
        assert [o["kind"] for o in question["options"]] == [
            "allow_once",
            "allow_always",
            "reject_once",
        ]
        iid = question["id"]
        go = threading.Barrier(2)

        def race(raw: Raw, rid: str, word: str) -> None:
            go.wait()
            answer_raw(raw, rid, iid, word)

        threads = [
            threading.Thread(target=race, args=(a, "ans-a", "allow")),
            threading.Thread(target=race, args=(b, "ans-b", "deny")),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        terminals = [a.until_terminal("ans-a"), b.until_terminal("ans-b")]
        results = [t for t in terminals if t["type"] == "result"]
        errors = [t for t in terminals if t["type"] == "error"]
        assert len(results) == 1
        assert len(errors) == 1
        assert errors[0]["error"]["detailCode"] == "ALREADY_ANSWERED"
        winner = results[0]["result"]["interaction"]
        seen = [next_of(a, "interaction_resolved"), next_of(b, "interaction_resolved")]
        assert seen[0]["interaction"] == seen[1]["interaction"] == winner
        assert winner["how"] == "controller"
        assert winner["by"]["pid"] > 0
        rc, out, err = finish(prompt)
        assert rc == 0, err
        expected = "permission: allowed" if winner["answer"] == "allow" else "permission: denied"
        assert expected in out
        assert out.count("permission: ") == 1  # the agent got exactly one answer
    finally:
        a.__exit__()
        b.__exit__()
    kinds = [e["kind"] for e in mock.journal() if e["kind"].startswith("interaction")]
    assert kinds == ["interaction_opened", "interaction_resolved"]


def test_a_controller_attaching_late_sees_the_open_question(mock: Cli) -> None:
    """A controller that attaches after the question was asked is offered it while open;
    an answer from any shell (`tether answer`) then resolves it for everyone."""
    key = mock.status()["sessionKey"]
    first = controller(key, "w-1")
    try:
        wait_controllers(mock, 1)
        prompt = mock.popen("prompt", "tool execute rm -rf build")
        asked = next_of(first, "interaction")["interaction"]
        late = controller(key, "w-2")
        try:
            offered = next_of(late, "interaction")["interaction"]
            assert offered == asked
            listed = mock.status()["interactions"]
            assert [q["id"] for q in listed] == [asked["id"]]
            done = mock.json("answer", asked["id"], "deny")
            assert done["interaction"]["answer"] == "deny"
            assert next_of(late, "interaction_resolved")["interaction"]["how"] == "controller"
            again = mock.run("answer", asked["id"], "allow", rc=1)
            assert "already answered" in again.stderr
        finally:
            late.__exit__()
        rc, out, _ = finish(prompt)
        assert rc == 0
        assert "permission: denied" in out
        assert mock.status()["interactions"] == []
    finally:
        first.__exit__()


def test_no_controller_means_the_policy_decides_at_once(mock: Cli) -> None:
    """With nobody attached to ask, an `ask` is rejected at once (as before), and
    `--non-interactive-permissions fail` exits 5; the journal records how."""
    out = mock.run("prompt", "tool edit x").stdout
    assert "permission: denied" in out
    mock.run("--non-interactive-permissions", "fail", "prompt", "tool edit y", rc=5)
    resolved = [e for e in mock.journal() if e["kind"] == "interaction_resolved"]
    assert [r["how"] for r in resolved] == ["policy", "policy"]


def test_deadline_passes_and_the_policy_decides(cli: Any) -> None:
    """`permissionTimeout` passes with the question open: rejected, controllers told."""
    c = cli()
    (c.project / ".tether.toml").write_text("permissionTimeout = 0.3\n")
    c.run("sessions", "new")
    key = c.status()["sessionKey"]
    raw = controller(key, "w-d")
    try:
        wait_controllers(c, 1)
        prompt = c.popen("prompt", "tool edit slow")
        next_of(raw, "interaction")
        resolved = next_of(raw, "interaction_resolved")["interaction"]
        assert resolved["how"] == "deadline"
        assert resolved["outcome"] == {"outcome": {"outcome": "selected", "optionId": "reject"}}
        rc, out, _ = finish(prompt)
        assert rc == 0
        assert "permission: denied" in out
    finally:
        raw.__exit__()


def test_cancel_while_a_question_is_open(mock: Cli) -> None:
    """Cancelling the turn answers the open question `cancelled`, to the agent (the
    turn ends cancelled) and to every controller; a later answer is refused."""
    key = mock.status()["sessionKey"]
    raw = controller(key, "w-c")
    try:
        wait_controllers(mock, 1)
        prompt = mock.popen("prompt", "tool edit never")
        asked = next_of(raw, "interaction")["interaction"]
        assert mock.json("cancel")["cancelled"] is True
        resolved = next_of(raw, "interaction_resolved")["interaction"]
        assert resolved["how"] == "cancelled"
        assert resolved["outcome"] == {"outcome": {"outcome": "cancelled"}}
        rc, out, _ = finish(prompt)
        assert rc == 0
        assert "cancelled" in out
        late = mock.run("answer", asked["id"], "allow", fmt="json", rc=1)
        assert json.loads(late.stdout.splitlines()[-1])["error"]["data"]["detailCode"] == (
            "ALREADY_ANSWERED"
        )
    finally:
        raw.__exit__()


def test_allow_always_is_remembered_for_the_session(mock: Cli) -> None:
    """`always` selects the agent's allow_always option; the same tool call is then
    allowed at once, without asking."""
    key = mock.status()["sessionKey"]
    raw = controller(key, "w-r")
    try:
        wait_controllers(mock, 1)
        prompt = mock.popen("prompt", "tool execute make test")
        asked = next_of(raw, "interaction")["interaction"]
        mock.run("answer", asked["id"], "always")
        assert "permission: allowed" in finish(prompt)[1]
        second = mock.run("prompt", "tool execute make test").stdout
        assert "permission: allowed" in second
    finally:
        raw.__exit__()
    resolved = [e for e in mock.journal() if e["kind"] == "interaction_resolved"]
    assert [r["how"] for r in resolved] == ["controller", "remembered"]
    assert resolved[1]["outcome"]["outcome"]["optionId"] == "allow-always"


def test_watch_control_answers_from_stdin(mock: Cli) -> None:
    """`sessions watch --control` shows the question and answers it from stdin."""
    watch = control_watcher(mock)
    assert watch.stdin is not None
    assert watch.stderr is not None
    prompt = mock.popen("prompt", "tool execute make deploy")
    line = watch.stderr.readline()
    assert line.startswith("[permission p-")
    assert "execute: make deploy" in line
    watch.stdin.write("y\n")
    watch.stdin.flush()
    assert watch.stderr.readline().startswith("[answered p-")
    rc, out, _ = finish(prompt)
    assert rc == 0
    assert "permission: allowed" in out
    mock.run("sessions", "close")
    rc, _, _ = finish(watch)
    assert rc == 0


def _read_until(fd: int, needle: bytes, seen: bytearray, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"{needle!r} never came; the terminal showed {bytes(seen)!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the other side closed
                chunk = b""
            assert chunk, f"the terminal closed before {needle!r}: {bytes(seen)!r}"
            seen += chunk


def test_the_prompting_terminal_asks_and_typing_ahead_does_not_garble(mock: Cli) -> None:
    """On a terminal, `prompt` asks `Allow? [y]es, [a]lways, [n]o`; keys typed while
    the turn streams are neither echoed into its output nor taken as the answer."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        mock.argv("prompt", "echo started ; sleep 800 ; tool edit deploy.yaml"),
        env=mock.env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    seen = bytearray()
    try:
        _read_until(master, b"started", seen)
        os.write(master, b"garbage")  # typed while the turn streams, no newline
        _read_until(master, b"Allow? [y]es, [a]lways, [n]o", seen)
        assert b"garbage" not in seen
        os.write(master, b"y\n")
        _read_until(master, b"[done]", seen)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = bytes(seen).decode(errors="replace")
    assert "[permission p-" in text
    assert "edit: deploy.yaml" in text
    assert "permission: allowed" in text
    assert "garbage" not in text
    resolved = [e for e in mock.journal() if e["kind"] == "interaction_resolved"]
    assert [(r["answer"], r["how"]) for r in resolved] == [("allow", "controller")]


def test_an_elicitation_is_cancelled_with_its_turn(mock: Cli) -> None:
    """Cancelling the turn answers an open elicitation `cancel`, to the agent and to
    the controllers."""
    key = mock.status()["sessionKey"]
    raw = controller(key, "w-e")
    try:
        wait_controllers(mock, 1)
        prompt = mock.popen("prompt", "elicit form your name?")
        asked = next_of(raw, "interaction")["interaction"]
        assert asked["question"] == "elicitation"
        assert asked["requestedSchema"]["required"] == ["name"]
        assert mock.json("cancel")["cancelled"] is True
        resolved = next_of(raw, "interaction_resolved")["interaction"]
        assert (resolved["how"], resolved["outcome"]) == ("cancelled", {"action": "cancel"})
        rc, out, _ = finish(prompt)
        assert rc == 0
        assert "elicitation: cancel" in out
    finally:
        raw.__exit__()


def test_a_url_elicitation_answered_from_a_shell_then_completed(mock: Cli) -> None:
    """`tether answer ID accept` answers a URL elicitation; the agent's
    elicitation/complete is journaled and sent to the controllers."""
    key = mock.status()["sessionKey"]
    raw = controller(key, "w-u")
    try:
        wait_controllers(mock, 1)
        prompt = mock.popen("prompt", "elicit url sign-in")
        asked = next_of(raw, "interaction")["interaction"]
        assert asked["url"] == "https://example.invalid/sign-in"
        mock.run("answer", asked["id"], "accept")
        done = next_of(raw, "elicitation_completed")
        assert done["elicitationId"] == asked["elicitationId"]
        rc, out, _ = finish(prompt)
        assert rc == 0
        assert "elicitation: accept {}" in out
    finally:
        raw.__exit__()
    kinds = [e["kind"] for e in mock.journal()]
    assert "elicitation_completed" in kinds


def test_closing_the_session_cancels_an_open_question(mock: Cli) -> None:
    """`sessions close` with a question open: it is resolved `cancelled` for the
    controllers before their watch ends with the session."""
    key = mock.status()["sessionKey"]
    raw = controller(key, "w-x")
    try:
        wait_controllers(mock, 1)
        prompt = mock.popen("prompt", "tool edit never")
        next_of(raw, "interaction")
        mock.run("sessions", "close")
        resolved = next_of(raw, "interaction_resolved")["interaction"]
        assert resolved["how"] == "cancelled"
        end = raw.until_terminal("w-x")
        assert end["result"]["reason"] == "session-ended"
        finish(prompt)
    finally:
        raw.__exit__()


def test_a_policy_file_decides_and_asks(cli: Any) -> None:
    """`--permission-policy FILE`: its rules allow, deny, or ask a controller; a bad file
    is a usage error (exit 2) naming the problem."""
    c = cli()
    policy = c.project / "policy.toml"
    policy.write_text(
        'default = "deny"\n'
        '[[rule]]\nkind = "execute"\ntitle = "make *"\ndecision = "allow"\n'
        '[[rule]]\nkind = "edit"\ndecision = "ask"\n'
    )
    c.run("--permission-policy", str(policy), "sessions", "new")
    assert "permission: allowed" in c.run("prompt", "tool execute make test").stdout
    assert "permission: denied" in c.run("prompt", "tool execute rm -rf /").stdout
    key = c.status()["sessionKey"]
    raw = controller(key, "w-p")
    try:
        wait_controllers(c, 1)
        prompt = c.popen("prompt", "tool edit x")
        asked = next_of(raw, "interaction")["interaction"]
        c.run("answer", asked["id"], "allow")
        assert "permission: allowed" in finish(prompt)[1]
    finally:
        raw.__exit__()
    policy.write_text('default = "sometimes"\n')
    bad = c.run("--permission-policy", str(policy), "prompt", "hi", rc=2)
    assert "default must be allow, deny or ask" in bad.stderr


def test_watch_control_fills_a_form(mock: Cli) -> None:
    """`sessions watch --control` shows a form's fields and sends the typed JSON."""
    watch = control_watcher(mock)
    assert watch.stdin is not None
    assert watch.stderr is not None
    prompt = mock.popen("prompt", "elicit form who are you?")
    assert watch.stderr.readline().startswith("[question e-")
    assert "name (string, required)" in watch.stderr.readline()
    watch.stdin.write('{"name": "Ada"}\n')
    watch.stdin.flush()
    assert watch.stderr.readline().startswith("[answered e-")
    rc, out, _ = finish(prompt)
    assert rc == 0
    assert 'elicitation: accept {"name": "Ada"}' in out
    mock.run("sessions", "close")
    assert finish(watch)[0] == 0
