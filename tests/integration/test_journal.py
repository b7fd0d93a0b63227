"""The session journal end to end: real owners, real watchers, the mock agent.

Watchers are ``tether sessions watch`` subprocesses or raw IPC sockets; the journal is
read back with ``sessions export``. Every session is closed at the end (the ``cli``
fixture), so nothing outlives a test.
"""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from tests.integration.test_owner import (
    Cli,
    Raw,
    alive,
    finish,
    signal_descendant,
    wait_for,
)

pytestmark = pytest.mark.integration

Entry = dict[str, Any]


def entries_of(out: str) -> list[Entry]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def watcher(c: Cli, *args: str) -> subprocess.Popen[str]:
    return c.popen("sessions", "watch", *args, fmt="json")


def assert_gapless(entries: list[Entry], first: int) -> None:
    assert [e["seq"] for e in entries] == list(range(first, first + len(entries)))


def test_two_watchers_and_the_prompter_see_the_same_turn(mock: Cli) -> None:
    """A 10,000-chunk turn reaches both watchers and the prompter, in the same order."""
    watchers = [watcher(mock), watcher(mock, "--tail", "0")]
    wait_for(lambda: mock.status()["watchers"] == 2, "both watchers to attach")
    prompt = mock.run("prompt", "stream 10000 x", fmt="json")
    relayed = [f for f in entries_of(prompt.stdout) if "jsonrpc" in f]
    mock.run("sessions", "close")
    seen = []
    for proc in watchers:
        rc, out, err = finish(proc)
        assert rc == 0, err
        seen.append(entries_of(out))
    assert seen[0] == seen[1]
    entries = seen[0]
    assert_gapless(entries, entries[0]["seq"])
    assert entries[-1]["kind"] == "session_ended"
    rid = next(e["requestId"] for e in entries if e["kind"] == "prompt_queued")
    turn = [e["frame"] for e in entries if e["kind"] == "acp" and e.get("requestId") == rid]
    assert turn == relayed
    chunks = [
        f
        for f in turn
        if f.get("method") == "session/update"
        and f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    ]
    assert len(chunks) == 10_000
    kinds = [e["kind"] for e in entries if e["kind"] != "acp"]
    assert kinds[:2] == ["prompt_queued", "turn_started"]
    assert "turn_ended" in kinds


