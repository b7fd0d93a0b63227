"""acpx's command-line grammar, parsed by hand with the standard library only.

    tether [global] [<agent>] <command> [command options] [text...]
    tether [global] <agent> [prompt options] [text...]        implicit prompt

argparse cannot express "an optional positional agent before a sub-command, or else
free text", and it costs imports on the thin path; this parser gives acpx's usage
errors (exit 2) for everything it rejects.

Global options may stand anywhere. Each command takes only the options listed for it
in ``_grammar._COMMAND_SPECS``: any other option -- unknown, or another command's -- is a usage
error naming it and the nearest option the command has (``_usage_errors``; ``difflib``,
imported only then), unless it comes after ``--``. ``-`` and negative numbers are words.
The same table gives each command its own ``--help`` (:func:`help_for`).

Adding an option: one entry in ``_grammar._COMMAND_FLAGS`` (arity, how help shows it, what it
does), its name in the commands' tuples in ``_grammar._COMMAND_SPECS``, and where it lands in
``_apply.apply_command``.
"""

from __future__ import annotations

from tether.cli._apply import apply_command, apply_global
from tether.cli._grammar import (
    _COMMAND_FLAGS,
    _GLOBAL_FLAGS,
    _SAME,
    COMMANDS,
    CONFIG_SUBCOMMANDS,
    SESSION_SUBCOMMANDS,
    _arity,
)
from tether.cli._usage_errors import check_options, near_command, nearest, refused
from tether.errors import UsageError


