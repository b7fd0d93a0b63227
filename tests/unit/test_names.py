"""Session names and terminal escaping (issue 20, item 7): pure functions, and the CLI's
output on a terminal."""

from __future__ import annotations

import io

import pytest

from tether.cli.output import Output
from tether.errors import InvalidName
from tether.names import MAX_NAME, check_name, escape


@pytest.mark.parametrize(
    "name",
    ["a\nb", "\x1b[2J", "nul\x00", "tab\t", "del\x7f", "c1\x9b", "\u202e", "\u2028", "\u200b"],
)
def test_check_name_refuses_what_is_not_printable(name: str) -> None:
    with pytest.raises(InvalidName) as caught:
        check_name(name)
    assert caught.value.exit_code == 2
    assert caught.value.detail_code == "BAD_VALUE"
    assert "\n" not in str(caught.value)
    assert "\x1b" not in str(caught.value)


@pytest.mark.parametrize("name", ["", "work", "pr 42", "revue-été", "日本語", "a" * MAX_NAME])
def test_check_name_accepts_printable_text(name: str) -> None:
    assert check_name(name) == name


def test_check_name_bounds_the_length() -> None:
    with pytest.raises(InvalidName):
        check_name("a" * (MAX_NAME + 1))


def test_escape_keeps_lines_only_outside_fields() -> None:
    assert escape("a\nb\tc\x1b[0m") == "a\\nb\\tc\\x1b[0m"
    assert escape("a\nb\tc\x1b[0m\r", field=False) == "a\nb\tc\\x1b[0m\\x0d"
    assert escape("x\u202ey") == "x\\u202ey"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_agent_text_on_a_terminal_is_escaped() -> None:
    """An agent's escape sequence never reaches a terminal; a pipe gets the text as is."""
    tty, pipe = _Tty(), io.StringIO()
    frame = {
        "method": "session/update",
        "params": {
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "hi\x1b]0;owned\x07\nthere"},
            }
        },
    }
    for stream in (tty, pipe):
        out = Output("text", stdout=stream, stderr=io.StringIO())
        out.frame("in", frame)
        out.flush()
    assert tty.getvalue() == "hi\\x1b]0;owned\\x07\nthere"
    assert pipe.getvalue() == "hi\x1b]0;owned\x07\nthere"
