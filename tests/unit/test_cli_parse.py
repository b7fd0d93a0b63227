"""The command-line grammar refuses what a command does not know (issue 9, item 12)."""

from __future__ import annotations

import pytest

from tether import errors
from tether.cli import _help, _parse
from tether.cli._parse import parse


def _parse_mock(argv: list[str]) -> _parse.Invocation:
    return parse(argv, lambda token, _cwd=None: token == "mock")


@pytest.mark.parametrize(
    ("argv", "named", "suggested"),
    [
        pytest.param(
            ["mock", "sessions", "new", "--import-session", "abc"],
            "--import-session",
            None,
            id="sessions-new-unknown",
        ),
        pytest.param(
            ["mock", "prompt", "--modelz", "x", "hi"], "--modelz", None, id="prompt-unknown"
        ),
        pytest.param(["mock", "exec", "--fiel", "a.txt"], "--fiel", "--file", id="typo-suggested"),
        pytest.param(["mock", "--no-wiat", "hi"], "--no-wait", "--no-wait", id="implicit-typo"),
        pytest.param(["mock", "exec", "--no-wait", "hi"], "--no-wait", None, id="other-commands"),
        pytest.param(["mock", "status", "--limit", "3"], "--limit", None, id="limit-on-status"),
        pytest.param(["mock", "sessions", "list", "-s", "x"], "-s", None, id="session-on-list"),
        pytest.param(["reap", "--all"], "--all", None, id="all-on-reap"),
    ],
)
def test_unknown_or_foreign_options_are_usage_errors(
    argv: list[str], named: str, suggested: str | None
) -> None:
    """An option the command does not take is a usage error naming it (and its nearest)."""
    with pytest.raises(errors.UsageError) as info:
        _parse_mock(argv)
    assert info.value.exit_code == 2
    assert named in str(info.value)
    if suggested is not None:
        assert f"did you mean {suggested}" in str(info.value)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["mock", "prompt", "--", "--model", "x"], ["--model", "x"], id="after-dashes"),
        pytest.param(["mock", "set", "temperature", "-1"], ["temperature", "-1"], id="negative"),
        pytest.param(["mock", "exec", "-f", "-"], [], id="stdin-file"),
    ],
)
def test_option_like_words_that_are_allowed(argv: list[str], words: list[str]) -> None:
    """Words after `--`, negative numbers and `-f -` are not options."""
    assert _parse_mock(argv).words == words


def test_global_options_are_accepted_after_the_command() -> None:
    """Global options may follow the command (acpx accepts them anywhere)."""
    inv = _parse_mock(["mock", "prompt", "--format", "json", "-s", "w", "hi"])
    assert (inv.format, inv.session, inv.words) == ("json", "w", ["hi"])


@pytest.mark.parametrize(
    ("argv", "title", "has", "lacks"),
    [
        pytest.param(["prompt", "--help"], "tether prompt", "--no-wait", "--dry-run", id="prompt"),
        pytest.param(["mock", "exec", "-h"], "tether exec", "--file", "--no-wait", id="exec"),
        pytest.param(
            ["sessions", "history", "--help"],
            "tether sessions history",
            "--limit",
            "--no-wait",
            id="sessions-history",
        ),
        pytest.param(["reap", "--help"], "tether reap", "--dry-run", "--limit", id="reap"),
        pytest.param(["doctor", "--help"], "tether doctor", "--repair", "--limit", id="doctor"),
        pytest.param(["help", "sessions"], "tether sessions", "close", "--repair", id="help-cmd"),
    ],
)
def test_every_command_has_its_own_help(argv: list[str], title: str, has: str, lacks: str) -> None:
    """`<command> --help` lists that command's own options, not the others'."""
    text = _help.help_for(argv)
    assert text is not None
    assert title in text.splitlines()[0]
    assert has in text
    assert lacks not in text


def test_global_help_lists_json_strict() -> None:
    """`--json-strict` is documented in the global help."""
    text = _help.help_for(["--help"])
    assert text is not None
    assert "--json-strict" in text


def test_every_command_has_help_text() -> None:
    """The help table covers every command and sessions subcommand."""
    for command in _parse.COMMANDS:
        assert _help.help_for([command, "--help"])
    for sub in _parse.SESSION_SUBCOMMANDS:
        text = _help.help_for(["sessions", sub, "--help"])
        assert text is not None
        assert f"tether sessions {sub}" in text


def test_questions_grammar() -> None:
    """`answer ID WORD`, `sessions watch --control`, and `--permission-policy` (which a
    mode flag cannot accompany)."""
    inv = _parse_mock(["mock", "answer", "-s", "x", "p-1", "allow"])
    assert (inv.command, inv.session, inv.words) == ("answer", "x", ["p-1", "allow"])
    assert _parse_mock(["mock", "sessions", "watch", "--control"]).control is True
    with pytest.raises(errors.UsageError, match="--control"):
        _parse_mock(["mock", "sessions", "read", "--control"])
    inv = _parse_mock(["--permission-policy", "p.toml", "mock", "prompt", "hi"])
    assert inv.permission_policy == "p.toml"
    with pytest.raises(errors.UsageError, match="mutually exclusive"):
        _parse_mock(["--approve-all", "--permission-policy", "p.toml", "mock", "prompt", "x"])
