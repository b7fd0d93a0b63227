"""The grammar's tables: commands, their options, what each does. No imports at all.

Shared by the parser (``_parse``) and the help texts (``_help``); ``--help`` reads them
without importing the parser or the error tree (a thin path).
"""

from __future__ import annotations

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
        "acp",
        "serve",
        "answer",
        "metrics",
        "logout",
    }
)
SESSION_SUBCOMMANDS = frozenset(
    {
        "new",
        "ensure",
        "list",
        "show",
        "close",
        "terminate",
        "history",
        "watch",
        "read",
        "export",
        "prune",
        "fork",
        "rehome",
    }
)
CONFIG_SUBCOMMANDS = frozenset({"show", "init"})

# acpx 0.19.1 commands and options Tether refuses, each with the way Tether does it
# instead (docs/acpx-parity.md lists them all; a test runs every row).
REFUSED = {
    "compare": "`compare` is not supported: run `tether <agent> exec TEXT` once per agent",
    "flow": "`flow` is not supported: script `tether prompt` calls (exit codes say what happened)",
    "sessions import": (
        "`sessions import` is not supported: Tether cannot restore a session from an archive;"
        " `sessions export` writes the journal as NDJSON, to read with `sessions read`"
    ),
    "sessions watch --cursor": "use `sessions watch --from SEQ` (a journal entry's seq)",
    "sessions prune --before": "use `sessions prune --older-than DURATION` (7d, 12h)",
    "sessions prune --include-history": (
        "use `sessions prune --closed` (closed sessions go with their journals)"
    ),
}

# global flag -> number of values it takes
_GLOBAL_FLAGS = {
    "--agent": 1,
    "--cwd": 1,
    "--approve-all": 0,
    "--approve-reads": 0,
    "--deny-all": 0,
    "--non-interactive-permissions": 1,
    "--permission-policy": 1,
    "--format": 1,
    "--timeout": 1,
    "--ttl": 1,
    "--verbose": 0,
    "--json-strict": 0,
    "--no-fs": 0,
    "--no-terminal": 0,
    "--mcp-bridge": 0,
    "--mcp-config": 1,
    "--policy": 1,  # acpx's alias of --permission-policy
    "--auth-policy": 1,
    "--suppress-reads": 0,
    "--model": 1,
    "--allowed-tools": 1,
    "--max-turns": 1,
    "--system-prompt": 1,
    "--append-system-prompt": 1,
    "--prompt-retries": 1,
    "--server": 1,
    "--token-file": 1,
}
# command flag -> (number of values, how --help shows it, what it does)
_COMMAND_FLAGS = {
    "-s": (1, "-s, --session NAME", "the session's name (default: the unnamed session)"),
    "--key": (
        1,
        "--key KEY",
        "address the session by its key (or a unique prefix; `sessions list --format json`)",
    ),
    "--session": (1, "", ""),
    "--name": (1, "", ""),
    "--no-wait": (0, "--no-wait", "return once the owner queued the prompt: [queued] ID"),
    "-f": (1, "-f, --file FILE|-", "read the prompt from FILE (- is stdin)"),
    "--file": (1, "", ""),
    "--dry-run": (0, "--dry-run", "say what it would do; change and signal nothing"),
    "--all-agents": (0, "--all-agents", "every agent's sessions (default: the agent named)"),
    "--limit": (1, "--limit N", "show the last N turns (default 20)"),
    "--all": (0, "--all", "include closed sessions"),
    "--tree": (0, "--tree", "draw the ownership tree (who spawned whom)"),
    "--request": (1, "--request ID", "remove this queued request instead"),
    "--repair": (
        0,
        "--repair",
        "move a corrupt state database aside (and start a fresh one); set damaged journal"
        " chunks aside",
    ),
    "--from": (1, "--from SEQ", "start at this journal entry (replay, then live)"),
    "--tail": (1, "--tail N", "start N entries (watch) or N turns (read) before the end"),
    "--no-follow": (0, "--no-follow", "stop at the last stored entry"),
    "-o": (1, "-o, --output FILE", "write to FILE (atomically) instead of stdout"),
    "--output": (1, "", ""),
    "--older-than": (1, "--older-than DURATION", "drop journal entries older than this (7d, 12h)"),
    "--closed": (0, "--closed", "remove closed sessions with their journals and files"),
    "--close-on-exit": (
        0,
        "--close-on-exit",
        "close the sessions this client used when it disconnects (default: keep them warm)",
    ),
    "--host": (1, "--host HOST", "address to listen on (default 127.0.0.1)"),
    "--port": (1, "--port PORT", "TCP port (default 8787; 0 picks a free one)"),
    "--unix": (1, "--unix PATH", "listen on a Unix socket (0600) instead of TCP"),
    "--token": (1, "--token TOKEN", "the bearer token (default: generated into TETHER_HOME)"),
    "--router": (0, "--router", "run a fleet router (needs --fleet-index): routes by session id"),
    "--fleet-index": (
        1,
        "--fleet-index DSN",
        "join a fleet: its PostgreSQL index (or TETHER_FLEET_INDEX)",
    ),
    "--host-id": (1, "--host-id ID", "this host's id in the fleet (default: the node name)"),
    "--advertise": (1, "--advertise URL", "the URL routers reach this host at"),
    "--label": (1, "--label KEY=VALUE", "a placement label of this host (repeatable)"),
    "--fleet-token-file": (
        1,
        "--fleet-token-file PATH",
        "the credential shared by routers and hosts (or TETHER_FLEET_TOKEN)",
    ),
    "--tls-cert": (1, "--tls-cert FILE", "serve HTTPS with this certificate (PEM; serve.tlsCert)"),
    "--tls-key": (1, "--tls-key FILE", "the private key of --tls-cert (PEM; serve.tlsKey)"),
    "--fleet-ca": (
        1,
        "--fleet-ca FILE",
        "a router trusts hosts' https:// certificates signed by this CA (PEM; serve.fleetCa)",
    ),
    "--drain": (0, "--drain", "drain the fleet host serving this TETHER_HOME (as SIGTERM does)"),
    "--drain-grace": (
        1,
        "--drain-grace SECONDS",
        "a fleet host's drain: how long running turns may finish (default 30)",
    ),
    "--allowed-host": (
        1,
        "--allowed-host HOST",
        "also answer this Host header (NAME, NAME:PORT or *; repeatable)",
    ),
    "--control": (0, "--control", "answer the agent's questions from here (stdin)"),
    "--sandboxed": (0, "--sandboxed", "its agent reaches only its own tree (whatever the config)"),
    # ACP's newer methods (issue 14)
    "--resume-session": (
        1,
        "--resume-session ID",
        "attach to the agent's existing session ID (see sessions list --agent-sessions)",
    ),
    "--agent-sessions": (
        0,
        "--agent-sessions",
        "list the agent's own sessions of this --cwd (session/list; --all: every directory)",
    ),
    "--cursor": (1, "--cursor C", "with --agent-sessions: the page after nextCursor C"),
    "--discard": (
        0,
        "--discard",
        "the agent also deletes the conversation (session/delete, where offered)",
    ),
    "--config-option": (
        1,
        "--config-option KEY=VALUE",
        "set a session config option before the prompt (repeatable)",
    ),
    "--filter-cwd": (1, "--filter-cwd DIR", "only sessions whose working directory is DIR"),
    "--local": (0, "--local", "Tether's own records (the default; acpx's flag)"),
    "--to-host": (1, "--to-host HOST", "the host to move it to (default: placed like a new one)"),
    "--replay": (0, "--replay", "send the recorded conversation to the new agent as context"),
}
_SAME = {
    "--session": "-s",
    "--name": "-s",
    "--file": "-f",
    "--output": "-o",
}  # spellings of one option

