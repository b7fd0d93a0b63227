"""The owner lifecycle: its transition table, first-reason-wins stops, idle TTL and max lifetime."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import InvalidTransition
from tether.owner.lifecycle import LEGAL, OwnerInput, OwnerLifecycle, OwnerState, StopReason

S = OwnerState
I = OwnerInput  # noqa: E741 -- mirrors the table's own shorthand


@dataclass(frozen=True)
class Snap:
    state: OwnerState
    idle_since: float | None
    stop_reason: str | None
    stopping: bool


def snap(lc: OwnerLifecycle) -> Snap:
    return Snap(lc.state, lc.idle_since, lc.stop_reason, lc.is_stopping)


def test_walkthrough_serve_then_idle_ttl() -> None:
    """An owner starts, runs a job, idles, and retires after its idle TTL: every step's state."""
    lc = OwnerLifecycle(now=0.0, idle_ttl=10.0)
    assert snap(lc) == Snap(S.STARTING, None, None, False)
    assert lc.retirement(100.0, busy=False, held=False) is None  # not serving yet
    lc.feed(I.STARTED, 1.0)
    assert snap(lc) == Snap(S.IDLE, 1.0, None, False)
    assert lc.next_check() == 11.0
    lc.feed(I.JOB_STARTED, 2.0)
    assert snap(lc) == Snap(S.RUNNING, None, None, False)
    assert lc.next_check() is None
    assert lc.retirement(50.0, busy=False, held=False) is None  # a turn is never cut
    lc.feed(I.JOB_ENDED, 5.0)
    assert snap(lc) == Snap(S.IDLE, 5.0, None, False)
    assert lc.next_check() == 15.0
    assert lc.retirement(14.9, busy=False, held=False) is None
    assert lc.retirement(15.0, busy=False, held=False) == "idle-ttl"
    assert lc.request_stop(StopReason.IDLE_TTL, 15.0) is True
    assert snap(lc) == Snap(S.STOPPING, None, "idle-ttl", True)
    lc.feed(I.STOPPED, 16.0)
    assert snap(lc) == Snap(S.STOPPED, None, "idle-ttl", True)


def test_idle_ttl_waits_for_a_held_owner_and_queued_work() -> None:
    """A connected caller or a waiting request keeps the idle TTL from retiring the owner."""
    lc = OwnerLifecycle(now=0.0, idle_ttl=1.0)
    lc.feed(I.STARTED, 0.0)
    assert lc.retirement(5.0, busy=False, held=True) is None
    assert lc.retirement(5.0, busy=True, held=False) is None
    assert lc.retirement(5.0, busy=False, held=False) == "idle-ttl"


def test_max_lifetime_retires_at_the_next_idle_moment_even_when_held() -> None:
    """Max lifetime never cuts a job, but retires the owner once idle, held or not."""
    lc = OwnerLifecycle(now=0.0, max_lifetime=30.0)
    lc.feed(I.STARTED, 0.0)
    assert lc.next_check() == 30.0
    lc.feed(I.JOB_STARTED, 1.0)
    assert lc.retirement(40.0, busy=False, held=True) is None
    lc.feed(I.JOB_ENDED, 41.0)
    assert lc.next_check() == 30.0  # already due: the shell checks at once
    assert lc.retirement(41.0, busy=False, held=True) == "max-lifetime"


def test_zero_disables_both_limits() -> None:
    """ttl 0 and max lifetime 0 mean forever."""
    lc = OwnerLifecycle(now=0.0, idle_ttl=0.0, max_lifetime=0.0)
    lc.feed(I.STARTED, 0.0)
    assert lc.next_check() is None
    assert lc.retirement(1e9, busy=False, held=False) is None


def test_first_stop_reason_wins_and_a_running_job_still_ends() -> None:
    """close racing the TTL reports the first; the job running at the stop still ends."""
    lc = OwnerLifecycle(now=0.0, idle_ttl=1.0)
    lc.feed(I.STARTED, 0.0)
    lc.feed(I.JOB_STARTED, 0.0)
    assert lc.request_stop(StopReason.CLOSE, 1.0) is True
    assert lc.request_stop(StopReason.IDLE_TTL, 2.0) is False
    lc.feed(I.JOB_ENDED, 3.0)
    assert snap(lc) == Snap(S.STOPPING, None, "close", True)
    assert lc.retirement(100.0, busy=False, held=False) is None


def test_a_miss_raises_and_leaves_the_owner_stopped() -> None:
    """No job starts while stopping: the table has no such key, and the machine ends STOPPED."""
    lc = OwnerLifecycle(now=0.0)
    lc.feed(I.STARTED, 0.0)
    lc.request_stop(StopReason.SIGTERM, 0.0)
    with pytest.raises(InvalidTransition) as info:
        lc.feed(I.JOB_STARTED, 1.0)
    assert info.value.fields == {"machine": "owner", "state": "STOPPING", "input": "JOB_STARTED"}
    assert snap(lc) == Snap(S.STOPPED, None, "signal-SIGTERM", True)


@given(st.sampled_from(OwnerState), st.sampled_from(OwnerInput))
def test_every_state_input_pair_is_legal_or_a_typed_error(
    state: OwnerState, event: OwnerInput
) -> None:
    """Any (state, input): the table's target, or InvalidTransition and STOPPED."""
    lc = OwnerLifecycle(now=0.0, idle_ttl=5.0)
    lc.state = state
    if (state, event) in LEGAL:
        new = lc.feed(event, 1.0)
        assert new is lc.state
        assert (lc.idle_since == 1.0) == (new is S.IDLE)
    else:
        with pytest.raises(InvalidTransition):
            lc.feed(event, 1.0)
        assert lc.state is S.STOPPED
        assert lc.is_stopping


def test_stopped_is_terminal() -> None:
    """Nothing leaves STOPPED."""
    assert not [pair for pair in LEGAL if pair[0] is S.STOPPED]


def test_stop_reasons_are_the_words_on_the_wire() -> None:
    """StopReason is a str enum whose values are the words the journal and logs carried."""
    assert {r.value for r in StopReason} == {
        "close",
        "terminate",
        "idle-ttl",
        "max-lifetime",
        "state-lost",
        "lock-lost",
        "fatal-error",
        "signal-SIGTERM",
        "signal-SIGINT",
        "signal-SIGHUP",
    }
    assert f"({StopReason.IDLE_TTL})" == "(idle-ttl)"
    assert [r for r in StopReason if r.ends_session] == [StopReason.CLOSE, StopReason.TERMINATE]
    assert [r for r in StopReason if r.is_retirement] == [
        StopReason.IDLE_TTL,
        StopReason.MAX_LIFETIME,
    ]
