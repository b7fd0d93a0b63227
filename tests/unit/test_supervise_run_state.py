"""The run lifecycle: its transition table, single finalizer, stop idempotence and deadlines."""

from __future__ import annotations

import signal
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import InvalidTransition
from tether.supervise.run_state import (
    LEGAL,
    RunInput,
    RunLifecycle,
    RunState,
    TerminationReason,
)

R = TerminationReason


@dataclass(frozen=True)
class Snap:
    state: RunState
    stop_reason: TerminationReason | None
    settled: bool
    reason: TerminationReason | None
    exit_code: int | None
    exit_signal: int | None


def snap(run: RunLifecycle) -> Snap:
    return Snap(run.state, run.stop_reason, run.settled, run.reason, run.exit_code, run.exit_signal)


def test_walkthrough_natural_exit() -> None:
    """A run that exits by itself passes every state and reports EXIT by the agent."""
    run = RunLifecycle(started_at=0.0)
    assert snap(run) == Snap(RunState.STARTING, None, False, None, None, None)
    run.transition(RunInput.SPAWNED)
    assert snap(run) == Snap(RunState.RUNNING, None, False, None, None, None)
    run.transition(RunInput.PROCESS_EXITED)
    assert snap(run) == Snap(RunState.EXITING, None, False, None, None, None)
    run.transition(RunInput.EXTINCTION_PROVEN)
    assert snap(run) == Snap(RunState.EXITED, None, False, None, None, None)
    assert run.finalize(exit_code=0) is True
    assert snap(run) == Snap(RunState.EXITED, None, True, R.EXIT, 0, None)
    assert run.terminated_by == "agent"


def test_walkthrough_manual_cancel() -> None:
    """A cancelled run records MANUAL_CANCEL as its reason even though it died by a signal."""
    run = RunLifecycle(started_at=0.0)
    run.transition(RunInput.SPAWNED)
    assert run.request_stop(R.MANUAL_CANCEL) is True
    assert snap(run) == Snap(RunState.EXITING, R.MANUAL_CANCEL, False, None, None, None)
    run.transition(RunInput.PROCESS_EXITED)
    assert snap(run) == Snap(RunState.EXITING, R.MANUAL_CANCEL, False, None, None, None)
    run.transition(RunInput.EXTINCTION_PROVEN)
    assert run.finalize(signal=signal.SIGTERM) is True
    assert snap(run) == Snap(
        RunState.EXITED, R.MANUAL_CANCEL, True, R.MANUAL_CANCEL, None, signal.SIGTERM
    )
    assert run.terminated_by == "daemon"


def test_walkthrough_spawn_failure() -> None:
    """A failed spawn ends the run at once and reports SPAWN_ERROR."""
    run = RunLifecycle(started_at=0.0)
    run.transition_spawn_failed()
    assert snap(run) == Snap(RunState.EXITED, None, False, None, None, None)
    assert run.finalize() is True
    assert snap(run) == Snap(RunState.EXITED, None, True, R.SPAWN_ERROR, None, None)


def test_walkthrough_stop_during_spawn() -> None:
    """A stop that arrives while spawning still waits for the spawned tree's extinction."""
    run = RunLifecycle()
    assert run.request_stop(R.CLOSE) is True
    assert run.state is RunState.EXITING
    run.transition_spawned(5.0)
    assert run.state is RunState.EXITING
    run.transition_extinct()
    assert run.finalize(exit_signal=9) is True
    assert (run.reason, run.exit_signal) == (R.CLOSE, 9)


def test_finalize_exactly_once() -> None:
    """finalize returns True exactly once; later calls change nothing."""
    run = RunLifecycle(started_at=0.0)
    run.transition(RunInput.SPAWNED)
    run.transition(RunInput.PROCESS_EXITED)
    assert run.finalize(exit_code=3) is True
    before = snap(run)
    assert run.finalize(exit_code=0, reason=R.OWNER_LOST) is False
    assert run.finalize(signal=9) is False
    assert snap(run) == before


def test_finalize_with_a_fallback_reason() -> None:
    """An explicit reason is used when no stop was requested, and a signal alone means SIGNAL."""
    a = RunLifecycle(started_at=0.0)
    a.transition_spawned()
    a.transition_exited()
    a.finalize(reason=R.OWNER_LOST)
    assert a.reason is R.OWNER_LOST
    b = RunLifecycle(started_at=0.0)
    b.transition_spawned()
    b.transition_exited()
    b.finalize(signal=signal.SIGSEGV)
    assert b.reason is R.SIGNAL


def test_finalize_before_the_run_ended_is_a_bug() -> None:
    """Finalizing a RUNNING run raises InvalidTransition and leaves the machine EXITED."""
    run = RunLifecycle(started_at=0.0)
    run.transition(RunInput.SPAWNED)
    with pytest.raises(InvalidTransition):
        run.finalize(exit_code=0)
    assert run.state is RunState.EXITED
    assert not run.settled


