"""The session_ended record of an agent run: an ownership escape is a failure."""

from __future__ import annotations

from tether.owner.agent_slot import RunEnd
from tether.owner.status import end_event
from tether.supervise.runner import ExtinctionReport


def _report(**kw: object) -> ExtinctionReport:
    base: dict[str, object] = {
        "reason": "exit",
        "exit_code": 0,
        "exit_signal": None,
        "mode": "subreaper",
        "escalated": False,
        "survivors": (),
        "elapsed_ms": 1.0,
    }
    base.update(kw)
    return ExtinctionReport(**base)  # type: ignore[arg-type]


def test_clean_exit_is_completed() -> None:
    """An agent that exits 0 inside its boundary completed."""
    event = end_event(RunEnd("L1", _report(), by_agent=True), stop_reason="")
    assert (event["reason"], event["escaped"]) == ("completed", [])


def test_escape_fails_the_run_even_with_exit_code_zero() -> None:
    """Seed 003: a run with an escaped descendant ended in error, named ownership-escape."""
    report = _report(reason="ownership-escape", escaped=(4242,))
    event = end_event(RunEnd("L1", report, by_agent=True), stop_reason="")
    assert event["reason"] == "error"
    assert event["escaped"] == [4242]
    assert "ownership-escape" in event["message"]
