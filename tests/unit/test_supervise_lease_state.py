"""The lease state table: legal steps, fail-closed misses and what is unreachable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import InvalidTransition
from tether.supervise import lease_state
from tether.supervise.lease_state import EDGES, LeaseInput, LeaseState, next_state

S = LeaseState
TABLE = lease_state._TABLE


def walk(state: LeaseState, *events: LeaseInput) -> list[LeaseState]:
    """The states a lease in ``state`` goes through, one per event."""
    seen = []
    for event in events:
        state = next_state(state, event)
        seen.append(state)
    return seen


def test_walkthrough_clean_close() -> None:
    """A lease closes through closing, never directly from open."""
    assert walk(S.OPEN, LeaseInput.CLOSE_STARTED, LeaseInput.EXTINCTION_PROVEN) == [
        S.CLOSING,
        S.CLOSED,
    ]


def test_walkthrough_lost_then_proven_gone() -> None:
    """An unverifiable lease is lost, and a later sweep that proves it gone closes it."""
    assert walk(S.OPEN, LeaseInput.UNVERIFIABLE, LeaseInput.EXTINCTION_PROVEN) == [
        S.LOST,
        S.CLOSED,
    ]


def test_walkthrough_gone_before_cleanup_is_lost() -> None:
    """Seed 000: a tree already gone before cleanup reached it is lost, not closed."""
    assert walk(S.OPEN, LeaseInput.GONE_BEFORE_CLEANUP) == [S.LOST]
    assert walk(S.CLOSING, LeaseInput.GONE_BEFORE_CLEANUP) == [S.LOST]


def test_walkthrough_steal_then_reap() -> None:
    """A steal lands in closing from open, closing or lost; closed cannot be stolen."""
    for start in (S.OPEN, S.CLOSING, S.LOST):
        assert walk(start, LeaseInput.STOLEN, LeaseInput.EXTINCTION_PROVEN) == [
            S.CLOSING,
            S.CLOSED,
        ]
    with pytest.raises(InvalidTransition) as info:
        next_state(S.CLOSED, LeaseInput.STOLEN)
    assert info.value.fields == {"machine": "lease", "state": "CLOSED", "input": "STOLEN"}
    assert str(info.value).startswith("lease: no transition from CLOSED on STOLEN")
    assert TABLE.after_miss(S.CLOSED) is S.CLOSED


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
    assert (S.LOST, S.CLOSED) in EDGES
    assert (S.OPEN, S.CLOSED) not in EDGES
    assert (S.CLOSED, S.OPEN) not in EDGES


def test_closing_always_passes_through_closing_and_closed_is_terminal() -> None:
    """open reaches closed only through closing (or lost); nothing leaves closed."""
    assert [dst for src, dst in EDGES if src is S.OPEN and dst is S.CLOSED] == []
    assert {src for src, dst in EDGES if dst is S.CLOSED} == {S.CLOSING, S.LOST}
    assert [dst for src, dst in EDGES if src is S.CLOSED] == []
    for event in LeaseInput:
        with pytest.raises(InvalidTransition):
            next_state(S.CLOSED, event)


def test_values_are_registry_strings() -> None:
    """States compare equal to the lowercase strings the registry stores."""
    assert S("closing") is S.CLOSING
    assert str(S.LOST) == "lost"
    assert isinstance(S.LOST, str)


@given(st.sampled_from(LeaseState), st.sampled_from(LeaseInput))
def test_every_pair_is_legal_or_fails_closed(state: LeaseState, event: LeaseInput) -> None:
    """Any (state, input) is a legal step, or raises and leaves the lease lost (or closed)."""
    if (state, event) in TABLE.transitions:
        assert (state, next_state(state, event)) in EDGES
    else:
        with pytest.raises(InvalidTransition) as info:
            next_state(state, event)
        assert info.value.fields["machine"] == "lease"
        assert TABLE.after_miss(state) is (S.CLOSED if state is S.CLOSED else S.LOST)
