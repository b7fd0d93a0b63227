"""A fleet host's drain: its transition table, the grace, and the readiness verdict."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import InvalidTransition
from tether.fleet.drain_state import (
    LEGAL,
    DrainInput,
    DrainMachine,
    DrainState,
    Readiness,
    readiness,
)

S = DrainState
I = DrainInput  # noqa: E741 -- mirrors the table's own shorthand


@dataclass(frozen=True)
class Snap:
    state: DrainState
    started_at: float | None
    admits: bool
    cut: bool


def snap(m: DrainMachine) -> Snap:
    return Snap(m.state, m.started_at, m.admits, m.cut)


def test_walkthrough_turns_end_within_the_grace() -> None:
    """A drain admits nothing new, waits for the running turn, retires, leaves: every step."""
    m = DrainMachine(grace_s=30.0)
    assert snap(m) == Snap(S.SERVING, None, True, False)
    assert m.waiting(5.0, busy=3) is None  # not draining: nothing to wait for
    assert m.request(10.0) is True
    assert snap(m) == Snap(S.DRAINING, 10.0, False, False)
    assert m.deadline == 40.0
    assert m.waiting(20.0, busy=1) is None  # a turn runs, the grace has not passed
    assert m.waiting(21.0, busy=0) is I.TURNS_ENDED
    m.feed(I.TURNS_ENDED, 21.0)
    assert snap(m) == Snap(S.RETIRING, 10.0, False, False)
    assert m.waiting(22.0, busy=0) is None  # no longer waiting
    m.feed(I.OWNERS_ENDED, 22.0)
    assert snap(m) == Snap(S.LEAVING, 10.0, False, False)
    m.feed(I.LEFT, 23.0)
    assert snap(m) == Snap(S.DRAINED, 10.0, False, False)


def test_the_grace_cuts_turns_still_running() -> None:
    """Past the grace a turn that still runs is cut, and the drain says so."""
    m = DrainMachine(grace_s=2.0)
    m.request(0.0)
    assert m.waiting(1.999, busy=1) is None
    assert m.waiting(2.0, busy=1) is I.GRACE_OVER
    m.feed(I.GRACE_OVER, 2.0)
    assert snap(m) == Snap(S.RETIRING, 0.0, False, True)


def test_a_zero_grace_cuts_at_once_but_an_idle_host_cuts_nothing() -> None:
    """With no grace, running turns are cut at once; with none running nothing is cut."""
    m = DrainMachine(grace_s=0.0)
    m.request(5.0)
    assert m.waiting(5.0, busy=2) is I.GRACE_OVER
    idle = DrainMachine(grace_s=0.0)
    idle.request(5.0)
    assert idle.waiting(5.0, busy=0) is I.TURNS_ENDED


@pytest.mark.parametrize("state", [S.DRAINING, S.RETIRING, S.LEAVING, S.DRAINED])
def test_a_second_drain_request_changes_nothing(state: DrainState) -> None:
    """A second SIGTERM (or --drain) while draining is accepted and ignored."""
    m = DrainMachine()
    m.request(1.0)
    m.state = state
    assert m.request(9.0) is False
    assert (m.state, m.started_at) == (state, 1.0)


def test_a_miss_leaves_the_machine_drained() -> None:
    """An input the table does not have raises and leaves the host not serving."""
    m = DrainMachine()
    with pytest.raises(InvalidTransition) as err:
        m.feed(I.OWNERS_ENDED, 0.0)
    assert err.value.fields["machine"] == "drain"
    assert m.state is S.DRAINED
    assert not m.admits


@given(st.sampled_from(DrainState), st.sampled_from(DrainInput))
def test_every_state_and_input(state: DrainState, event: DrainInput) -> None:
    """Any (state, input): the table's next state, or InvalidTransition and DRAINED."""
    m = DrainMachine()
    m.state = state
    if (state, event) in LEGAL:
        assert m.feed(event, 1.0) in DrainState
        assert m.admits is (m.state is S.SERVING)
    else:
        with pytest.raises(InvalidTransition):
            m.feed(event, 1.0)
        assert m.state is S.DRAINED


def test_nothing_leads_back_to_serving() -> None:
    """Once begun a drain only goes forward: no transition returns to SERVING."""
    for state, event in LEGAL:
        m = DrainMachine()
        m.state = state
        assert m.feed(event, 1.0) is not S.SERVING


@pytest.mark.parametrize(
    ("registered", "reached", "superseded", "draining", "expected"),
    [
        pytest.param(True, True, False, False, Readiness(True, None), id="ready"),
        pytest.param(
            False, False, False, False,
            Readiness(False, "the fleet index was never reached"), id="never-reached",
        ),
        pytest.param(True, True, False, True, Readiness(False, "draining"), id="draining"),
        pytest.param(
            False, True, False, False,
            Readiness(False, "not registered in the fleet index"), id="deregistered",
        ),
        pytest.param(
            True, True, True, False,
            Readiness(False, "superseded in the fleet index (fenced or registered elsewhere)"),
            id="superseded",
        ),
    ],
)  # fmt: skip
def test_readiness(
    registered: bool, reached: bool, superseded: bool, draining: bool, expected: Readiness
) -> None:
    """Ready only while registered, after the index was reached, and not draining."""
    got = readiness(
        registered=registered, index_reached=reached, superseded=superseded, draining=draining
    )
    assert got == expected
