"""Issue 21 items 2, 3 and 5, tried for real: a full disk under a streaming turn, and an
owner SIGKILLed mid-stream. Nothing hangs, the journal says where it has holes and why,
and a killed owner's records are corrected."""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_journal import entries_of, watcher
from tests.integration.test_owner import Cli, alive, finish, signal_descendant, wait_for
from tests.integration.test_state_faults import _fill, tmpfs

pytestmark = pytest.mark.integration

Entry = dict[str, Any]


@pytest.fixture
def disk_2m(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for this test (root only; skipped with the reason otherwise)."""
    with tmpfs(tmp_path, "2m") as mnt:
        yield mnt


def assert_holes_explained(entries: list[Entry]) -> None:
    """Seqs increase; where one jumps, the entry there is a journal_gap naming the seq
    before it (issue 21 item 3): a reader can tell a crash or a loss from a bug."""
    seqs = [e["seq"] for e in entries]
    assert seqs == sorted(set(seqs)), "out of order or duplicated"
    for before, entry in itertools.pairwise(entries):
        if entry["seq"] != before["seq"] + 1:
            assert entry["kind"] == "journal_gap", (before, entry)
            assert entry["after"] == before["seq"], (before, entry)


def test_a_full_disk_is_stated_never_a_hang_and_what_was_lost_is_journaled(
    project_dir: Path, disk_2m: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With TETHER_HOME on a full 2 MiB tmpfs, a streaming turn goes on: `status` answers
    (never `unresponsive`, the state callers may fence) and says STATE_FULL, the turn is
    told STATE_FULL, and once space returns the journal records the entries it lost."""
    monkeypatch.setenv("TETHER_HOME", str(disk_2m / "home"))
    c = Cli(project_dir)
    c.run("sessions", "new")
    try:
        c.run("prompt", "echo warm")
        filler = _fill(disk_2m)
        try:
            prompt = c.popen("prompt", "stream 20000 " + "padding " * 8, fmt="json")
            snapshot: dict[str, Any] = {}
            for _ in range(400):  # bounded: the first status after the writer's first try
                snapshot = c.status()
                assert snapshot["status"] != "unresponsive", snapshot
                if snapshot.get("stateError"):
                    break
                time.sleep(0.05)
            assert snapshot["stateError"]["code"] == "STATE_FULL", snapshot
            rc, out, err = finish(prompt)
            assert rc == 0, err
            told = [e for e in entries_of(out) if e.get("action") == "state_error"]
            assert told, out[-2000:]
            assert told[0]["code"] == "STATE_FULL"
        finally:
            filler.unlink()
        ended = wait_for(
            lambda: [e for e in c.journal() if e["kind"] == "turn_ended"][1:],
            "the turn's end to be stored once space returned",
        )
        assert ended[0]["stopReason"] == "end_turn"
        entries = c.journal()
        assert_holes_explained(entries)
        gaps = [e for e in entries if e["kind"] == "journal_gap"]
        assert gaps, "entries were dropped, and the journal must say so"
        assert {(g["reason"], g["cause"]) for g in gaps} == {("entries-dropped", "STATE_FULL")}
        assert c.status()["stateError"] is None  # stated while it lasts, not after
    finally:
        c.close()


PACED_STREAM = " ; ".join(["stream 500 x", "sleep 15"] * 400)


def test_a_killed_owners_records_are_corrected_and_the_hole_is_named(
    mock: Cli, tether_home: Path
) -> None:
    """SIGKILL of the owner mid-stream: `status` says `dead` (not `idle` with an open
    lease), `sessions show` names no live owner, the turn ends `owner-lost`, the run's
    end is journaled, and the first entry after the hole names the seq it continues
    after; `sessions watch` prints it. A new owner corrects nothing twice."""
    # A stream that goes on for seconds at a measured pace (~30,000 entries/s), so the
    # owner dies mid-stream with a journal this test can read back a few times in its
    # time bound (a free-running stream journals ~900,000 entries before the kill lands).
    caller = mock.popen("prompt", PACED_STREAM, fmt="quiet")
    active = mock.wait_active()
    wait_for(lambda: len(mock.journal()) > 1000, "the stream to be stored")
    signal_descendant(active["ownerPid"], signal.SIGKILL)
    finish(caller)
    wait_for(lambda: not alive(active["ownerPid"]), "the owner to die")
    # The first reader that can prove the owner dead (it takes the free session lock)
    # corrects the records: here `sessions history`, before any status.
    turn = mock.json("sessions", "history")["turns"][-1]
    assert (turn["requestId"], turn["stopReason"]) == (active["currentRequest"], "owner-lost")
    stored = [e for e in mock.journal() if e["seq"] < 1 << 20]

    status = mock.status()
    assert status["status"] == "dead", status
    assert status["leaseState"] != "open", status
    show = mock.json("sessions", "show")
    assert (show["ownerPid"], show["ownerStatus"]) == (None, "dead"), show

    entries = mock.journal()
    assert entries[: len(stored)] == stored
    new = entries[len(stored) :]
    assert new[0]["kind"] == "journal_gap", new[0]
    assert (new[0]["after"], new[0]["reason"]) == (stored[-1]["seq"], "owner-lost")
    runs = [e for e in new if e["kind"] == "agent_run_ended"]
    assert [r["leaseId"] for r in runs] == [active["leaseId"]]
    watched = mock.run("sessions", "watch", "--from", str(stored[-1]["seq"]), "--no-follow")
    assert f"continues after seq {stored[-1]['seq']}: owner-lost" in watched.stdout

    assert "again" in mock.run("prompt", "echo again").stdout  # a new owner
    assert mock.status()["status"] == "idle"
    after = mock.journal()
    assert_holes_explained(after)
    kinds = [e["kind"] for e in after]
    assert kinds.count("agent_run_ended") == 1  # the lost run's end, once
    assert [e["stopReason"] for e in after if e["kind"] == "turn_ended"] == [
        "owner-lost",
        "end_turn",
    ]


def test_a_replay_across_the_hole_is_in_order_with_no_duplicate(mock: Cli) -> None:
    """A watcher that saw the killed owner's entries live and one that replays from the
    start see the same journal across the hole: in seq order, none twice, the gap
    record included (issue 21 item 3)."""
    live = watcher(mock, "--from", "1")
    wait_for(lambda: mock.status()["watchers"] == 1, "the watcher to attach")
    caller = mock.popen("prompt", "stream 3000 x ; sleep 30000", fmt="quiet")
    active = mock.wait_active()
    wait_for(lambda: len(mock.journal()) > 3000, "the stream to be stored")
    signal_descendant(active["ownerPid"], signal.SIGKILL)
    finish(caller)
    assert "after" in mock.run("prompt", "echo after").stdout
    mock.run("sessions", "close")
    rc, out, err = finish(live)
    assert rc == 0, err
    seen = entries_of(out)
    stored = mock.journal()
    assert [e["seq"] for e in seen] == sorted({e["seq"] for e in seen})
    assert {e["seq"] for e in stored} <= {e["seq"] for e in seen}
    assert_holes_explained(stored)
    assert sum(e["kind"] == "journal_gap" for e in stored) == 1
    assert json.dumps(seen[-1]).find("session_ended") > 0


def test_closing_after_a_kill_ends_the_killed_turn_owner_lost(mock: Cli) -> None:
    """An offline close is the journal's writer too: the turn the killed owner was running
    ends `owner-lost` before the session's end, not `running` for ever."""
    caller = mock.popen("prompt", "sleep 30000", fmt="quiet")
    active = mock.wait_active()
    signal_descendant(active["ownerPid"], signal.SIGKILL)
    finish(caller)
    wait_for(lambda: not alive(active["ownerPid"]), "the owner to die")
    mock.run("sessions", "close")
    turn = mock.json("sessions", "history")["turns"][-1]
    assert (turn["requestId"], turn["stopReason"]) == (active["currentRequest"], "owner-lost")
    kinds = [e["kind"] for e in mock.journal()]
    assert kinds[-1] == "session_ended"
    assert kinds.count("agent_run_ended") == 1
