"""The lease state table: legal steps, fail-closed misses and paths between states."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import InvalidTransition
from tether.supervise.lease_state import (
    EDGES,
    LeaseInput,
    LeaseMachine,
    LeaseState,
    check_edge,
    next_state,
    path_to,
)

S = LeaseState


def now_in(m: LeaseMachine) -> LeaseState:
    # A call, so the type checker does not narrow m.state across transitions.
    return m.state


def test_walkthrough_clean_close() -> None:
    """A lease closes through closing, never directly from open."""
    m = LeaseMachine()
    assert now_in(m) is S.OPEN
    assert m.transition(LeaseInput.CLOSE_STARTED) is S.CLOSING
    assert now_in(m) is S.CLOSING
    assert m.transition(LeaseInput.EXTINCTION_PROVEN) is S.CLOSED
    assert now_in(m) is S.CLOSED


def test_walkthrough_lost_then_proven_gone() -> None:
    """An unverifiable lease is lost, and a later sweep that proves it gone closes it."""
    m = LeaseMachine()
    assert m.transition(LeaseInput.UNVERIFIABLE) is S.LOST
    assert now_in(m) is S.LOST
    assert m.transition(LeaseInput.EXTINCTION_PROVEN) is S.CLOSED
    assert now_in(m) is S.CLOSED


def test_walkthrough_gone_before_cleanup_is_lost() -> None:
    """Seed 000: a tree already gone before cleanup reached it is lost, not closed."""
    m = LeaseMachine()
    assert m.transition(LeaseInput.GONE_BEFORE_CLEANUP) is S.LOST
    assert now_in(m) is S.LOST
    m = LeaseMachine(S.CLOSING)
    assert m.transition(LeaseInput.GONE_BEFORE_CLEANUP) is S.LOST


def test_walkthrough_steal_then_reap() -> None:
    """A steal lands in closing from open, closing or lost; closed cannot be stolen."""
    for start in (S.OPEN, S.CLOSING, S.LOST):
        m = LeaseMachine(start)
        assert m.transition(LeaseInput.STOLEN) is S.CLOSING
        assert m.transition(LeaseInput.EXTINCTION_PROVEN) is S.CLOSED
    m = LeaseMachine(S.CLOSED)
    with pytest.raises(InvalidTransition):
        m.transition(LeaseInput.STOLEN)
    assert now_in(m) is S.CLOSED


def test_exactly_the_documented_edges() -> None:
    """The table allows exactly the documented lease steps (steal included)."""
    assert {(a.value, b.value) for a, b in EDGES} == {
        ("open", "closing"),
        ("open", "lost"),
        ("closing", "closing"),
        ("closing", "closed"),
        ("closing", "lost"),
        ("lost", "closing"),
        ("lost", "closed"),
    }
    check_edge(S.LOST, S.CLOSED)
    with pytest.raises(InvalidTransition):
        check_edge(S.OPEN, S.CLOSED)
    with pytest.raises(InvalidTransition):
        check_edge(S.CLOSED, S.OPEN)


def test_path_to_steps_through_closing() -> None:
    """path_to gives the intermediate steps an executor must write, and refuses the unreachable."""
    assert path_to(S.OPEN, S.CLOSED) == [S.CLOSING, S.CLOSED]
    assert path_to(S.LOST, S.CLOSED) == [S.CLOSED]
    assert path_to(S.OPEN, S.OPEN) == []
    with pytest.raises(InvalidTransition):
        path_to(S.CLOSED, S.LOST)


def test_values_are_registry_strings() -> None:
    """States compare equal to the lowercase strings the registry stores."""
    assert S("closing") is S.CLOSING
    assert str(S.LOST) == "lost"
    assert isinstance(S.LOST, str)


@given(st.sampled_from(LeaseState), st.sampled_from(LeaseInput))
def test_every_pair_is_legal_or_fails_closed(state: LeaseState, event: LeaseInput) -> None:
    """Any (state, input) is a legal step, or raises and leaves the lease lost (or closed)."""
    m = LeaseMachine(state)
    try:
        expected = next_state(state, event)
    except InvalidTransition:
        with pytest.raises(InvalidTransition):
            m.transition(event)
        assert now_in(m) is (S.CLOSED if state is S.CLOSED else S.LOST)
    else:
        assert m.transition(event) is expected
        assert (state, expected) in EDGES
