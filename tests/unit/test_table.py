"""tether._table: every state machine's miss is one InvalidTransition, in one format."""

from __future__ import annotations

import enum

import pytest

from tether._table import Table
from tether.acp.turn_state import SessionTurns, TurnInput
from tether.errors import InvalidTransition
from tether.owner.lifecycle import OwnerInput, OwnerLifecycle
from tether.owner.question_table import IInput, Interaction, IState
from tether.supervise.lease_state import LeaseInput, LeaseState, next_state
from tether.supervise.run_state import RunInput, RunLifecycle


class Light(enum.Enum):
    OFF = "off"
    ON = "on"
    BROKEN = "broken"


class Press(enum.Enum):
    PUSH = "push"
    KICK = "kick"


TABLE = Table(
    "light",
    {(Light.OFF, Press.PUSH): Light.ON, (Light.ON, Press.PUSH): Light.OFF},
    fail=Light.BROKEN,
    terminal=frozenset({Light.BROKEN}),
)


def test_a_hit_is_the_next_state_and_the_edges_come_from_the_table() -> None:
    """The lookup returns the table's target; ``edges`` are its (from, to) pairs."""
    assert TABLE.next(Light.OFF, Press.PUSH) is Light.ON
    assert TABLE.edges == {(Light.OFF, Light.ON), (Light.ON, Light.OFF)}


def test_a_miss_is_one_invalid_transition_with_names_and_context() -> None:
    """A miss raises InvalidTransition: one message, name fields, the caller's context."""
    with pytest.raises(InvalidTransition) as info:
        TABLE.next(Light.ON, Press.KICK, room="hall")
    assert str(info.value).startswith("light: no transition from ON on KICK")
    assert info.value.fields == {"machine": "light", "state": "ON", "input": "KICK", "room": "hall"}
    assert TABLE.after_miss(Light.ON) is Light.BROKEN
    assert TABLE.after_miss(Light.BROKEN) is Light.BROKEN  # terminal: stays


def _miss(call: object) -> InvalidTransition:
    assert callable(call)
    with pytest.raises(InvalidTransition) as info:
        call()
    return info.value


def test_the_five_machines_miss_alike() -> None:
    """turn, run, lease, owner and interaction raise the same message format and fields."""
    turns = SessionTurns("s")
    run = RunLifecycle()
    owner = OwnerLifecycle(now=0.0)
    item = Interaction("p-1", "permission", {}, deadline=None)
    item.state = IState.RESOLVED
    errors = {
        "turn": _miss(lambda: turns.transition(TurnInput.LATE_ANSWER)),
        "run": _miss(lambda: run.transition(RunInput.EXTINCTION_PROVEN)),
        "lease": _miss(lambda: next_state(LeaseState.CLOSED, LeaseInput.STOLEN)),
        "owner": _miss(lambda: owner.feed(OwnerInput.JOB_ENDED, 0.0)),
        "interaction": _miss(lambda: item.decide(IInput.POLICY, {}, "deny")),
    }
    for machine, exc in errors.items():
        fields = exc.fields
        assert fields["machine"] == machine
        assert str(exc).startswith(
            f"{machine}: no transition from {fields['state']} on {fields['input']}"
        )
        assert fields["state"].isupper()
        assert fields["input"].isupper()
