"""Help texts: the global ``--help`` and each command's own, from the parser's tables.

Nothing imported beyond the grammar's tables (not the parser, not the errors): ``--help`` is a thin
path (tests/integration/test_import_budget.py).
"""

from __future__ import annotations

from tether.cli._grammar import (
    _COMMAND_FLAGS,
    _COMMAND_SPECS,
    COMMANDS,
    CONFIG_SUBCOMMANDS,
    SESSION_SUBCOMMANDS,
    _arity,
)

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
  status [-s NAME]                     owner health, pids, queue, lease state, open questions
  answer [-s NAME] ID allow|always|deny|deny-always|OPTION_ID
                                       answer a question the agent asked (first answer wins)
  sessions new|ensure [-s NAME] [--sandboxed] [--resume-session ID]
                                       create (new: fresh) or reuse a session; starts its owner
  sessions fork [-s NAME] NEW_NAME     a new warm session continuing NAME's conversation
  sessions list|show|history [NAME]    inspect sessions (list --agent-sessions: the agent's own)
  sessions watch [NAME] [--control]    follow the journal live (--control: answer questions)
  sessions close [NAME] [--discard]    end the session and prove its process tree gone
  sessions terminate [NAME]            end it now: no new turn, no waiting on the agent
  sessions rehome [ID] [--to-host H] [--replay]
                                       move a lost host's session (a fleet router: --server)
  logout                               sign the agent out (ACP logout)
  acp [--close-on-exit]                speak ACP as an agent over stdio (any ACP client)
  reap [--dry-run]                     reconcile leases: reap verified orphans of this instance
  doctor [--repair]                    check the state directory; repair a corrupt database
  metrics                              counters, latencies and gauges (text, or --format json)
  config show|init                     the merged configuration and its files (secrets masked),
                                       or write the user config template
  serve [--host H] [--port P | --unix PATH] [--token T]
                                       HTTP gateway: JSON API, SSE event streams, /ui
  mcp [--session-key KEY]              serve the session tools over MCP (stdio)

  `tether <command> --help` lists a command's own options. A command on an existing
  session takes `--key KEY` (a session key, or a unique prefix) instead of `-s NAME`.

agents: claude, codex, gemini, opencode, cursor, copilot, qwen, kimi, ..., mock (bundled),
        a name from config, or any command (`--agent "node agent.js"`)

global options:
  --agent CMD                          raw agent command (split like a shell, never run by one)
  --cwd DIR                            working directory (default: current)
  --approve-all | --approve-reads | --deny-all
                                       permission mode (default: approve-reads)
  --permission-policy FILE             permission rules by tool kind and title (TOML);
                                       --policy is acpx's alias
  --auth-policy skip|fail              auth methods advertised, no credential: go on, or fail
  --non-interactive-permissions deny|fail
                                       undecided permission requests: reject, or fail (exit 5)
  --format text|json|quiet             output format (default: text)
  --json-strict                        with --format json: JSON only (no text on stderr)
  --timeout SECONDS                    give up on a prompt after this long (exit 3)
  --ttl SECONDS                        owner idle TTL (default 3600; 0 = forever)
  --no-fs                              do not offer file-system access to the agent
  --no-terminal                        do not offer terminals (terminal/*) to the agent
  --model ID                           select the agent's model (its model config option)
  --allowed-tools A,B                  the tools the agent may use ("" = none; claude only)
  --max-turns N                        the agent's turn limit per prompt (claude only)
  --system-prompt TEXT                 replace the agent's system prompt
  --append-system-prompt TEXT          append to the agent's system prompt
  --prompt-retries N                   retry a prompt on a transient agent error (default 0)
  --suppress-reads                     hide file contents the agent read from the output
  --mcp-bridge                         hand agents `tether mcp` (delegate to other sessions)
  --mcp-config FILE                    MCP servers for agents (JSON: {"mcpServers": ...})
  --server URL                         run the command on a remote Tether (`tether serve`
                                       or a fleet router): http://, https://, unix:/PATH;
                                       or TETHER_SERVER
  --token-file PATH                    its bearer token (or TETHER_TOKEN)
  --verbose                            debug logs on stderr
  --version, --help

options after `--` are text, never options (`tether mock prompt -- --not-a-flag`).

exit codes: 0 ok, 1 agent/protocol/runtime error, 2 usage, 3 timeout, 4 no session,
            5 permission denied, 6 rate limited by the agent's provider, 7 the remote
            Tether (--server) unreachable (retryable), 130 interrupted, 141 stdout closed
            by its reader (`| head`)
"""


def _command_help(spec: str) -> str:
    args, what, options = _COMMAND_SPECS[spec]
    lines = [
        f"tether {spec}: {what}",
        "",
        f"usage: tether [global options] [<agent>] {spec} {args}".rstrip(),
    ]
    if spec in ("sessions", "config"):
        lines += ["", "subcommands:"]
        subs: tuple[str, ...] = ("show", "init") if spec == "config" else ("new", "ensure")
        if spec == "sessions":
            subs += ("fork", "list", "show", "history", "read", "watch", "export", "prune")
            subs += ("close", "terminate", "rehome")
        for sub in subs:
            sub_args, sub_what, _ = _COMMAND_SPECS[f"{spec} {sub}"]
            left = f"{sub} {sub_args}"
            if len(left) > 36:  # a long usage gets its own line; the text goes below it
                lines += [f"  {left}", f"  {'':36} {sub_what}"]
            else:
                lines.append(f"  {left.ljust(36)} {sub_what}")
    shown = [_COMMAND_FLAGS[flag] for flag in options if _COMMAND_FLAGS[flag][1]]
    if shown:
        lines += ["", "options:"]
        lines += [f"  {usage.ljust(36)} {text}" for _, usage, text in shown]
    lines += ["", "global options (`tether --help`) are accepted too."]
    return "\n".join(lines) + "\n"


MCP_HELP = """\
tether mcp: serve Tether's session tools over MCP on stdin/stdout

usage: tether mcp [--session-key KEY]

An MCP server for agents (`--mcp-bridge` hands it to a session's agent): the tools
sessions_list, sessions_spawn, sessions_send, session_status and sessions_history,
limited to what the calling session may see (README: sessions owned by sessions).

options:
  --session-key KEY                    the session this server speaks for (a claim,
                                       proved against the kernel or clamped to `self`)
"""


def words(argv: list[str]) -> list[str]:
    """The words of ``argv`` that are neither options nor their values (up to ``--``)."""
    flags = argv[: argv.index("--")] if "--" in argv else argv
    out: list[str] = []
    skip = 0
    for token in flags:
        if skip:
            skip -= 1
        elif not token.startswith("-"):
            out.append(token)
        elif "=" not in token:
            skip = _arity(token)
    return out


def help_for(argv: list[str]) -> str | None:
    """The help text ``argv`` asks for (``--help``, ``-h``, ``help [COMMAND]``), or None.

    ``tether <command> --help`` gets that command's own options; anything else the
    global help. Never raises: asking for help is not a usage error.
    """
    flags = argv[: argv.index("--")] if "--" in argv else argv
    given = words(argv)
    if given[:1] == ["help"]:
        given = given[1:]
    elif argv and "--help" not in flags and "-h" not in flags:
        return None
    if given[:1] == ["mcp"]:
        return MCP_HELP  # its own small grammar (tether.mcp.cli)
    spec: str | None = None
    for index, word in enumerate(given[:2]):
        if word in COMMANDS:
            spec = word
            following = given[index + 1 : index + 2]
            if word == "sessions" and following and following[0] in SESSION_SUBCOMMANDS:
                spec = f"sessions {following[0]}"
            elif word == "config" and following and following[0] in CONFIG_SUBCOMMANDS:
                spec = f"config {following[0]}"
            break
    return _command_help(spec) if spec else HELP
