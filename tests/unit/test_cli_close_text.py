"""`sessions close`'s line when the session's end could not be recorded (issue 21 item 16):
only a full disk is helped by freeing space."""

from __future__ import annotations

from tether.cli._sessions_cmd import state_error_text


def test_a_corrupt_database_is_not_told_to_free_space() -> None:
    text = state_error_text(
        {"stateError": "database disk image is malformed", "stateErrorCode": "STATE_CORRUPT"}
    )
    assert "free space" not in text
    assert "tether doctor --repair" in text


def test_a_full_disk_is_told_to_free_space() -> None:
    text = state_error_text({"stateError": "disk full", "stateErrorCode": "STATE_FULL"})
    assert "free space" in text


def test_an_unknown_cause_gets_doctor_only() -> None:
    text = state_error_text({"stateError": "I/O error"})
    assert "free space" not in text
    assert "tether doctor" in text
