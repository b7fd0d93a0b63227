"""Where each option of the command line lands on the :class:`~tether.cli._parse.Invocation`:
global options (``apply_global``) and command options (``apply_command``), each checked
as it is applied (a bad value is a usage error, exit 2)."""

from __future__ import annotations

from tether.cli._grammar import _SAME
from tether.errors import UsageError

TYPE_CHECKING = False  # typing (and re, enum) cost a CLI call ms; mypy reads the name
if TYPE_CHECKING:
    from tether.cli._parse import Invocation


def _number(flag: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"{flag} expects a number of seconds, got {value!r}") from None
    if number != number:  # NaN
        raise UsageError(f"{flag} expects a number of seconds, got {value!r}")
    if number < 0:
        raise UsageError(f"{flag} must not be negative")
    return number


def _count(flag: str, value: str, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"{flag} expects a whole number, got {value!r}") from None
    if number < minimum:
        raise UsageError(f"{flag} must be at least {minimum}")
    return number


def _apply_session_option(inv: Invocation, flag: str, value: str) -> None:
    """acpx's session options: --model, --allowed-tools, --max-turns, the system prompt."""
    if flag == "--model":
        if not value.strip():
            raise UsageError("--model needs a model id")
        inv.model = value
    elif flag == "--allowed-tools":
        inv.allowed_tools = [t.strip() for t in value.split(",") if t.strip()]
    elif flag == "--max-turns":
        inv.max_turns = _count(flag, value, 1)
    elif not value.strip():
        raise UsageError(f"{flag} needs text")
    elif flag == "--system-prompt":
        if inv.append_system_prompt is not None:
            raise UsageError("--system-prompt and --append-system-prompt are mutually exclusive")
        inv.system_prompt = value
    else:
        if inv.system_prompt is not None:
            raise UsageError("--system-prompt and --append-system-prompt are mutually exclusive")
        inv.append_system_prompt = value


def _set_by_table(
    inv: Invocation, flag: str, value: str | None, tables: tuple[dict[str, str], ...]
) -> bool:
    """Set the field an option of ``tables`` (switches, values, non-empty values) names;
    False: it is none of theirs."""
    switches, values, non_empty = tables
    if flag in switches:
        setattr(inv, switches[flag], True)
    elif flag in values:
        setattr(inv, values[flag], value)
    elif flag in non_empty:
        if not value:
            raise UsageError(f"{flag} needs a non-empty value")
        setattr(inv, non_empty[flag], value)
    else:
        return False
    return True


def apply_global(inv: Invocation, flag: str, value: str | None) -> None:
    if _set_by_table(inv, flag, value, _GLOBAL_TABLES):
        return
    if flag in _GLOBAL_CHOICES:
        field, choices = _GLOBAL_CHOICES[flag]
        if value not in choices:
            raise UsageError(f"{flag} takes {', '.join(choices[:-1])} or {choices[-1]}")
        setattr(inv, field, value)
    elif flag in ("--model", "--allowed-tools", "--max-turns") or flag.endswith("system-prompt"):
        _apply_session_option(inv, flag, value or "")
    elif flag == "--prompt-retries":
        inv.prompt_retries = _count(flag, value or "", 0)
    elif flag in ("--approve-all", "--approve-reads", "--deny-all"):
        mode = flag[2:]
        if inv.permissions and inv.permissions != mode:
            raise UsageError("--approve-all, --approve-reads and --deny-all are mutually exclusive")
        inv.permissions = mode
    elif flag == "--timeout":
        inv.timeout = _number(flag, value or "")
        if inv.timeout == 0:  # as `timeout = 0` in the config: no time at all is no timeout
            raise UsageError("--timeout must be more than 0 seconds (leave it out for none)")
    elif flag == "--ttl":
        inv.ttl = _number(flag, value or "")