def test_a_watcher_resumes_after_its_last_seq_with_no_gap_or_duplicate(mock: Cli) -> None:
    mock.run("prompt", "stream 50 a")
    stored = entries_of(mock.run("sessions", "export").stdout)
    k = stored[len(stored) // 2]["seq"]
    first = entries_of(
        mock.run("sessions", "watch", "--tail", str(len(stored)), "--no-follow", fmt="json").stdout
    )
    assert first == stored
    upto_k = [e for e in first if e["seq"] <= k]  # it was disconnected after seq k
    resumed = watcher(mock, "--from", str(k + 1))
    wait_for(lambda: mock.status()["watchers"] == 1, "the watcher to attach")
    mock.run("prompt", "stream 20 b")
    mock.run("sessions", "close")
    rc, out, err = finish(resumed)
    assert rc == 0, err
    whole = upto_k + entries_of(out)
    assert_gapless(whole, stored[0]["seq"])
    assert whole[: len(stored)] == stored
    assert whole[-1]["kind"] == "session_ended"


def test_a_watcher_that_never_reads_is_dropped_and_the_turn_finishes(mock: Cli) -> None:
    """Its bounded buffer fills: a terminal `lagged` with its last seq; the turn is unhurt."""
    status = mock.status()
    owner = status["ownerPid"]
    with Raw(status["sessionKey"]) as raw:
        raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.request("w-1", "watch", {"follow": True})
        wait_for(lambda: mock.status()["watchers"] == 1, "the raw watcher to attach")
        caller = mock.popen(
            "prompt", "stream 100000 xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", fmt="quiet"
        )
        # Dropped once its unsent bytes pass the bound -- while the turn still streams.
        wait_for(lambda: mock.status()["watchers"] == 0, "the watcher to be dropped", 60)
        frames = []  # read now: a dropped peer that still does not read is cut off later
        while (frame := raw.read()) is not None:
            frames.append(frame)
        rc, out, err = finish(caller)
        assert rc == 0, err
        assert out.count("\n") == 100_000
        rss_kib = _rss_kib(owner)
    assert frames[0]["type"] == "ack"
    assert frames[-1]["type"] == "lagged"
    seqs = [f["entry"]["seq"] for f in frames if f["type"] == "entry"]
    assert seqs
    assert frames[-1]["lastSeq"] == seqs[-1]
    assert seqs == list(range(seqs[0], seqs[-1] + 1))
    # The owner held at most the bound (8 MiB) for it, not the turn's ~10 MB of entries.
    assert rss_kib < 120 * 1024


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_owner_sigkill_mid_stream_the_journal_survives_and_continues(
    mock: Cli, tether_home: Any
) -> None:
    follower = watcher(mock, "--from", "1")
    wait_for(lambda: mock.status()["watchers"] == 1, "the follower to attach")
    caller = mock.popen("prompt", "stream 3000 x ; sleep 30000", fmt="quiet")
    active = mock.wait_active()
    wait_for(
        lambda: len(entries_of(mock.run("sessions", "export").stdout)) > 3000,
        "the stream to be stored",
    )
    signal_descendant(active["ownerPid"], signal.SIGKILL)
    finish(caller)
    wait_for(lambda: not alive(active["agentPid"]), "the agent tree to end")
    db = sqlite3.connect(tether_home / "state.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    before = entries_of(mock.run("sessions", "export").stdout)
    assert "after" in mock.run("prompt", "echo after").stdout  # a new owner
    mock.run("sessions", "close")
    after = entries_of(mock.run("sessions", "export").stdout)
    assert after[: len(before)] == before
    new = after[len(before) :]
    # Never a reused seq (a crash leaves a gap), and the first entry after it says so:
    # written by the first reader that proved the owner dead (the export, which took
    # the free session lock), with the killed turn's end.
    (gap,) = [e for e in before if e["kind"] == "journal_gap"]
    hole = before.index(gap)
    assert (gap["after"], gap["reason"]) == (before[hole - 1]["seq"], "owner-lost")
    assert gap["seq"] > gap["after"] + 1
    assert before[hole + 1]["kind"] == "turn_ended"
    assert before[hole + 1]["stopReason"] == "owner-lost"  # the killed turn, corrected
    assert new[0]["kind"] == "owner_started"
    assert_gapless(before[hole:] + new, gap["seq"])
    rc, out, err = finish(follower)
    assert rc == 0, err
    seen = entries_of(out)
    assert [e["seq"] for e in seen] == sorted({e["seq"] for e in seen})  # no duplicate
    assert seen[-1]["kind"] == "session_ended"
    assert {e["seq"] for e in after} <= {e["seq"] for e in seen}


def test_a_follower_goes_on_across_owner_retirement(cli: Callable[..., Cli]) -> None:
    c = cli()
    c.run("--ttl", "0.5", "sessions", "new")
    follower = watcher(c, "--from", "1")
    c.run("prompt", "echo one")
    wait_for(lambda: c.status()["ownerPid"] is None, "the owner to retire")
    c.run("prompt", "echo two")  # a fresh owner
    c.run("sessions", "close")
    rc, out, err = finish(follower)
    assert rc == 0, err
    seen = entries_of(out)
    assert_gapless(seen, 1)
    kinds = [e["kind"] for e in seen]
    assert kinds.count("owner_started") == 2
    assert "owner_stopped" in kinds
    assert kinds[-1] == "session_ended"
    assert seen == entries_of(c.run("sessions", "export").stdout)


def test_reading_commands_start_no_owner(cli: Callable[..., Cli]) -> None:
    c = cli()
    c.run("--ttl", "0.3", "sessions", "new")
    c.run("prompt", "echo hello there")
    wait_for(lambda: c.status()["ownerPid"] is None, "the owner to retire")
    history = c.json("sessions", "history")["turns"]
    assert [t["preview"] for t in history] == ["echo hello there"]
    assert history[0]["by"]["client"] == "cli"
    text = c.run("sessions", "read").stdout
    assert "> echo hello there" in text
    assert "hello there\n[done] end_turn" in text
    transcript = c.json("sessions", "read")["turns"]
    assert transcript[0]["text"] == "hello there"
    watched = c.run("sessions", "watch", "--from", "1", "--no-follow").stdout
    assert "[done] end_turn" in watched
    assert c.status()["ownerPid"] is None


def test_prune_and_retention(cli: Callable[..., Cli], tether_home: Any) -> None:
    (tether_home / "config.toml").write_text("journalMaxEntries = 50\n")
    c = cli()
    c.run("sessions", "new")
    c.run("prompt", "stream 200 x")
    c.run("sessions", "close")  # retention runs as the writer goes, and at its end
    entries = entries_of(c.run("sessions", "export").stdout)
    assert len(entries) <= 60
    assert entries[-1]["kind"] == "session_ended"
    locks = list((tether_home / "run").glob("*.lock"))
    assert locks  # one per session key ever used ...
    pruned = c.json("sessions", "prune", "--closed")
    assert pruned["sessionsRemoved"]
    assert not any(p.exists() for p in locks)  # ... removed with its session's records
    assert c.run("sessions", "export", rc=4).returncode == 4
    assert c.run("sessions", "prune", rc=2).returncode == 2
    assert c.run("sessions", "prune", "--older-than", "soon", rc=2).returncode == 2


def test_a_prompter_that_reads_slowly_gets_its_whole_turn_from_the_journal(mock: Cli) -> None:
    """Its stdout is not read until the turn is over: the owner drops it (`lagged`), and
    the CLI finishes the turn from the journal -- every chunk once, in order."""
    caller = mock.popen("prompt", "stream 200000 x", fmt="quiet")
    wait_for(lambda: mock.history("turn"), "the turn to end in the owner", timeout=60)
    rc, out, err = finish(caller)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines == [f"x {i}" for i in range(200_000)]


def test_export_to_a_closed_pipe_ends_quietly(mock: Cli) -> None:
    """`sessions export | head -1`: exit 141 with nothing on stderr, like the other commands."""
    mock.run("prompt", "stream 2000 x")
    proc = subprocess.Popen(
        mock.argv("sessions", "export"),
        env=mock.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(b'{"seq":1,')
    proc.stdout.close()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 141
    assert err == b""


def test_issue21_item7_prune_is_scoped_to_the_agent_named(
    cli: Callable[..., Cli], tether_home: Any
) -> None:
    """`tether mock sessions prune --closed` removes mock's closed sessions only;
    `--dry-run` says what would go and removes nothing; every agent's is `--all-agents`."""
    import sys

    mock, other = cli(), cli(["--agent", f"{sys.executable} -m tether.testing.mock_agent"])
    keys = []
    for c in (mock, other):
        keys.append(c.json("sessions", "new")["sessionKey"])
        c.run("prompt", "echo hi")
        c.run("sessions", "close")
    dry = mock.json("sessions", "prune", "--closed", "--dry-run")
    assert (dry["sessionsRemoved"], dry["dryRun"]) == ([keys[0]], True)
    assert entries_of(mock.run("sessions", "export").stdout)  # nothing went
    pruned = mock.json("sessions", "prune", "--closed")
    assert pruned["sessionsRemoved"] == [keys[0]]
    assert mock.run("sessions", "export", rc=4).returncode == 4
    assert entries_of(other.run("sessions", "export").stdout)  # the other agent's stays
    assert mock.run("sessions", "prune", "--closed", "--all-agents", rc=2).returncode == 2
    every = cli()
    every.agent = []  # `tether sessions prune --closed --all-agents`: no agent named
    assert every.json("sessions", "prune", "--closed", "--all-agents")["sessionsRemoved"] == [
        keys[1]
    ]
    assert other.run("sessions", "export", rc=4).returncode == 4
