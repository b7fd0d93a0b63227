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
        "doctor",
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
    "--mcp-bridge": 0,
    "--mcp-config": 1,
}
# command flag -> (number of values, how --help shows it, what it does)
_COMMAND_FLAGS = {
    "-s": (1, "-s, --session NAME", "the session's name (default: the unnamed session)"),
    "--session": (1, "", ""),
    "--name": (1, "", ""),
    "--no-wait": (0, "--no-wait", "return once the owner queued the prompt: [queued] ID"),
    "-f": (1, "-f, --file FILE|-", "read the prompt from FILE (- is stdin)"),
    "--file": (1, "", ""),
    "--dry-run": (0, "--dry-run", "print every decision, signal nothing"),
    "--limit": (1, "--limit N", "show the last N events (default 20)"),
    "--all": (0, "--all", "include closed sessions"),
    "--tree": (0, "--tree", "draw the ownership tree (who spawned whom)"),
    "--request": (1, "--request ID", "remove this queued request instead"),
    "--repair": (0, "--repair", "move a corrupt state database aside and start a fresh one"),
}
_SAME = {"--session": "-s", "--name": "-s", "--file": "-f"}  # spellings of one option

_S = ("-s", "--session", "--name")
_F = ("-f", "--file")
# "command" or "sessions SUB" -> (arguments, what it does, the command options it takes)
_COMMAND_SPECS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "exec": ("[-f FILE|-] [TEXT...]", "one shot: start the agent, one prompt, tear it down", _F),
    "prompt": (
        "[-s NAME] [--no-wait] [-f FILE|-] [TEXT...]",
        "prompt a saved session through its warm owner (never creates one: exit 4)",
        (*_S, "--no-wait", *_F),
    ),
    "cancel": (
        "[-s NAME] [--request ID]",
        "cancel the session's running turn (the session stays), or remove a queued request",
        (*_S, "--request"),
    ),
    "set-mode": ("[-s NAME] MODE", "set the session's mode (session/set_mode)", _S),
    "set": (
        "[-s NAME] KEY VALUE",
        "set a session config option (session/set_config_option; `set model X` too)",
        _S,
    ),
    "status": ("[-s NAME]", "owner health, pids, queue, current turn, lease state", _S),
    "sessions": (
        "new|ensure|list|show|history|close [NAME]",
        "create, inspect or end sessions (default: list); `tether sessions SUB --help`",
        (),
    ),
    "sessions new": ("[-s NAME | NAME]", "create a fresh session (closes one of that name)", _S),
    "sessions ensure": ("[-s NAME | NAME]", "reuse the session, or create it; start its owner", _S),
    "sessions list": (
        "[--all] [--tree]",
        "list the sessions you may see",
        ("--all", "--tree"),
    ),
    "sessions show": ("[-s NAME | NAME]", "one session's record", _S),
    "sessions history": (
        "[-s NAME | NAME] [--limit N]",
        "the session's recorded events, oldest first",
        (*_S, "--limit"),
    ),
    "sessions close": (
        "[-s NAME | NAME]",
        "end the session and prove its process tree gone",
        _S,
    ),
    "reap": (
        "[--dry-run]",
        "reconcile leases: reap verified orphans of this instance",
        ("--dry-run",),
    ),
    "config": ("", "print the merged configuration", ()),
    "doctor": (
        "[--repair]",
        "check the state directory (database, schema, permissions, stale sockets)",
        ("--repair",),
    ),
}

