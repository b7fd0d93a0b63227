"""The sans-IO interaction table: open -> resolved, first answer wins, answers by kind."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import AlreadyAnswered, InvalidTransition, UnknownInteraction, UsageError
from tether.owner.question_table import (
    Board,
    How,
    IInput,
    Interaction,
    IState,
    elicitation_outcome,
    permission_outcome,
)

OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Always", "kind": "allow_always"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]
REQUEST: dict[str, Any] = {
    "sessionId": "s",
    "toolCall": {"toolCallId": "c1", "title": "rm -rf build", "kind": "execute"},
    "options": OPTIONS,
}
REJECT = {"outcome": {"outcome": "selected", "optionId": "reject"}}


def selected(option_id: str) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


@pytest.mark.parametrize(
    ("answer", "option_id"),
    [
        pytest.param("allow", "allow", id="allow-is-allow-once"),
        pytest.param("y", "allow", id="y"),
        pytest.param("always", "allow-always", id="always"),
        pytest.param("deny", "reject", id="deny-is-reject-once"),
        pytest.param("deny-always", "reject", id="no-reject-always-offered-falls-back"),
        pytest.param("allow-always", "allow-always", id="an-option-id-as-is"),
        pytest.param(" NO ", "reject", id="case-and-space"),
    ],
)
def test_answers_map_onto_the_offered_options_by_kind(answer: str, option_id: str) -> None:
    """Answer words pick an offered option by kind; an offered optionId is taken as is."""
    assert permission_outcome(answer, OPTIONS)[0] == selected(option_id)


def test_an_answer_that_names_nothing_offered_is_refused() -> None:
    """A word the agent offered nothing for is a usage error that lists the options."""
    with pytest.raises(UsageError, match="allow-always \\(allow_always\\)"):
        permission_outcome("maybe", OPTIONS)
    with pytest.raises(UsageError):
        permission_outcome("allow", [OPTIONS[2]])


def test_elicitation_answers() -> None:
    assert elicitation_outcome("accept", {"a": 1}) == {"action": "accept", "content": {"a": 1}}
    assert elicitation_outcome("Decline") == {"action": "decline"}
    with pytest.raises(UsageError):
        elicitation_outcome("accept", ["not", "an", "object"])
    with pytest.raises(UsageError):
        elicitation_outcome("sure")


def test_walkthrough_first_answer_wins_and_a_late_one_is_refused() -> None:
    """Open; the first answer resolves it; a second answer raises AlreadyAnswered with
    the first resolution; a deadline and a cancel afterwards change nothing."""
    board = Board()
    item = board.open("permission", REQUEST, deadline=10.0)
    assert (item.state, item.resolution, len(board)) == (IState.OPEN, None, 1)
    assert board.expired(now=9.0) == []
    assert board.expired(now=10.0) == [item]
    _, first = board.answer(item.id, "deny", by={"pid": 42, "uid": 1000})
    assert (item.state, len(board)) == (IState.RESOLVED, 0)
    assert first.to_json() == {
        "answer": "deny",
        "outcome": REJECT,
        "how": "controller",
        "by": {"pid": 42, "uid": 1000},
    }
    with pytest.raises(AlreadyAnswered) as late:
        board.answer(item.id, "allow", by={"pid": 43, "uid": 1000})
    assert late.value.fields["answer"] == "deny"
    assert late.value.fields["by"] == {"pid": 42, "uid": 1000}
    assert item.decide(IInput.DEADLINE, REJECT, "deny") is None
    assert item.cancel() is None
    assert item.resolution is first
    assert board.expired(now=99.0) == []


def test_a_bad_answer_leaves_it_open() -> None:
    board = Board()
    item = board.open("permission", REQUEST, deadline=None)
    with pytest.raises(UsageError):
        board.answer(item.id, "perhaps")
    assert item.is_open
    board.answer(item.id, "allow")
    assert not item.is_open


def test_deadline_and_cancel_resolve_it() -> None:
    board = Board()
    late = board.open("permission", REQUEST, deadline=1.0)
    res = late.decide(IInput.DEADLINE, REJECT, "deny")
    assert res is not None
    assert (res.how, res.outcome, res.by) == (How.DEADLINE, REJECT, {})
    asked = board.open("elicitation", {"message": "who?"}, deadline=None)
    cancelled = asked.cancel()
    assert cancelled is not None
    assert (cancelled.how, cancelled.outcome) == (How.CANCELLED, {"action": "cancel"})
    permission = board.open("permission", REQUEST, deadline=None).cancel()
    assert permission is not None
    assert permission.outcome == {"outcome": {"outcome": "cancelled"}}


def test_unknown_ids() -> None:
    with pytest.raises(UnknownInteraction):
        Board().answer("p-00000000", "allow")


def test_always_is_remembered_by_kind_and_title() -> None:
    """allow_always is remembered for the same tool call, and only for it."""
    board = Board()
    item = board.open("permission", REQUEST, deadline=None)
    assert board.memory.recall(REQUEST) is None
    board.answer(item.id, "always")
    assert board.memory.recall(REQUEST) == (selected("allow-always"), "always")
    other = {**REQUEST, "toolCall": {**REQUEST["toolCall"], "title": "rm -rf /"}}
    assert board.memory.recall(other) is None
    once = board.open("permission", other, deadline=None)
    board.answer(once.id, "allow")
    assert board.memory.recall(other) is None  # allow_once is not remembered


def test_issue21_item12_deny_always_is_remembered_without_a_reject_always_option() -> None:
    """`deny-always` to an agent that offers only reject_once (the mock agent, many
    adapters) is remembered all the same: the same tool call is then rejected at once."""
    board = Board()
    item = board.open("permission", REQUEST, deadline=None)
    board.answer(item.id, "deny-always")
    assert item.resolution is not None
    assert item.resolution.outcome == REJECT  # what the agent offered: reject_once
    assert board.memory.recall(REQUEST) == (REJECT, "deny-always")
    once_only = [o for o in OPTIONS if o["kind"] == "allow_once"]
    asked = {**REQUEST, "toolCall": {**REQUEST["toolCall"], "title": "ls"}, "options": once_only}
    allowed = board.open("permission", asked, deadline=None)
    board.answer(allowed.id, "always")  # no allow_always offered: allow_once, remembered
    assert board.memory.recall(asked) == (selected("allow"), "always")


def test_answers_go_through_answer() -> None:
    item = Interaction("p-1", "permission", REQUEST, deadline=None)
    with pytest.raises(InvalidTransition):
        item.decide(IInput.ANSWER, REJECT, "deny")


@given(st.sampled_from(IState), st.sampled_from(IInput))
def test_every_state_and_input(state: IState, event: IInput) -> None:
    """Any state x input ends in a legal state, or a typed error with the state kept."""
    item = Interaction("p-1", "permission", REQUEST, deadline=None)
    if state is IState.RESOLVED:
        item.answer("allow")
    before = item.resolution
    try:
        if event is IInput.ANSWER:
            item.answer("deny")
        else:
            item.decide(event, REJECT, "deny")
    except (AlreadyAnswered, InvalidTransition):
        assert item.state is IState.RESOLVED
        assert item.resolution is before
        return
    assert item.state is IState.RESOLVED
    if state is IState.RESOLVED:
        assert item.resolution is before  # nothing after the first resolution counts
