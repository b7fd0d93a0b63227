"""acpx's command-line grammar, parsed by hand with the standard library only.

    tether [global] [<agent>] <command> [command options] [text...]
    tether [global] <agent> [prompt options] [text...]        implicit prompt

argparse cannot express "an optional positional agent before a sub-command, or else
free text", and it costs imports on the thin path; this parser is ~100 lines and
gives acpx's usage errors (exit 2) for everything it rejects.
"""

from __future__ import annotations

from tether.errors import UsageError

COMMANDS = frozenset(
    {
        "prompt",
        "exec",
        "cancel",
        "set-mode",
        "set",
        "status",
        "sessions",
        "reap",
        "config",
        "metrics",
    }
)
SESSION_SUBCOMMANDS = frozenset({"new", "ensure", "list", "show", "close", "history"})

# global flag -> number of values it takes
_GLOBAL_FLAGS = {
    "--agent": 1,
    "--cwd": 1,
    "--approve-all": 0,
    "--approve-reads": 0,
    "--deny-all": 0,
    "--non-interactive-permissions": 1,
    "--format": 1,
    "--timeout": 1,
    "--ttl": 1,
    "--verbose": 0,
    "--json-strict": 0,
    "--no-fs": 0,
}
_COMMAND_FLAGS = {
    "-s": 1,
    "--session": 1,
    "--name": 1,
    "--no-wait": 0,
    "-f": 1,
    "--file": 1,
    "--dry-run": 0,
    "--limit": 1,
    "--all": 0,
    "--request": 1,
}


class Invocation:
    """One parsed command line (a plain class: ``dataclasses`` costs ~10 ms to import)."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.agent: str | None = None  # positional agent name or raw command
        self.agent_cmd: str | None = None  # --agent
        self.cwd: str | None = None
        self.permissions: str | None = None
        self.non_interactive: str | None = None
        self.format: str | None = None
        self.timeout: float | None = None
        self.ttl: float | None = None
        self.verbose = False
        self.json_strict = False
        self.no_fs = False
        self.session: str | None = None
        self.no_wait = False
        self.file: str | None = None
        self.dry_run = False
        self.limit: int | None = None
        self.all = False
        self.request: str | None = None
        self.subcommand: str | None = None
        self.words: list[str] = []


def _number(flag: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"{flag} expects a number of seconds, got {value!r}") from None
    if number < 0:
        raise UsageError(f"{flag} must not be negative")
    return number


def _apply_global(inv: Invocation, flag: str, value: str | None) -> None:
    if flag in ("--approve-all", "--approve-reads", "--deny-all"):
        mode = flag[2:]
        if inv.permissions and inv.permissions != mode:
            raise UsageError("--approve-all, --approve-reads and --deny-all are mutually exclusive")
        inv.permissions = mode
    elif flag == "--agent":
        inv.agent_cmd = value
    elif flag == "--cwd":
        inv.cwd = value
    elif flag == "--non-interactive-permissions":
        if value not in ("deny", "fail"):
            raise UsageError("--non-interactive-permissions takes deny or fail")
        inv.non_interactive = value
    elif flag == "--format":
        if value not in ("text", "json", "quiet"):
            raise UsageError("--format takes text, json or quiet")
        inv.format = value
    elif flag == "--timeout":
        inv.timeout = _number(flag, value or "")
    elif flag == "--ttl":
        inv.ttl = _number(flag, value or "")
    elif flag == "--verbose":
        inv.verbose = True
    elif flag == "--json-strict":
        inv.json_strict = True
    elif flag == "--no-fs":
        inv.no_fs = True


def _apply_command(inv: Invocation, flag: str, value: str | None) -> None:
    if flag in ("-s", "--session", "--name"):
        inv.session = value
    elif flag == "--no-wait":
        inv.no_wait = True
    elif flag in ("-f", "--file"):
        inv.file = value
    elif flag == "--dry-run":
        inv.dry_run = True
    elif flag == "--all":
        inv.all = True
    elif flag == "--request":
        inv.request = value
    elif flag == "--limit":
        try:
            inv.limit = int(value or "")
        except ValueError:
            raise UsageError("--limit expects an integer") from None


def parse(argv: list[str], is_agent_name: object = None) -> Invocation:
    """Parse ``argv`` (without the program name) into an :class:`Invocation`."""
    inv = Invocation(command="")
    positional: list[str] = []
    i = 0
    literal = False
    while i < len(argv):
        token = argv[i]
        if literal:
            positional.append(token)
            i += 1
            continue
        if token == "--":
            literal = True
            i += 1
            continue
        name, eq, inline = token.partition("=")
        if (
            token.startswith("-")
            and len(token) > 1
            and (name in _GLOBAL_FLAGS or name in _COMMAND_FLAGS)
        ):
            arity = _GLOBAL_FLAGS.get(name, _COMMAND_FLAGS.get(name, 0))
            value: str | None = None
            if arity:
                if eq:
                    value = inline
                elif i + 1 < len(argv):
                    value = argv[i + 1]
                    i += 1
                else:
                    raise UsageError(f"{name} needs a value")
            elif eq:
                raise UsageError(f"{name} takes no value")
            if name in _GLOBAL_FLAGS:
                _apply_global(inv, name, value)
            else:
                _apply_command(inv, name, value)
            i += 1
            continue
        if token.startswith("-") and len(token) > 1 and not positional:
            raise UsageError(f"unknown option {token}")
        positional.append(token)
        i += 1

    if positional and positional[0] in COMMANDS:
        inv.command = positional[0]
        rest = positional[1:]
    elif len(positional) >= 2 and positional[1] in COMMANDS:
        inv.agent = positional[0]
        inv.command = positional[1]
        rest = positional[2:]
    elif positional:
        # Implicit prompt: `tether <agent> "text"` or `tether "text"` (default agent).
        inv.command = "prompt"
        if callable(is_agent_name) and is_agent_name(positional[0]) and len(positional) >= 1:
            inv.agent = positional[0]
            rest = positional[1:]
        else:
            rest = positional
    else:
        raise UsageError("no command given; try `tether --help`")
    if inv.agent and inv.agent_cmd:
        raise UsageError("--agent cannot be combined with a positional agent name")
    if inv.command == "sessions":
        if rest and rest[0] in SESSION_SUBCOMMANDS:
            inv.subcommand = rest[0]
            rest = rest[1:]
        elif rest:
            raise UsageError(
                f"unknown sessions command {rest[0]!r}: use new|ensure|list|show|close|history"
            )
        else:
            inv.subcommand = "list"
        if (
            rest
            and inv.subcommand in ("show", "close", "history", "new", "ensure")
            and not inv.session
        ):
            inv.session = rest[0]
            rest = rest[1:]
    inv.words = rest
    return inv