HELP = """\
usage: tether [global options] [<agent>] <command> [options] [text...]
       tether [global options] <agent> "text"          (implicit prompt)

commands:
  exec [-f FILE|-] [TEXT...]           one-shot: start the agent, one prompt, tear it down
  prompt [-s NAME] [--no-wait] [-f FILE|-] [TEXT...]
                                       prompt a saved session through its warm owner
  cancel [-s NAME] [--request ID]      cancel the session's running turn (keeps the session)
  set-mode [-s NAME] MODE              session/set_mode
  set [-s NAME] KEY VALUE              session/set_config_option (`set model X` too)
  status [-s NAME]                     owner health, pids, queue, lease state
  sessions new|ensure [-s NAME]        create (new: fresh) or reuse a session; starts its owner
  sessions list|show|history [NAME]    inspect sessions
  sessions close [NAME]                end the session and prove its process tree gone
  reap [--dry-run]                     reconcile leases: reap verified orphans of this instance
  doctor [--repair]                    check the state directory; repair a corrupt database
  config                               print the merged configuration
  mcp [--session-key KEY]              serve the session tools over MCP (stdio)

  `tether <command> --help` lists a command's own options.

agents: claude, codex, gemini, opencode, cursor, copilot, qwen, kimi, ..., mock (bundled),
        a name from config, or any command (`--agent "node agent.js"`)

global options:
  --agent CMD                          raw agent command (split like a shell, never run by one)
  --cwd DIR                            working directory (default: current)
  --approve-all | --approve-reads | --deny-all
                                       permission mode (default: approve-reads)
  --non-interactive-permissions deny|fail
                                       undecided permission requests: reject, or fail (exit 5)
  --format text|json|quiet             output format (default: text)
  --json-strict                        with --format json: JSON only (no text on stderr)
  --timeout SECONDS                    give up on a prompt after this long (exit 3)
  --ttl SECONDS                        owner idle TTL (default 3600; 0 = forever)
  --no-fs                              do not offer file-system access to the agent
  --mcp-bridge                         hand agents `tether mcp` (delegate to other sessions)
  --mcp-config FILE                    MCP servers for agents (JSON: {"mcpServers": ...})
  --verbose                            debug logs on stderr
  --version, --help

options after `--` are text, never options (`tether mock prompt -- --not-a-flag`).

exit codes: 0 ok, 1 agent/protocol/runtime error, 2 usage, 3 timeout, 4 no session,
            5 permission denied, 130 interrupted
"""


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
        self.repair = False
        self.tree = False  # sessions list --tree
        self.mcp_bridge = False  # --mcp-bridge: hand agents `tether mcp`
        self.mcp_config: str | None = None  # --mcp-config FILE: MCP servers for agents
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
    elif flag == "--mcp-bridge":
        inv.mcp_bridge = True
    elif flag == "--mcp-config":
        inv.mcp_config = value


def _apply_command(inv: Invocation, flag: str, value: str | None) -> None:
    flag = _SAME.get(flag, flag)
    if flag == "-s":
        inv.session = value
    elif flag == "--no-wait":
        inv.no_wait = True
    elif flag == "-f":
        inv.file = value
    elif flag == "--dry-run":
        inv.dry_run = True
    elif flag == "--all":
        inv.all = True
    elif flag == "--tree":
        inv.tree = True
    elif flag == "--request":
        inv.request = value
    elif flag == "--repair":
        inv.repair = True
    elif flag == "--limit":
        try:
            inv.limit = int(value or "")
        except ValueError:
            raise UsageError(f"--limit expects an integer, got {value!r}") from None


def _arity(flag: str) -> int:
    if flag in _GLOBAL_FLAGS:
        return _GLOBAL_FLAGS[flag]
    return _COMMAND_FLAGS[flag][0] if flag in _COMMAND_FLAGS else 0


def _is_option(token: str) -> bool:
    """``-x``/``--xy`` are options; ``-`` (stdin) and negative numbers are words."""
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def _nearest(token: str, candidates: list[str]) -> str:
    import difflib  # only on this error path: it costs milliseconds

    name = token.partition("=")[0]
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _spec_key(inv: Invocation) -> str:
    return f"sessions {inv.subcommand}" if inv.command == "sessions" else inv.command


def _check_options(inv: Invocation, given: list[str], unknown: list[str]) -> None:
    """Refuse options that ``inv``'s command does not take, naming the nearest it does."""
    spec = _spec_key(inv)
    allowed = _COMMAND_SPECS[spec][2]
    where = f"`tether {spec}`"
    known = sorted({*allowed, *_GLOBAL_FLAGS})
    for token in unknown:
        raise UsageError(
            f"unknown option {token} for {where}{_nearest(token, known)}"
            f" (see `tether {spec} --help`; text after `--` is never an option)"
        )
    for flag in given:
        if flag not in allowed:
            raise UsageError(
                f"{flag} is not an option of {where}{_nearest(flag, known)}"
                f" (see `tether {spec} --help`)"
            )


