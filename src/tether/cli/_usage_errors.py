"""The parser's usage errors: an option a command does not take, an unknown option, a
near miss of a command, and the acpx commands Tether refuses -- each naming the nearest
thing there is (``difflib``, imported only on these error paths)."""

from __future__ import annotations

from tether.cli._grammar import _COMMAND_SPECS, _GLOBAL_FLAGS, COMMANDS, REFUSED
from tether.errors import UsageError

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from tether.cli._parse import Invocation


def nearest(token: str, candidates: list[str]) -> str:
    import difflib  # only on this error path: it costs milliseconds

    # Compare without the dashes, which every candidate shares and which would make
    # any two long options look alike (`--model` is not `--name`).
    name = token.partition("=")[0].lstrip("-")
    bare = {c.lstrip("-"): c for c in candidates}
    close = difflib.get_close_matches(name, list(bare), n=1, cutoff=0.7)
    return f"; did you mean {bare[close[0]]}?" if close else ""


def spec_key(inv: Invocation) -> str:
    if inv.command in ("sessions", "config") and inv.subcommand:
        return f"{inv.command} {inv.subcommand}"
    return inv.command


def refused(key: str) -> None:
    """acpx commands and options Tether does not have: the way Tether does it instead."""
    if key in REFUSED:
        raise UsageError(f"{key}: {REFUSED[key]}" if " --" in key else REFUSED[key])


def check_options(inv: Invocation, given: list[str], unknown: list[str]) -> None:
    """Refuse options that ``inv``'s command does not take, naming the nearest it does."""
    spec = spec_key(inv)
    allowed = _COMMAND_SPECS[spec][2]
    where = f"`tether {spec}`"
    known = sorted({*allowed, *_GLOBAL_FLAGS})
    for token in unknown:
        refused(f"{spec} {token.partition('=')[0]}")
        if inv.implicit:
            # No command was typed: the words taken for a prompt may be the unknown
            # option's value (`--formt json mock status`), so name no command.
            raise UsageError(
                f"unknown option {token}{nearest(token, known)}"
                " (see `tether --help`; text after `--` is never an option)"
            )
        raise UsageError(
            f"unknown option {token} for {where}{nearest(token, known)}"
            f" (see `tether {spec} --help`; text after `--` is never an option)"
        )
    for flag in given:
        if flag not in allowed:
            refused(f"{spec} {flag}")
            owners = [name for name, (_, _, opts) in _COMMAND_SPECS.items() if flag in opts]
            belongs = f"; it is an option of `{'`, `'.join(owners)}`" if owners else ""
            raise UsageError(
                f"{flag} is not an option of {where}{belongs} (see `tether {spec} --help`)"
            )


def near_command(inv: Invocation, positional: list[str], literal_from: int) -> None:
    """An implicit prompt whose first word is a near miss of a command (`tether mock promt
    hi`) is a typo, not a prompt: refuse it, with the way to send it as text."""
    first = 1 if inv.agent else 0
    if first >= min(len(positional), literal_from):
        return
    word = positional[first]
    import difflib  # only for implicit prompts, which start an agent's turn anyway

    close = difflib.get_close_matches(word.lower(), sorted(COMMANDS), n=1, cutoff=0.8)
    if not close:
        return
    agent = f"{inv.agent} " if inv.agent else ""
    text = " ".join(positional[first:])
    raise UsageError(
        f"{word!r} is not a command; did you mean `{close[0]}`? To send it to the agent"
        f" as text: `tether {agent}prompt -- {text}`"
    )
