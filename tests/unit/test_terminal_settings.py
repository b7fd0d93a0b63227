"""Terminal settings from session options, and how reconcile reports a terminal's run."""

from __future__ import annotations

from types import SimpleNamespace

from tether.acp.terminals import DEFAULT_OUTPUT_LIMIT
from tether.process_terminals import TerminalSettings
from tether.supervise.lease_state import LeaseInput
from tether.supervise.reconcile import _run_ended


def test_terminals_are_on_unless_turned_off() -> None:
    """No option (a session stored before terminals existed): on, with the defaults."""
    assert TerminalSettings.from_options({}) == TerminalSettings()
    assert TerminalSettings().output_limit == DEFAULT_OUTPUT_LIMIT
    assert TerminalSettings.from_options({"terminal": False}) is None


def test_limit_and_pty_come_from_the_options() -> None:
    """terminalOutputLimit and terminalPty reach the settings; junk falls back."""
    got = TerminalSettings.from_options(
        {"terminal": True, "terminal_output_limit": 64, "terminal_pty": True}
    )
    assert got == TerminalSettings(output_limit=64, pty=True)
    junk = TerminalSettings.from_options({"terminal_output_limit": "x", "terminal_pty": "yes"})
    assert junk == TerminalSettings()


def _lease(backend_id: str) -> SimpleNamespace:
    return SimpleNamespace(
        session_key="s-1", lease_id="L1", exit_code=None, exit_signal=None, backend_id=backend_id
    )


def test_reconcile_says_when_the_lost_run_was_a_terminal() -> None:
    """An owner-lost terminal's run is reported as one (run: terminal), an agent's is not."""
    key, kind, payload = _run_ended(_lease("terminal"), LeaseInput.EXTINCTION_PROVEN, "why")
    assert (key, kind, payload["run"]) == ("s-1", "agent_run_ended", "terminal")
    assert "a terminal" in payload["message"]
    _, _, agent = _run_ended(_lease("mock"), LeaseInput.EXTINCTION_PROVEN, "why")
    assert "run" not in agent