_S = ("-s", "--session", "--name")
_F = ("-f", "--file")
_SK = (*_S, "--key")  # commands on an existing session: by name, or by key
# "command" or "sessions SUB" -> (arguments, what it does, the command options it takes)
_COMMAND_SPECS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "exec": (
        "[-f FILE|-] [--config-option KEY=VALUE]... [TEXT...]",
        "one shot: start the agent, one prompt, tear it down",
        (*_F, "--config-option"),
    ),
    "prompt": (
        "[-s NAME | --key KEY] [--no-wait] [-f FILE|-] [TEXT...]",
        "prompt a saved session through its warm owner (never creates one: exit 4)",
        (*_SK, "--no-wait", *_F),
    ),
    "cancel": (
        "[-s NAME | --key KEY] [--request ID]",
        "cancel the session's running turn (the session stays), or remove a queued request",
        (*_SK, "--request"),
    ),
    "set-mode": ("[-s NAME | --key KEY] MODE", "set the session's mode (session/set_mode)", _SK),
    "set": (
        "[-s NAME | --key KEY] KEY VALUE",
        "set a session config option (session/set_config_option; `set model X` too)",
        _SK,
    ),
    "status": (
        "[-s NAME | --key KEY]",
        "owner health, pids, queue, current turn, lease state, open questions",
        _SK,
    ),
    "answer": (
        "[-s NAME | --key KEY] ID allow|always|deny|deny-always|OPTION_ID",
        "answer a question the agent asked (elicitations: accept [JSON]|decline|cancel)",
        _SK,
    ),
    "sessions": (
        "new|ensure|fork|list|show|history|read|watch|export|prune|close|terminate [NAME]",
        "create, inspect or end sessions (default: list); `tether sessions SUB --help`",
        (),
    ),
    "sessions new": (
        "[-s NAME | NAME] [--sandboxed] [--resume-session ID]",
        "create a fresh session (closes one of that name)",
        (*_S, "--sandboxed", "--resume-session"),
    ),
    "sessions ensure": (
        "[-s NAME | NAME] [--sandboxed] [--resume-session ID]",
        "reuse the session, or create it; start its owner",
        (*_S, "--sandboxed", "--resume-session"),
    ),
    "sessions fork": (
        "[-s NAME] NEW_NAME",
        "a new warm session continuing NAME's conversation (session/fork)",
        _S,
    ),
    "sessions list": (
        "[--all] [--tree] [--filter-cwd DIR] [--agent-sessions [--cursor C]]",
        "list the sessions you may see (--agent-sessions: the agent's own)",
        ("--all", "--tree", "--filter-cwd", "--local", "--agent-sessions", "--cursor"),
    ),
    "sessions show": ("[-s NAME | NAME | --key KEY]", "one session's record", _SK),
    "sessions history": (
        "[-s NAME | NAME | --key KEY] [--limit N]",
        "one line per turn: request id, start, duration, stop reason, preview",
        (*_SK, "--limit"),
    ),
    "sessions read": (
        "[-s NAME | NAME | --key KEY] [--tail N]",
        "the conversation: prompts, answers, tool calls, stop reasons (last N turns)",
        (*_SK, "--tail"),
    ),
    "sessions watch": (
        "[-s NAME | NAME | --key KEY] [--from SEQ | --tail N] [--no-follow] [--control]",
        "follow the session's journal live (replay first with --from/--tail)",
        (*_SK, "--from", "--tail", "--no-follow", "--control"),
    ),
    "sessions export": (
        "[-s NAME | NAME | --key KEY] [-o FILE]",
        "the whole journal as NDJSON, one entry per line",
        (*_SK, "-o", "--output"),
    ),
    "sessions prune": (
        "[--older-than DURATION] [--closed] [--all-agents] [--dry-run]",
        "drop the agent's old journal entries and events; remove its closed sessions",
        ("--older-than", "--closed", "--all-agents", "--dry-run"),
    ),
    "sessions rehome": (
        "[ID | -s NAME | --key KEY] [--to-host HOST] [--replay]",
        "move a session whose host is lost to another host (through a fleet router: --server)",
        (*_SK, "--to-host", "--replay"),
    ),
    "sessions close": (
        "[-s NAME | NAME | --key KEY] [--discard]",
        "end the session and prove its process tree gone",
        (*_SK, "--discard"),
    ),
    "sessions terminate": (
        "[-s NAME | NAME | --key KEY]",
        "end the session now: no new turn, no waiting on the agent; idempotent",
        _SK,
    ),
    "acp": (
        "[--close-on-exit]",
        "speak ACP as an agent over stdio: any ACP client gets warm Tether sessions",
        ("--close-on-exit",),
    ),
    "logout": ("", "sign the agent out (ACP logout, where the agent offers it)", ()),
    "reap": (
        "[--dry-run]",
        "reconcile leases: reap verified orphans of this instance",
        ("--dry-run",),
    ),
    "config": ("show|init", "the configuration: show it (default), or write a template", ()),
    "config show": ("", "the merged configuration, the files it came from, secrets masked", ()),
    "config init": ("", "write the user config template (only when there is none)", ()),
    "serve": (
        "[--host H] [--port P | --unix PATH] [--token T] [--allowed-host HOST]..."
        " [--tls-cert FILE --tls-key FILE]"
        " [--fleet-index DSN [--router [--fleet-ca FILE] | --host-id ID --advertise URL"
        " --label K=V...] [--fleet-token-file PATH] [--drain-grace S]] | serve --drain",
        "the HTTP gateway: JSON API, live event streams (SSE), dashboard at /ui",
        (
            "--host",
            "--port",
            "--unix",
            "--token",
            "--allowed-host",
            "--router",
            "--fleet-index",
            "--host-id",
            "--advertise",
            "--label",
            "--fleet-token-file",
            "--tls-cert",
            "--tls-key",
            "--fleet-ca",
            "--drain-grace",
            "--drain",
        ),
    ),
    "metrics": ("", "counters, latencies and gauges (text, or --format json)", ()),
    "doctor": (
        "[--repair]",
        "check the state directory (database, journal, schema, permissions, stale sockets)",
        ("--repair",),
    ),
}


def _arity(flag: str) -> int:
    if flag in _GLOBAL_FLAGS:
        return _GLOBAL_FLAGS[flag]
    return _COMMAND_FLAGS[flag][0] if flag in _COMMAND_FLAGS else 0