def parse(argv: list[str], is_agent_name: object = None) -> Invocation:
    """Parse ``argv`` (without the program name) into an :class:`Invocation`.

    Raises:
        UsageError: an unknown option, an option the command does not take, a missing or
            malformed value, or no command at all.
    """
    inv = Invocation(command="")
    positional: list[str] = []
    given: list[tuple[str, str | None]] = []  # command options, applied once the command is known
    unknown: list[str] = []
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
        if not _is_option(token):
            positional.append(token)
            i += 1
            continue
        name, eq, inline = token.partition("=")
        if name not in _GLOBAL_FLAGS and name not in _COMMAND_FLAGS:
            unknown.append(token)
            i += 1
            continue
        arity = _arity(name)
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
            given.append((name, value))
        i += 1

    rest = _command(inv, positional, is_agent_name, unknown)
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
    _check_options(inv, [_SAME.get(flag, flag) for flag, _ in given], unknown)
    for flag, value in given:
        _apply_command(inv, flag, value)
    if (
        rest
        and inv.command == "sessions"
        and inv.subcommand in ("show", "close", "history", "new", "ensure")
        and not inv.session
    ):
        inv.session = rest[0]
        rest = rest[1:]
    inv.words = rest
    return inv


def _command(
    inv: Invocation, positional: list[str], is_agent_name: object, unknown: list[str]
) -> list[str]:
    """Find the agent and the command among the positional words; return the rest."""
    if positional and positional[0] in COMMANDS:
        inv.command = positional[0]
        return positional[1:]
    if len(positional) >= 2 and positional[1] in COMMANDS:
        inv.agent = positional[0]
        inv.command = positional[1]
        return positional[2:]
    if positional:
        # Implicit prompt: `tether <agent> "text"` or `tether "text"` (default agent).
        inv.command = "prompt"
        if callable(is_agent_name) and is_agent_name(positional[0]):
            inv.agent = positional[0]
            return positional[1:]
        return positional
    if unknown:
        raise UsageError(
            f"unknown option {unknown[0]}{_nearest(unknown[0], sorted(_GLOBAL_FLAGS))}"
        )
    raise UsageError("no command given; try `tether --help`")


# --- help ----------------------------------------------------------------------------


def _command_help(spec: str) -> str:
    args, what, options = _COMMAND_SPECS[spec]
    lines = [
        f"tether {spec}: {what}",
        "",
        f"usage: tether [global options] [<agent>] {spec} {args}".rstrip(),
    ]
    if spec == "sessions":
        lines += ["", "subcommands:"]
        for sub in ("new", "ensure", "list", "show", "history", "close"):
            sub_args, sub_what, _ = _COMMAND_SPECS[f"sessions {sub}"]
            lines.append(f"  {(sub + ' ' + sub_args).ljust(36)} {sub_what}")
    shown = [_COMMAND_FLAGS[flag] for flag in options if _COMMAND_FLAGS[flag][1]]
    if shown:
        lines += ["", "options:"]
        lines += [f"  {usage.ljust(36)} {text}" for _, usage, text in shown]
    lines += ["", "global options (`tether --help`) are accepted too."]
    return "\n".join(lines) + "\n"


def help_for(argv: list[str]) -> str | None:
    """The help text ``argv`` asks for (``--help``, ``-h``, ``help [COMMAND]``), or None.

    ``tether <command> --help`` gets that command's own options; anything else the
    global help. Never raises: asking for help is not a usage error.
    """
    flags = argv[: argv.index("--")] if "--" in argv else argv
    words: list[str] = []
    skip = 0
    for token in flags:
        if skip:
            skip -= 1
        elif not token.startswith("-"):
            words.append(token)
        elif "=" not in token:
            skip = _arity(token)
    if words[:1] == ["help"]:
        words = words[1:]
    elif argv and "--help" not in flags and "-h" not in flags:
        return None
    spec: str | None = None
    for index, word in enumerate(words[:2]):
        if word in COMMANDS:
            spec = word
            following = words[index + 1 : index + 2]
            if word == "sessions" and following and following[0] in SESSION_SUBCOMMANDS:
                spec = f"sessions {following[0]}"
            break
    return _command_help(spec) if spec else HELP