def test_duplicate_stop_is_idempotent_first_reason_wins() -> None:
    """Only the first stop request counts; duplicates return False and keep the first reason."""
    run = RunLifecycle(started_at=0.0)
    run.transition(RunInput.SPAWNED)
    assert run.request_stop(R.OVERALL_TIMEOUT) is True
    assert run.request_stop(R.MANUAL_CANCEL) is False
    assert run.request_stop(R.OVERALL_TIMEOUT) is False
    assert run.stop_reason is R.OVERALL_TIMEOUT
    assert run.state is RunState.EXITING


def test_stop_after_natural_exit_is_refused() -> None:
    """A stop requested after the root exited returns False and keeps the reason EXIT."""
    run = RunLifecycle(started_at=0.0)
    run.transition(RunInput.SPAWNED)
    run.transition(RunInput.PROCESS_EXITED)
    assert run.request_stop(R.MANUAL_CANCEL) is False
    run.transition(RunInput.EXTINCTION_PROVEN)
    run.finalize(exit_code=0)
    assert run.reason is R.EXIT


def test_no_output_after_settlement() -> None:
    """Output is delivered until the run settles and dropped afterwards."""
    run = RunLifecycle(started_at=0.0, no_output_timeout=5.0)
    run.transition(RunInput.SPAWNED)
    assert run.deliver_output(1.0) is True
    run.request_stop(R.CLOSE)
    assert run.deliver_output(2.0) is True  # last words during teardown are kept
    run.transition(RunInput.EXTINCTION_PROVEN)
    run.finalize(exit_code=0)
    assert run.deliver_output(3.0) is False
    assert run.last_output_at == 2.0


def test_output_re_arms_the_no_output_deadline() -> None:
    """Each output pushes the no-output deadline forward; silence past it makes it due."""
    run = RunLifecycle(started_at=100.0, no_output_timeout=10.0)
    run.transition(RunInput.SPAWNED)
    assert run.no_output_deadline == 110.0
    assert run.due(109.9) is None
    run.deliver_output(108.0)
    assert run.no_output_deadline == 118.0
    assert run.due(110.0) is None
    assert run.next_deadline() == 118.0
    assert run.due(118.0) is R.NO_OUTPUT_TIMEOUT


def test_overall_deadline_is_not_re_armed() -> None:
    """Output never extends the overall deadline, which wins ties with the no-output one."""
    run = RunLifecycle(started_at=0.0, overall_timeout=30.0, no_output_timeout=30.0)
    run.transition(RunInput.SPAWNED)
    assert run.due(30.0) is R.OVERALL_TIMEOUT
    run.deliver_output(20.0)
    assert run.overall_deadline == 30.0
    assert run.due(30.0) is R.OVERALL_TIMEOUT
    assert run.next_deadline() == 30.0


def test_deadlines_count_from_spawn_without_started_at() -> None:
    """Without started_at the clock starts at transition_spawned(now)."""
    run = RunLifecycle(overall_timeout=10.0, no_output_timeout=3.0)
    assert run.next_deadline() is None
    assert run.due(1e9) is None
    run.transition_spawned(50.0)
    assert (run.overall_deadline, run.no_output_deadline) == (60.0, 53.0)
    assert run.due(53.0) is R.NO_OUTPUT_TIMEOUT


def test_nothing_is_due_once_stopping() -> None:
    """Deadlines stop firing once the run is exiting."""
    run = RunLifecycle(started_at=0.0, overall_timeout=1.0)
    run.transition(RunInput.SPAWNED)
    run.request_stop(R.MANUAL_CANCEL)
    assert run.due(100.0) is None
    assert run.next_deadline() is None


def _machine_in(state: RunState) -> RunLifecycle:
    run = RunLifecycle(started_at=0.0)
    path = {
        RunState.STARTING: [],
        RunState.RUNNING: [RunInput.SPAWNED],
        RunState.EXITING: [RunInput.SPAWNED, RunInput.PROCESS_EXITED],
        RunState.EXITED: [RunInput.SPAWNED, RunInput.PROCESS_EXITED, RunInput.EXTINCTION_PROVEN],
    }[state]
    for event in path:
        run.transition(event)
    assert run.state is state
    return run


@given(st.sampled_from(RunState), st.sampled_from(RunInput))
def test_every_state_input_pair_is_legal_or_fails_terminal(
    state: RunState, event: RunInput
) -> None:
    """Any (state, input) lands in a legal state or raises InvalidTransition and ends EXITED."""
    run = _machine_in(state)
    if (state, event) in LEGAL:
        assert run.transition(event) in RunState
    else:
        with pytest.raises(InvalidTransition) as info:
            run.transition(event)
        assert run.state is RunState.EXITED
        assert info.value.fields["machine"] == "run"
