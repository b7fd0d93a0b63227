"""The ACP session turn machine: its table, walkthroughs and the state x input product."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.acp.turn_state import LEGAL, SessionTurns, TurnInput, TurnState
from tether.errors import InvalidTransition

I = TurnInput  # noqa: E741 - one letter keeps the walkthrough tables readable
S = TurnState


def machine_in(state: TurnState) -> SessionTurns:
    """A machine driven into ``state`` through legal inputs only."""
    m = SessionTurns("s")
    path = {
        S.IDLE: [],
        S.RUNNING: [I.PROMPT_SENT],
        S.CANCELLING: [I.PROMPT_SENT, I.CANCEL_SENT],
        S.ABANDONED: [I.PROMPT_SENT, I.GIVEN_UP],
        S.RETIRED: [I.AGENT_GONE],
    }[state]
    for event in path:
        m.transition(event, 7 if event is I.PROMPT_SENT else None)
    assert m.state is state
    return m


def whole(m: SessionTurns) -> tuple[TurnState, int | None, bool]:
    return m.state, m.request_id, m.in_flight


@pytest.mark.parametrize(
    ("steps", "expect"),
    [
        pytest.param(
            [(I.PROMPT_SENT, 3), (I.ANSWERED, None)],
            [(S.RUNNING, 3, True), (S.IDLE, None, False)],
            id="answered",
        ),
        pytest.param(
            [(I.PROMPT_SENT, 3), (I.CANCEL_SENT, None), (I.CANCEL_SENT, None), (I.ANSWERED, None)],
            [
                (S.RUNNING, 3, True),
                (S.CANCELLING, 3, True),
                (S.CANCELLING, 3, True),
                (S.IDLE, None, False),
            ],
            id="cancelled",
        ),
        pytest.param(
            [(I.PROMPT_SENT, 3), (I.GIVEN_UP, None), (I.LATE_ANSWER, None), (I.PROMPT_SENT, 4)],
            [
                (S.RUNNING, 3, True),
                (S.ABANDONED, 3, False),
                (S.IDLE, None, False),
                (S.RUNNING, 4, True),
            ],
            id="abandoned-then-late-answer",
        ),
        pytest.param(
            [
                (I.PROMPT_SENT, 3),
                (I.CANCEL_SENT, None),
                (I.GIVEN_UP, None),
                (I.GRACE_EXPIRED, None),
            ],
            [
                (S.RUNNING, 3, True),
                (S.CANCELLING, 3, True),
                (S.ABANDONED, 3, False),
                (S.RETIRED, None, False),
            ],
            id="abandoned-never-answered",
        ),
        pytest.param(
            [(I.PROMPT_SENT, 3), (I.AGENT_GONE, None), (I.AGENT_GONE, None)],
            [(S.RUNNING, 3, True), (S.RETIRED, None, False), (S.RETIRED, None, False)],
            id="agent-gone",
        ),
    ],
)
def test_walkthroughs(
    steps: list[tuple[TurnInput, int | None]], expect: list[tuple[TurnState, int | None, bool]]
) -> None:
    """Each step leaves the whole machine state as written."""
    m = SessionTurns("s")
    assert whole(m) == (S.IDLE, None, False)
    for (event, rid), want in zip(steps, expect, strict=True):
        m.transition(event, rid)
        assert whole(m) == want


def test_no_prompt_while_an_abandoned_turn_is_unanswered() -> None:
    """Seed 002's rule is in the table: ABANDONED takes no new prompt."""
    m = machine_in(S.ABANDONED)
    with pytest.raises(InvalidTransition) as info:
        m.transition(I.PROMPT_SENT, 8)
    assert info.value.fields["state"] == "ABANDONED"
    assert m.state is S.RETIRED


@given(st.sampled_from(TurnState), st.sampled_from(TurnInput))
def test_state_input_product(state: TurnState, event: TurnInput) -> None:
    """Every (state, input) gives a legal state, or InvalidTransition and RETIRED."""
    m = machine_in(state)
    if (state, event) in LEGAL:
        assert m.transition(event, 9) in TurnState
    else:
        with pytest.raises(InvalidTransition):
            m.transition(event, 9)
        assert m.state is S.RETIRED
    assert m.in_flight == (m.state in (S.RUNNING, S.CANCELLING))
