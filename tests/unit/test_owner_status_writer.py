"""The owner's status writer: status and kept metrics written from a thread, together."""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

import pytest

from tether import metrics
from tether.errors import StateFull
from tether.owner.heartbeat import Heartbeat
from tether.state.registry import Registry


def _session(reg: Registry) -> str:
    reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")
    return "k"


def test_kept_metrics_are_taken_once_and_given_back_first() -> None:
    kept = metrics.Deferred()
    kept.incr("cancel_total", outcome="success")
    kept.observe("prompt_turn_seconds", 0.2, metrics.BUCKETS)
    ops = kept.take()
    assert [op[0] for op in ops] == ["incr", "observe"]
    assert kept.take() == []
    kept.incr("owner_spawn_total")
    kept.give_back(ops)
    assert [op[1] for op in kept.take()] == [
        "cancel_total",
        "prompt_turn_seconds",
        "owner_spawn_total",
    ]


def test_a_status_write_carries_the_kept_metrics() -> None:
    kept = metrics.Deferred()
    kept.incr("cancel_total", outcome="success")
    kept.incr("cancel_total", outcome="success")
    kept.observe("prompt_turn_seconds", 0.03, metrics.BUCKETS)
    with Registry() as reg:
        key = _session(reg)
        reg.update_session(key, metric_ops=kept.take(), owner_status="idle")
        assert reg.counters()["cancel_total{outcome=success}"] == 2
        (hist,) = [h for h in reg.histograms() if h[0] == "prompt_turn_seconds"]
        assert hist[2] == 1
        session = reg.session(key)
        assert session is not None
        assert session.owner_status == "idle"


def test_the_writer_thread_records_each_change_and_stops_for_good() -> None:
    state: dict[str, Any] = {"owner_status": "idle", "queue_depth": 0}
    kept = metrics.Deferred()
    with Registry() as reg:
        key = _session(reg)
    beat = Heartbeat(key, unresponsive_after=300.0, fields=lambda: dict(state), kept=kept)
    beat.start()
    try:

        def row() -> Any:
            with Registry() as reg:
                return reg.session(key)

        def wait_for(check: Any) -> None:
            deadline = time.monotonic() + 10
            while not check():
                assert time.monotonic() < deadline, "the writer did not write"
                time.sleep(0.01)

        state.update(owner_status="running", queue_depth=1)
        kept.incr("owner_spawn_total")
        beat.changed()  # the interval is 5 s: only the poke can make this quick
        wait_for(lambda: row().owner_status == "running")
        assert row().queue_depth == 1
        with Registry() as reg:
            wait_for(lambda: reg.counters().get("owner_spawn_total") == 1)
    finally:
        beat.stop()
    state["owner_status"] = "after-stop"
    beat.changed()
    time.sleep(0.1)
    assert row().owner_status == "running"  # nothing lands after stop


def test_the_beat_needs_no_database_write_and_callers_see_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 21 item 2: on a full disk the row's beat cannot be written; the owner still
    beats (its lock file's mtime, which needs no space) and a caller judging its silence
    sees a live owner, never one it may fence."""
    from tether import owner_fence, paths, sessions

    with Registry() as reg:
        key = _session(reg)
        reg.update_session(key, owner_pid=4242, owner_heartbeat_at=time.time() - 3600)
    os.makedirs(paths.run_dir(), exist_ok=True)
    lock = sessions.lock_path(key)
    with open(lock, "a"):
        pass
    os.utime(lock, (time.time() - 3600, time.time() - 3600))

    def full(*_: Any, **__: Any) -> None:
        raise StateFull("database or disk is full")

    monkeypatch.setattr(Registry, "update_session", full)
    beat = Heartbeat(key, unresponsive_after=0.3, fields=dict)
    beat.start()
    try:
        for _ in range(200):  # bounded: a beat every 0.1 s
            if time.time() - os.stat(lock).st_mtime < 60:
                break
            time.sleep(0.02)
    finally:
        beat.stop()
    info = owner_fence.owner_silence(key)
    assert info is not None
    assert info["heartbeatAgeS"] < 60, info  # the row says an hour; the owner is alive
    assert not owner_fence.fence_if_silent(key)


def test_the_member_scan_keeps_the_beat_s_cadence_not_each_poke() -> None:
    """A poke (a status change, several per turn) writes the row at once, but the member
    scan (a /proc walk of the agent's tree) comes at most once per beat interval -- and
    at least that often, however often the owner is poked (README: "at its heartbeat")."""
    with Registry() as reg:
        key = _session(reg)
    scans: list[float] = []
    status = {"owner_status": "idle"}
    beat = Heartbeat(
        key,
        unresponsive_after=0.9,  # a beat interval of 0.3 s
        fields=lambda: dict(status),
        scan=lambda _reg: scans.append(time.monotonic()),
    )
    assert beat.interval == pytest.approx(0.3)
    beat.start()
    started = time.monotonic()
    try:
        for i in range(60):  # 1.2 s of pokes every 20 ms: more often than the interval
            status["owner_status"] = f"s{i}"
            beat.changed()
            time.sleep(0.02)
    finally:
        beat.stop()
    elapsed = time.monotonic() - started
    with Registry() as reg:
        row = reg.session(key)
    assert row is not None
    assert row.owner_status.startswith("s")  # the pokes were written
    assert len(scans) >= 2, scans  # the cadence holds under constant pokes
    assert len(scans) <= elapsed / 0.3 + 1, (len(scans), elapsed)
    gaps = [b - a for a, b in itertools.pairwise(scans)]
    assert all(g >= 0.29 for g in gaps), gaps
