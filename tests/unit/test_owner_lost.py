"""What a lost owner left open, read from the journal's control records (no I/O)."""

from __future__ import annotations

from tether.owner_lost import unfinished


def test_only_the_last_owners_open_turns_and_runs_count() -> None:
    """Issue 21 item 5: a turn started and not ended, a prompt queued and never run, and
    a run started and not ended are the lost owner's; an earlier owner's are not."""
    rows = [
        (1, "owner_started", None, "{}"),
        (2, "prompt_queued", "r-old", "{}"),  # an earlier owner's: not ours to judge
        (3, "agent_run_started", None, '{"leaseId":"L0"}'),
        (10, "owner_started", None, "{}"),
        (11, "prompt_queued", "r-1", "{}"),
        (12, "turn_started", "r-1", "{}"),
        (13, "turn_ended", "r-1", '{"stopReason":"end_turn"}'),
        (14, "agent_run_started", None, '{"leaseId":"L1"}'),
        (15, "agent_run_ended", None, '{"leaseId":"L1"}'),
        (16, "agent_run_started", None, '{"leaseId":"L2"}'),
        (17, "prompt_queued", "r-2", "{}"),
        (18, "turn_started", "r-2", "{}"),
        (19, "prompt_queued", "r-3", "{}"),
    ]
    turns, runs = unfinished(rows)
    assert turns == {"r-2": True, "r-3": False}
    assert list(runs) == ["L2"]
    assert unfinished(rows[:4]) == ({}, {})
