"""Issue 9 ("Honest under faults"): the owner, the IPC and the operations layer.

Real CLI processes, real owners, the mock agent -- as ``test_owner.py``, whose helpers
we share. Each test is named after the item of issue 9 it guards.
"""

from __future__ import annotations

import json
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.integration.test_owner import (
    WAIT,
    Cli,
    alive,
    cli,
    finish,
    mock,
    signal_descendant,
    wait_for,
)

pytestmark = pytest.mark.integration

__all__ = ["cli", "mock"]  # fixtures, imported for pytest


# --- item 2: one rule for a caller that goes away -------------------------------------


def test_issue9_item2_a_killed_waiting_caller_cancels_its_turn(mock: Cli) -> None:
    """SIGKILL of a waiting `prompt` caller cancels its turn in the owner, as Ctrl-C does."""
    caller = mock.popen("prompt", "sleep 60000")
    active = mock.wait_active()
    signal_descendant(caller.pid, signal.SIGKILL)
    finish(caller)
    wait_for(lambda: mock.status()["currentRequest"] is None, "the turn to be cancelled")
    assert mock.history("turn")[-1]["payload"]["stopReason"] == "cancelled"
    assert mock.status()["agentPid"] == active["agentPid"]  # the session stays warm


def test_issue9_item2_no_wait_turns_are_not_affected(mock: Cli) -> None:
    """A --no-wait prompt runs to its end after its caller has gone."""
    mock.run("prompt", "--no-wait", "sleep 300 ; echo done")
    wait_for(lambda: mock.history("turn"), "the turn to end")
    assert mock.history("turn")[-1]["payload"]["stopReason"] == "end_turn"


# --- item 7: a closed session is not a cancelled turn ---------------------------------


def test_issue9_item7_prompter_learns_its_session_was_closed(mock: Cli) -> None:
    """A streaming prompter whose session is closed by another caller gets SESSION_CLOSED."""
    caller = mock.popen("prompt", "stream 200000 x", fmt="json")
    mock.wait_active()
    assert mock.json("sessions", "close")["survivors"] == []
    rc, out, err = finish(caller)
    assert rc == 1, err
    records = [json.loads(line) for line in out.strip().splitlines()]
    assert "error" in records[-1], (records[-3:], err)
    assert records[-1]["error"]["data"]["detailCode"] == "SESSION_CLOSED"
    assert records[-2]["action"] == "session_ended"
    assert records[-2]["reason"] == "closed"


def test_issue9_item7_text_prompter_sees_why(mock: Cli) -> None:
    """In text mode the prompter exits non-zero and says the session was closed."""
    caller = mock.popen("prompt", "sleep 60000")
    mock.wait_active()
    mock.run("sessions", "close")
    rc, _, err = finish(caller)
    assert rc != 0
    assert "session ended" in err
    assert "[done] cancelled" not in err


# --- item 8: session_ended means the session ended, exactly once ----------------------


def test_issue9_item8_close_before_the_agent_started_records_one_session_end(
    cli: Callable[..., Cli],
) -> None:
    """`sessions new` then `sessions close` (no prompt ever) records one session_ended."""
    c = cli()
    c.run("sessions", "new")
    c.run("sessions", "close")
    ended = c.history("session_ended")
    assert len(ended) == 1, ended
    assert ended[0]["payload"]["agentWasRunning"] is False
    assert c.history("agent_run_ended") == []


def test_issue9_item8_offline_close_records_one_session_end(cli: Callable[..., Cli]) -> None:
    """A session closed while no owner runs still records its one session_ended."""
    c = cli()
    first = c.json("--ttl", "0.2", "sessions", "new")
    wait_for(lambda: not alive(first["ownerPid"]), "the owner to retire")
    assert c.history("session_ended") == []  # retirement is not the session's end
    c.run("sessions", "close")
    c.run("sessions", "close", rc=None)  # a second close records nothing more
    assert len(c.history("session_ended")) == 1


# --- item 13: a silent client cannot pin an owner -------------------------------------


def test_issue9_item13_silent_connection_does_not_pin_the_owner(
    cli: Callable[..., Cli],
) -> None:
    """A raw socket that reads hello and sends nothing lets an owner with --ttl 2 retire."""
    from tether import sessions

    c = cli()
    made = c.json("--ttl", "2", "sessions", "new")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(WAIT)
        sock.connect(sessions.socket_path(made["sessionKey"]))
        assert b'"hello"' in sock.recv(65536)
        wait_for(lambda: not alive(made["ownerPid"]), "the owner to retire", timeout=WAIT * 2)
    finally:
        sock.close()


# --- item 9: large prompts work; any limit is stated ----------------------------------


def test_issue9_item9_a_3_mib_prompt_works_through_the_owner(mock: Cli, tmp_path: Path) -> None:
    """`prompt -f big.txt` with 3 MiB goes through the warm path as through exec."""
    big = tmp_path / "big.txt"
    big.write_text("echo " + "y" * (3 * 1024 * 1024) + "\n")
    out = mock.run("prompt", "-f", str(big)).stdout
    assert out.count("y") >= 3 * 1024 * 1024


def test_issue9_item9_over_the_limit_is_a_usage_error_naming_it(
    mock: Cli, tmp_path: Path, tether_home: Path
) -> None:
    """A prompt over the configured limit exits 2 with an error naming the limit."""
    (tether_home / "config.toml").write_text("promptMaxBytes = 100000\n")
    big = tmp_path / "big.txt"
    big.write_text("echo " + "z" * 200_000)
    proc = mock.run("prompt", "-f", str(big), rc=2)
    assert "100000" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "still" in mock.run("prompt", "echo still").stdout
