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
from typing import Any

import pytest
from tests.integration.test_owner import (
    WAIT,
    Cli,
    alive,
    cli,
    finish,
    mock,
    signal_descendant,
    stop_inside_a_write,
    stop_outside_writes,
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
    import threading

    caller = mock.popen("prompt", "stream 200000 x", fmt="json")
    mock.wait_active()
    # Read the prompter's output meanwhile, as a terminal would: the owner gives a caller
    # that does not read its last frames only a bounded time before it goes.
    done: list[tuple[int, str, str]] = []
    reader = threading.Thread(target=lambda: done.append(finish(caller)))
    reader.start()
    assert mock.json("sessions", "close")["survivors"] == []
    reader.join()
    rc, out, err = done[0]
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


# --- item 6: `sessions close` returns when the owner is gone --------------------------


def test_issue9_item6_close_returns_after_the_owner_exited(mock: Cli) -> None:
    """When `sessions close` returns, the owner process is gone and its lock is free."""
    import fcntl
    import os

    from tether import sessions

    mock.run("prompt", "echo hi")
    status = mock.status()
    closed = mock.json("sessions", "close")
    assert closed["survivors"] == []
    assert not alive(status["ownerPid"])
    fd = os.open(sessions.lock_path(status["sessionKey"]), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if an owner still holds it
    finally:
        os.close(fd)


# --- item 4: --timeout bounds the whole call ------------------------------------------


def test_issue9_item4_timeout_bounds_a_call_to_a_stopped_owner(mock: Cli) -> None:
    """With the owner stopped, `prompt --timeout 2` exits 3 naming the phase it was in."""
    owner = mock.status()["ownerPid"]
    signal_descendant(owner, signal.SIGSTOP)
    try:
        proc = mock.run("--timeout", "2", "prompt", "echo x", fmt="json", rc=3)
    finally:
        signal_descendant(owner, signal.SIGCONT)
    error = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    assert error["data"]["detailCode"] == "CALL_TIMEOUT"
    assert "owner" in error["message"]


def test_issue9_item4_timeout_bounds_the_agent_handshake_in_exec(
    cli: Callable[..., Cli], tether_home: Path
) -> None:
    """`exec --timeout 2` with an agent that never answers initialize exits 3 at ~2 s,
    not after the 60 s handshake timeout configured here."""
    import sys

    (tether_home / "config.toml").write_text("handshakeTimeout = 60\n")
    agent = f"{sys.executable} -m tether.testing.mock_agent --hang-on-initialize"
    c = cli(["--agent", agent])
    proc = c.run("--timeout", "2", "exec", "echo x", fmt="json", rc=3)
    error = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    assert error["data"]["detailCode"] == "CALL_TIMEOUT"
    assert "starting the agent" in error["message"]


def test_issue9_item4_agent_start_counts_against_a_prompt_deadline(
    cli: Callable[..., Cli], tether_home: Path
) -> None:
    """A prompt's --timeout covers the owner's agent start: exit 3, not the handshake."""
    import sys

    (tether_home / "config.toml").write_text("handshakeTimeout = 60\n")
    agent = f"{sys.executable} -m tether.testing.mock_agent --hang-on-initialize"
    c = cli(["--agent", agent])
    c.run("sessions", "new")
    proc = c.run("--timeout", "2", "prompt", "echo x", fmt="json", rc=3)
    error = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    assert "agent was starting" in error["message"]


# --- item 5: an unresponsive owner is seen and replaced -------------------------------


def test_issue9_item5_status_reports_a_stopped_owner_as_unresponsive(mock: Cli) -> None:
    """`status` answers from the registry when the owner does not: unresponsive, its pid."""
    owner = mock.status()["ownerPid"]
    signal_descendant(owner, signal.SIGSTOP)
    try:
        status = mock.status()
    finally:
        signal_descendant(owner, signal.SIGCONT)
    assert status["status"] == "unresponsive"
    assert status["ownerPid"] == owner
    assert status["heartbeatAgeS"] is not None


def test_issue9_item5_a_silent_owner_is_fenced_and_replaced(
    cli: Callable[..., Cli], tether_home: Path
) -> None:
    """After ownerUnresponsiveAfter of silence, the next caller SIGKILLs the owner (proven
    by identity), its keeper ends the agent tree, and a new owner serves the prompt."""
    (tether_home / "config.toml").write_text("ownerUnresponsiveAfter = 1\n")
    c = cli()
    c.run("sessions", "new")
    c.run("prompt", "echo one")
    before = c.status()
    signal_descendant(before["ownerPid"], signal.SIGSTOP)
    after = _fenced_and_replaced(c, before)
    assert after["globalCounters"].get("owner_takeover_total") == 1


def test_an_owner_stopped_inside_a_write_is_fenced_and_the_host_writes_again(
    cli: Callable[..., Cli], tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worst stop: inside one of the owner's writes, so it holds the state database's
    write lock and every writer on the host waits for it. Reads go on (status answers from
    the registry, naming it unresponsive), and the next caller of its session fences it
    once it has been silent ownerUnresponsiveAfter -- which releases the lock -- and a new
    owner serves the prompt. Nothing is left of the old owner's run."""
    monkeypatch.setenv("TETHER_LEASE_HEARTBEAT_S", "0.05")  # frequent writes to land in
    (tether_home / "config.toml").write_text("ownerUnresponsiveAfter = 1\n")
    c = cli()
    c.run("sessions", "new")
    c.run("prompt", "echo one")
    before = c.status()
    stop_inside_a_write(before["ownerPid"])
    status = c.status()
    assert status["status"] == "unresponsive", status
    _fenced_and_replaced(c, before)


def _fenced_and_replaced(c: Cli, before: dict[str, Any]) -> dict[str, Any]:
    """The next prompt fenced the silent owner (one takeover, naming it), its agent tree
    ended, and a new generation served the prompt; the new status."""
    out = c.run("prompt", "echo two").stdout
    assert "two" in out
    after = c.status()
    assert after["ownerGeneration"] == before["ownerGeneration"] + 1
    assert not alive(before["ownerPid"])
    wait_for(lambda: not alive(before["agentPid"]), "the old agent tree to end")
    takeovers = c.history("owner_takeover")
    assert [t["payload"]["ownerPid"] for t in takeovers] == [before["ownerPid"]]
    return after


def test_issue9_item5_a_busy_owner_is_never_fenced(
    cli: Callable[..., Cli], tether_home: Path
) -> None:
    """A turn longer than ownerUnresponsiveAfter does not get its owner replaced."""
    (tether_home / "config.toml").write_text("ownerUnresponsiveAfter = 1\n")
    c = cli()
    c.run("sessions", "new")
    caller = c.popen("prompt", "sleep 3000 ; echo done")
    active = c.wait_active()
    assert "second" in c.run("prompt", "echo second").stdout  # queued behind the turn
    rc, out, _ = finish(caller)
    assert rc == 0
    assert "done" in out
    assert c.status()["ownerPid"] == active["ownerPid"]
    assert c.history("owner_takeover") == []


def test_closing_after_the_owner_was_killed_clears_its_stale_record(mock: Cli) -> None:
    """The owner SIGKILLed leaves its pid and "idle" in the session's row; an offline
    close (which holds the session's lock, so no owner runs) must not keep showing them."""
    mock.run("prompt", "echo hi")
    before = mock.status()
    signal_descendant(before["ownerPid"], signal.SIGKILL)
    wait_for(lambda: not alive(before["ownerPid"]), "the owner to die")
    wait_for(lambda: not alive(before["agentPid"]), "the agent tree to end")
    closed = mock.json("sessions", "close")
    assert closed["survivors"] == []
    listed = mock.json("sessions", "list", "--all")["sessions"]
    assert [(s["state"], s["ownerPid"], s["ownerStatus"]) for s in listed] == [
        ("closed", None, "stopped")
    ]


# --- files removed from under a live owner ------------------------------------------


def test_an_owner_whose_socket_was_removed_puts_it_back(mock: Cli) -> None:
    """A cleared `run/` (or a tmp cleaner) removes a live owner's socket: it binds it
    again (it still holds the lock), the next prompt reaches it, and `close` ends it
    through it -- never "closed, no owner was running" with the owner and its agent
    left running."""
    from tether import sessions

    mock.run("prompt", "echo one")
    before = mock.status()
    socket_path = Path(sessions.socket_path(before["sessionKey"]))
    socket_path.unlink()
    assert "two" in mock.run("prompt", "echo two").stdout
    after = mock.status()
    assert (after["ownerPid"], after["agentPid"]) == (before["ownerPid"], before["agentPid"])
    socket_path.unlink()
    closed = json.loads(mock.run("sessions", "close", fmt="json").stdout.strip().splitlines()[-1])
    assert "no owner was running" not in json.dumps(closed), closed
    assert not alive(before["ownerPid"])
    wait_for(lambda: not alive(before["agentPid"]), "the agent tree to end")


def test_an_old_owner_leaving_removes_only_its_own_socket(
    cli: Callable[..., Cli], tether_home: Path
) -> None:
    """TETHER_HOME removed under a live owner, and the same session started again at
    once: the old owner stops (its state lost) and on its way out removes its socket --
    only its own, not the new owner's at the same path, which stays reachable and is
    closed through its socket."""
    import shutil

    from tether import sessions

    c = cli()
    c.run("sessions", "new")
    old = c.status()
    old_socket = Path(sessions.socket_path(old["sessionKey"]))
    # Stopped meanwhile, so that it notices only once the new owner listens.
    signal_descendant(old["ownerPid"], signal.SIGSTOP)
    try:
        shutil.rmtree(tether_home)
        # The sockets live in the home when its path is short; this one's is long.
        old_socket.unlink(missing_ok=True)
        tether_home.mkdir()
        c.run("sessions", "new")
        new = c.status()
    finally:
        signal_descendant(old["ownerPid"], signal.SIGCONT)
    assert new["ownerPid"] != old["ownerPid"]
    wait_for(lambda: not alive(old["ownerPid"]), "the old owner to stop")
    assert "two" in c.run("prompt", "echo two").stdout
    assert c.status()["ownerPid"] == new["ownerPid"]
    c.run("sessions", "close")
    assert not alive(new["ownerPid"])
    wait_for(lambda: not alive(old["agentPid"]), "the old agent tree to end")


def _remove_run_dir(tether_home: Path, socket: Path) -> None:
    """`rm -rf TETHER_HOME/run` (its locks, its sockets when the home's path is short;
    this one's is long, so its socket goes too)."""
    import shutil

    shutil.rmtree(tether_home / "run")
    socket.unlink(missing_ok=True)


def test_an_owner_whose_lock_file_was_removed_takes_it_again(mock: Cli, tether_home: Path) -> None:
    """`run/` cleared under a live owner: it takes its lock file again and binds its
    socket again, so the next caller reaches it -- not a second owner of the session
    beside it, with a second agent and the same journal."""
    from tether import sessions

    mock.run("prompt", "echo one")
    before = mock.status()
    key = before["sessionKey"]
    lock, socket = Path(sessions.lock_path(key)), Path(sessions.socket_path(key))
    _remove_run_dir(tether_home, socket)
    wait_for(lambda: lock.exists() and socket.exists(), "the owner to take its files back")
    assert "two" in mock.run("prompt", "echo two").stdout
    after = mock.status()
    assert (after["ownerPid"], after["agentPid"]) == (before["ownerPid"], before["agentPid"])
    mock.run("sessions", "close")
    assert not alive(before["ownerPid"])
    assert sessions.try_lock(key) is not None  # nobody holds the session's lock


def test_an_owner_superseded_while_its_lock_file_was_gone_stops(
    mock: Cli, tether_home: Path
) -> None:
    """The owner was stopped while `run/` was cleared, and a caller started a second
    owner meanwhile: once it continues, the first finds its lock file taken and stops
    (`lock-lost`), ending its agent by proof; the second serves on alone."""
    from tether import sessions

    mock.run("prompt", "echo one")
    first = mock.status()
    key = first["sessionKey"]
    stop_outside_writes(first["ownerPid"])
    try:
        _remove_run_dir(tether_home, Path(sessions.socket_path(key)))
        assert "two" in mock.run("prompt", "echo two").stdout
        second = mock.status()
    finally:
        signal_descendant(first["ownerPid"], signal.SIGCONT)
    assert second["ownerPid"] != first["ownerPid"]
    wait_for(lambda: not alive(first["ownerPid"]), "the superseded owner to stop")
    wait_for(lambda: not alive(first["agentPid"]), "its agent tree to end")
    assert "three" in mock.run("prompt", "echo three").stdout
    assert mock.status()["ownerPid"] == second["ownerPid"]
    # It said why where every party may write, and left the journal -- the second
    # owner's now -- alone: read whole, its seqs in order, nothing of the first's after.
    from tether.state.registry import Registry

    with Registry() as reg:
        superseded = [e["payload"] for e in reg.events(key, kind="owner_superseded")]
    assert [(p["ownerPid"], p["reason"]) for p in superseded] == [(first["ownerPid"], "lock-lost")]
    seqs = [e["seq"] for e in mock.journal()]
    assert seqs == sorted(set(seqs)), seqs
    assert "three" in mock.run("sessions", "history").stdout