class Invocation:
    """One parsed command line (a plain class: ``dataclasses`` costs ~10 ms to import)."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.agent: str | None = None  # positional agent name or raw command
        self.agent_cmd: str | None = None  # --agent
        self.cwd: str | None = None
        self.permissions: str | None = None
        self.non_interactive: str | None = None
        self.permission_policy: str | None = None
        self.control = False
        self.format: str | None = None
        self.timeout: float | None = None
        self.ttl: float | None = None
        self.verbose = False
        self.json_strict = False
        self.no_fs = False
        self.no_terminal = False  # --no-terminal: no terminal/* for the agent
        self.session: str | None = None
        self.key: str | None = None  # --key KEY: the session by its key (or a prefix)
        self.no_wait = False
        self.file: str | None = None
        self.dry_run = False
        self.limit: int | None = None
        self.all = False
        self.request: str | None = None
        self.from_seq: int | None = None
        self.tail: int | None = None
        self.no_follow = False
        self.output_file: str | None = None
        self.older_than: str | None = None
        self.closed = False
        self.all_agents = False  # sessions prune --all-agents
        self.repair = False
        self.close_on_exit = False
        self.host: str | None = None
        self.port: int | None = None
        self.unix: str | None = None
        self.token: str | None = None
        self.allowed_hosts: list[str] = []  # serve --allowed-host (repeatable)
        self.router = False  # serve --router
        self.fleet_index: str | None = None  # serve --fleet-index DSN
        self.host_id: str | None = None  # serve --host-id ID
        self.advertise: str | None = None  # serve --advertise URL
        self.labels: list[tuple[str, str]] = []  # serve --label KEY=VALUE (repeatable)
        self.fleet_token_file: str | None = None  # serve --fleet-token-file PATH
        self.tls_cert: str | None = None  # serve --tls-cert FILE
        self.tls_key: str | None = None  # serve --tls-key FILE
        self.fleet_ca: str | None = None  # serve --router --fleet-ca FILE
        self.drain = False  # serve --drain: drain the fleet host running on this home
        self.drain_grace: float | None = None  # serve --drain-grace SECONDS
        self.tree = False  # sessions list --tree
        self.sandboxed = False  # sessions new/ensure --sandboxed
        self.resume_session: str | None = None  # sessions new --resume-session ID
        self.agent_sessions = False  # sessions list --agent-sessions
        self.cursor: str | None = None  # sessions list --agent-sessions --cursor C
        self.discard = False  # sessions close --discard
        self.mcp_bridge = False  # --mcp-bridge: hand agents `tether mcp`
        self.mcp_config: str | None = None  # --mcp-config FILE: MCP servers for agents
        self.subcommand: str | None = None
        self.implicit = False  # an implicit prompt: no command word was typed
        self.words: list[str] = []
        # acpx's session options and output flags (docs/acpx-parity.md)
        self.auth_policy: str | None = None
        self.suppress_reads = False
        self.model: str | None = None
        self.allowed_tools: list[str] | None = None
        self.max_turns: int | None = None
        self.system_prompt: str | None = None
        self.append_system_prompt: str | None = None
        self.prompt_retries: int | None = None
        self.config_options: list[tuple[str, str]] = []  # exec --config-option K=V
        self.filter_cwd: str | None = None  # sessions list --filter-cwd
        self.server: str | None = None  # --server URL: a remote Tether (or TETHER_SERVER)
        self.token_file: str | None = None  # --token-file PATH: its bearer token
        self.to_host: str | None = None  # sessions rehome --to-host HOST
        self.replay = False  # sessions rehome --replay

    def session_options(self) -> dict[str, object]:
        """The session options given as flags (``tether.acp.session_options``)."""
        given = {
            "model": self.model,
            "allowedTools": self.allowed_tools,
            "maxTurns": self.max_turns,
            "systemPrompt": self.system_prompt,
            "appendSystemPrompt": self.append_system_prompt,
        }
        return {k: v for k, v in given.items() if v is not None}


def _is_option(token: str) -> bool:
    """``-x``/``--xy`` are options; ``-`` (stdin) and negative numbers are words."""
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def parse(argv: list[str], is_agent_name: object = None) -> Invocation:
    """Parse ``argv`` (without the program name) into an :class:`Invocation`.

    Raises:
        UsageError: an unknown option, an option the command does not take, a missing or
            malformed value, or no command at all.
    """
    inv = Invocation(command="")
    positional, given, unknown, literal_from = _scan(inv, argv)
    rest = _command(inv, positional, is_agent_name, unknown)
    if inv.implicit and not unknown:
        near_command(inv, positional, len(positional) if literal_from is None else literal_from)
    if inv.agent and inv.agent_cmd:
        raise UsageError("--agent cannot be combined with a positional agent name")
    if inv.permissions and inv.permission_policy:
        raise UsageError(
            f"--{inv.permissions} and --permission-policy are mutually exclusive"
            " (a mode is a preset policy)"
        )
    rest = _subcommand(inv, rest)
    check_options(inv, [_SAME.get(flag, flag) for flag, _ in given], unknown)
    for flag, value in given:
        apply_command(inv, flag, value)
    named = inv.command == "sessions" and inv.subcommand in _NAMES_A_SESSION
    if rest and named and not inv.session and not inv.key:
        inv.session = rest[0]
        rest = rest[1:]
    if inv.key is not None and inv.session is not None:
        raise UsageError("--key and a session name (-s) name the session twice: give one")
    inv.words = rest
    return inv


# The `sessions` subcommands whose first word is the session's name.
_NAMES_A_SESSION = (
    "show",
    "close",
    "terminate",
    "history",
    "new",
    "ensure",
    "watch",
    "read",
    "export",
    "rehome",
)


def _scan(
    inv: Invocation, argv: list[str]
) -> tuple[list[str], list[tuple[str, str | None]], list[str], int | None]:
    """One pass over ``argv``: global options applied at once; the positional words, the
    command options (applied once the command is known), the unknown options, and where
    the words after ``--`` begin."""
    positional: list[str] = []
    given: list[tuple[str, str | None]] = []
    unknown: list[str] = []
    i = 0
    literal = False
    literal_from: int | None = None  # positional words from here on came after `--`
    while i < len(argv):
        token = argv[i]
        if literal:
            positional.append(token)
            i += 1
            continue
        if token == "--":
            literal = True
            literal_from = len(positional)
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
        value: str | None = None
        if _arity(name):
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
            apply_global(inv, name, value)
        else:
            given.append((name, value))
        i += 1
    return positional, given, unknown, literal_from


def _subcommand(inv: Invocation, rest: list[str]) -> list[str]:
    """``sessions``' and ``config``'s subcommand (``list``, ``show`` when none is given)."""
    if inv.command == "sessions":
        if rest and rest[0] in SESSION_SUBCOMMANDS:
            inv.subcommand = rest[0]
            return rest[1:]
        if rest:
            refused(f"sessions {rest[0]}")
            raise UsageError(
                f"unknown sessions command {rest[0]!r}: use "
                "new|ensure|list|show|close|terminate|history|watch|read|export|prune|fork|rehome"
            )
        inv.subcommand = "list"
    if inv.command == "config":
        if rest and rest[0] in CONFIG_SUBCOMMANDS:
            inv.subcommand = rest[0]
            return rest[1:]
        if rest:
            raise UsageError(f"unknown config command {rest[0]!r}: use show or init")
        inv.subcommand = "show"
    return rest


def _command(
    inv: Invocation, positional: list[str], is_agent_name: object, unknown: list[str]
) -> list[str]:
    """Find the agent and the command among the positional words; return the rest."""
    for word in positional[:2]:
        refused(word)  # `compare`, `flow`: acpx commands Tether does not have
        if word in COMMANDS:
            break
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
        inv.implicit = True
        if callable(is_agent_name) and is_agent_name(positional[0], inv.cwd):
            inv.agent = positional[0]
            return positional[1:]
        return positional
    if unknown:
        raise UsageError(f"unknown option {unknown[0]}{nearest(unknown[0], sorted(_GLOBAL_FLAGS))}")
    raise UsageError("no command given; try `tether --help`")