# Global options that only set a field: to True, to their value, to a value that must
# not be empty, or to one of a few words.
_GLOBAL_SWITCHES = {
    "--suppress-reads": "suppress_reads",
    "--no-terminal": "no_terminal",
    "--verbose": "verbose",
    "--json-strict": "json_strict",
    "--no-fs": "no_fs",
    "--mcp-bridge": "mcp_bridge",
}
_GLOBAL_VALUES = {
    "--permission-policy": "permission_policy",
    "--policy": "permission_policy",
    "--agent": "agent_cmd",
    "--cwd": "cwd",
    "--mcp-config": "mcp_config",
}
_GLOBAL_NON_EMPTY = {"--server": "server", "--token-file": "token_file"}
_GLOBAL_TABLES = (_GLOBAL_SWITCHES, _GLOBAL_VALUES, _GLOBAL_NON_EMPTY)
_GLOBAL_CHOICES = {
    "--auth-policy": ("auth_policy", ("skip", "fail")),
    "--non-interactive-permissions": ("non_interactive", ("deny", "fail")),
    "--format": ("format", ("text", "json", "quiet")),
}

# Command options that only set a field: to True, or to their value.
_SWITCHES = {
    "--no-wait": "no_wait",
    "--dry-run": "dry_run",
    "--all": "all",
    "--tree": "tree",
    "--sandboxed": "sandboxed",
    "--no-follow": "no_follow",
    "--closed": "closed",
    "--all-agents": "all_agents",
    "--control": "control",
    "--repair": "repair",
    "--close-on-exit": "close_on_exit",
    "--router": "router",
    "--drain": "drain",
    "--agent-sessions": "agent_sessions",
    "--discard": "discard",
    "--replay": "replay",
}
_VALUES = {
    "-s": "session",
    "-f": "file",
    "--request": "request",
    "-o": "output_file",
    "--output": "output_file",
    "--older-than": "older_than",
    "--filter-cwd": "filter_cwd",
    "--resume-session": "resume_session",
    "--cursor": "cursor",
}
# Options whose value must not be empty, each landing on its field.
_NON_EMPTY = {
    "--fleet-index": "fleet_index",
    "--host-id": "host_id",
    "--advertise": "advertise",
    "--fleet-token-file": "fleet_token_file",
    "--tls-cert": "tls_cert",
    "--tls-key": "tls_key",
    "--fleet-ca": "fleet_ca",
    "--host": "host",
    "--unix": "unix",
    "--token": "token",
}
_COMMAND_TABLES = (_SWITCHES, _VALUES, _NON_EMPTY)


def apply_command(inv: Invocation, flag: str, value: str | None) -> None:
    flag = _SAME.get(flag, flag)
    if _set_by_table(inv, flag, value, _COMMAND_TABLES):
        return
    if flag == "--key":
        if not value:
            raise UsageError("--key needs a session key (or a unique prefix of one)")
        inv.key = value
    elif flag == "--to-host":
        if not value:
            raise UsageError("--to-host needs a host id")
        inv.to_host = value
    elif flag == "--allowed-host":
        if not value:
            raise UsageError("--allowed-host needs a non-empty value")
        inv.allowed_hosts.append(value)
    elif flag in ("--config-option", "--label"):
        key, eq, raw = (value or "").partition("=")
        if not eq or not key.strip():
            raise UsageError(f"{flag} expects KEY=VALUE, got {value!r}")
        (inv.config_options if flag == "--config-option" else inv.labels).append((key.strip(), raw))
    else:
        _apply_number(inv, flag, value)


def _apply_number(inv: Invocation, flag: str, value: str | None) -> None:
    """The command options that take a number."""
    if flag in ("--from", "--tail"):
        try:
            number = int(value or "")
        except ValueError:
            raise UsageError(f"{flag} expects a whole number") from None
        if number < (1 if flag == "--from" else 0):
            raise UsageError(f"{flag} must be {'at least 1' if flag == '--from' else '0 or more'}")
        if flag == "--from":
            inv.from_seq = number
        else:
            inv.tail = number
    elif flag == "--drain-grace":
        try:
            grace = float(value or "")
        except ValueError:
            raise UsageError(f"--drain-grace expects a number of seconds, got {value!r}") from None
        if not 0 <= grace < float("inf"):
            raise UsageError("--drain-grace must be a number of seconds >= 0")
        inv.drain_grace = grace
    elif flag == "--port":
        try:
            port = int(value or "")
        except ValueError:
            raise UsageError(f"--port expects a whole number, got {value!r}") from None
        if not 0 <= port <= 65535:
            raise UsageError("--port must be between 0 and 65535")
        inv.port = port
    elif flag == "--limit":
        inv.limit = _count(flag, value or "", 1)
