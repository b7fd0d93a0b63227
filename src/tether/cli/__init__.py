"""The ``tether`` command line: acpx's grammar, flags and exit codes.

The thin paths -- ``--version``, ``--help`` and ``prompt``/``cancel``/``status``
against a live owner -- import no asyncio, no sqlite3 and no pydantic: each command
module is imported only when its command runs, and those three talk to the owner with
the blocking, standard-library IPC client. A test runs ``python -X importtime`` to keep
it that way.
"""

from __future__ import annotations

import os
import sys

from tether._version import __version__

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    # A subcommand that is another door: `serve`/`acp` take the Context, `mcp` its argv.
    Doors = dict[str, Callable[[Any], int]]


class Context:
    """Everything a command needs, resolved from flags, config and the environment.

    A plain class rather than a dataclass: ``dataclasses`` imports ``inspect`` (~10 ms).
    """

    def __init__(
        self,
        *,
        inv: Any,
        config: dict[str, Any],
        cwd: str,
        agent_argv: list[str],
        agent_label: str,
        agent_scope: str,
        permissions: str,
        non_interactive: str,
        fmt: str,
        timeout: float | None,
        ttl: float,
        output: Any,
    ) -> None:
        self.inv = inv  # _parse.Invocation
        self.config = config
        self.cwd = cwd
        self.agent_argv = agent_argv
        self.agent_label = agent_label
        self.agent_scope = agent_scope
        self.permissions = permissions
        self.non_interactive = non_interactive
        self.fmt = fmt
        self.timeout = timeout
        self.ttl = ttl
        self.output = output  # output.Output
        self.auth_policy = "skip"  # --auth-policy / authPolicy
        self.prompt_retries = 0  # --prompt-retries / promptRetries
        self.resolved_key: str | None = None  # --key, once looked up
        self.server: str | None = None  # --server / TETHER_SERVER: run on a remote Tether


def _read_prompt(inv: Any) -> str:
    if inv.file:
        if inv.file == "-":
            return sys.stdin.read()
        try:
            with open(inv.file, encoding="utf-8") as f:
                return f.read()
        except OSError as exc:
            from tether.errors import UsageError

            raise UsageError(f"cannot read {inv.file}: {exc.strerror or exc}") from exc
    if inv.words:
        return " ".join(inv.words)
    if not sys.stdin.isatty():
        return sys.stdin.read()
    return ""


def _ignore(_message: str) -> None:
    """--json-strict: nothing but JSON, so config warnings are not shown."""


def _context(inv: Any) -> Context:
    from tether import agents, config
    from tether.cli._unicode import require_text_path
    from tether.cli.output import Output
    from tether.errors import UsageError

    server = remote_server(inv)
    cwd = os.path.expanduser(inv.cwd) if inv.cwd else os.getcwd()
    if os.path.isdir(cwd):
        cwd = os.path.realpath(cwd)
    elif server is None or not os.path.isabs(cwd):
        # A remote Tether's --cwd is a directory there: absolute, maybe not here.
        raise UsageError(f"--cwd {cwd} is not a directory")
    here = cwd if os.path.isdir(cwd) else os.getcwd()
    require_text_path(cwd)
    cfg = config.load(here, warn=_ignore if inv.json_strict else None)
    from tether.sessions import agent_scope

    if inv.agent_cmd:
        label = inv.agent_cmd
        argv = agents.resolve(inv.agent_cmd, {})
        named = False
    else:
        label = inv.agent or str(cfg.get("defaultAgent") or agents.DEFAULT_AGENT)
        argv = agents.resolve(label, cfg.get("agents"))
        named = agents.is_agent_name(label, cfg.get("agents"))
        if inv.agent and not named and server is None:  # a remote Tether knows its own
            raise _unknown_agent(inv.agent, cfg.get("agents"))
    if not argv:
        raise UsageError("empty agent command")
    fmt = inv.format or str(cfg.get("format") or "text")
    if inv.json_strict and fmt != "json":
        raise UsageError("--json-strict requires --format json")
    timeout = inv.timeout if inv.timeout is not None else cfg["timeout"]
    ttl = inv.ttl if inv.ttl is not None else float(cfg["ttl"])
    ctx = Context(
        inv=inv,
        config=cfg,
        cwd=cwd,
        agent_argv=argv,
        agent_label=label,
        agent_scope=agent_scope(label, argv, named=named),
        permissions=inv.permissions or str(cfg.get("defaultPermissions") or "approve-reads"),
        non_interactive=inv.non_interactive or str(cfg.get("nonInteractivePermissions") or "deny"),
        fmt=fmt,
        timeout=float(timeout) if timeout is not None else None,
        ttl=ttl,
        output=Output(
            fmt, verbose=inv.verbose, json_strict=inv.json_strict, suppress_reads=inv.suppress_reads
        ),
    )
    ctx.server = server
    ctx.auth_policy = inv.auth_policy or str(cfg.get("authPolicy") or "skip")
    retries = inv.prompt_retries
    ctx.prompt_retries = int(retries if retries is not None else cfg.get("promptRetries") or 0)
    return ctx


def remote_server(inv: Any) -> str | None:
    """The remote Tether the command runs on: ``--server``, else ``TETHER_SERVER``."""
    return inv.server or os.environ.get("TETHER_SERVER") or None


def _unknown_agent(word: str, configured: Any) -> Exception:
    """``tether nosuchagent sessions new``: a positional agent is a name, never a command."""
    import difflib

    from tether import agents
    from tether.errors import UsageError

    names = sorted({*agents.builtin_names(), *(configured or {})})
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.7)
    hint = f"did you mean `{close[0]}`? " if close else ""
    return UsageError(
        f"unknown agent {word!r}: {hint}an agent is a built-in name (`tether --help`), one"
        f" from your config ([agents.NAME]), or a raw command given as --agent CMD"
    )


def main(argv: list[str] | None = None, doors: Doors | None = None) -> int:
    """Run the CLI; returns the process exit code.

    Every failure ends here as one line (and an exit code): Tether's own errors as
    themselves, a known foreign one translated, anything else as :class:`InternalError`
    with its traceback written to a log file whose path the line names.

    ``doors``: the other doors that are subcommands of the ``tether`` program (``serve``,
    ``acp``, ``mcp``), handed in by :mod:`tether.program` -- the CLI imports no door.
    """
    doors = doors or {}
    args = sys.argv[1:] if argv is None else argv
    from tether.cli._unicode import escape_what_is_not_unicode, require_unicode

    escape_what_is_not_unicode()
    if args[:1] in (["--version"], ["-V"]):
        sys.stdout.write(f"tether {__version__}\n")
        return 0
    from tether.cli import _help

    help_text = _help.help_for(args)
    if help_text is not None:
        sys.stdout.write(help_text)
        return 0
    if args[:1] == ["mcp"]:  # its own small grammar: `tether mcp [--session-key KEY]`
        from tether.errors import TetherError

        try:
            return _door(doors, "mcp")(args[1:])
        except TetherError as exc:
            sys.stderr.write(_for_stderr(f"[error] {exc}\n"))
            return exc.exit_code
    from tether.cli import _parse
    from tether.errors import OutputClosed, TetherError

    ctx: Context | None = None
    try:
        require_unicode(args)
        inv = _parse.parse(args, _agent_name)
        if inv.verbose:
            from tether import _log

            _log.configure(level=10)
        if inv.command == "doctor":
            if remote_server(inv) is not None:
                from tether.cli._remote import local_only

                raise local_only("doctor")
            return _doctor(inv)  # needs no agent, and must run when the config is broken
        ctx = _context(inv)
        return _dispatch(ctx, doors)
    except OutputClosed as exc:
        return exc.exit_code  # the reader of our stdout left: quietly, like `yes | head -1`
    except TetherError as exc:
        _report(exc, ctx, args)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout closed under us (`| head`) on a path that writes it directly: exit
        # quietly, as shell tools do, with the status Output uses (see OutputClosed).
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return OutputClosed.exit_code
    except Exception as exc:  # the last line of defence: never a traceback
        from tether.cli._crash import unexpected

        error = unexpected(exc)
        _report(error, ctx, args)
        return error.exit_code


def _agent_name(token: str, cwd: str | None) -> bool:
    """Whether the first word of an implicit prompt names an agent: a built-in one, or
    one the configuration of ``cwd`` defines (``[agents.NAME]``). The configuration is
    read only for a word that is not built in."""
    from tether import agents, config
    from tether.errors import TetherError

    if agents.is_agent_name(token):
        return True
    directory = os.path.realpath(os.path.expanduser(cwd)) if cwd else os.getcwd()
    try:
        configured = config.load(directory, warn=lambda _message: None).get("agents")
    except TetherError:
        return False  # a broken file is reported, once, when the command loads it
    return token in (configured or {})


def _doctor(inv: Any) -> int:
    from tether.cli._doctor import run_doctor
    from tether.cli.output import Output

    cwd = os.path.realpath(os.path.expanduser(inv.cwd)) if inv.cwd else os.getcwd()
    return run_doctor(inv, Output(inv.format or "text", json_strict=inv.json_strict), cwd)


def _report(exc: Any, ctx: Context | None, args: list[str]) -> None:
    """Show ``exc`` in the command's format; JSON errors stay JSON even before parsing.

    A closed stdout or stderr (`| head`) cannot be told anything: that is not a second
    error, so it is swallowed here rather than shown as a traceback.
    """
    try:
        _show_error(exc, ctx, args)
    except OSError:
        pass


def _show_error(exc: Any, ctx: Context | None, args: list[str]) -> None:
    from tether.cli._render import add_hint

    add_hint(exc, os.environ, os.geteuid())  # a known cause ("IS_SANDBOX=yes as root")
    if ctx is not None:
        ctx.output.error(exc)
        return
    from tether.errors import ConfigError, UsageError

    fmt, strict = _requested_format(args)
    if fmt == "json":
        from tether.cli.output import Output

        Output("json", json_strict=strict).error(exc)
        return
    sys.stderr.write(_for_stderr(f"[error] {exc}\n"))
    if (
        isinstance(exc, UsageError)
        and not isinstance(exc, ConfigError)
        and "--help" not in str(exc)
    ):
        sys.stderr.write("try `tether --help`\n")


def _for_stderr(text: str) -> str:
    """``text`` as it may reach stderr: on a terminal, no control character raw."""
    from tether.names import escape

    try:
        tty = sys.stderr.isatty()
    except (OSError, ValueError):
        tty = False
    return escape(text, field=False) if tty else text


def _requested_format(args: list[str]) -> tuple[str | None, bool]:
    """``--format`` and ``--json-strict`` as typed, for errors raised before parsing ends."""
    flags = args[: args.index("--")] if "--" in args else args
    fmt: str | None = None
    for index, token in enumerate(flags):
        if token == "--format" and index + 1 < len(flags):
            fmt = flags[index + 1]
        elif token.startswith("--format="):
            fmt = token.partition("=")[2]
    return fmt, "--json-strict" in flags


def _door(doors: Doors, name: str) -> Callable[[Any], int]:
    door = doors.get(name)
    if door is None:
        from tether.errors import UsageError

        raise UsageError(f"`tether {name}` runs from the tether program (tether.program.main)")
    return door


def _dispatch(ctx: Context, doors: Doors) -> int:
    command = ctx.inv.command
    if ctx.server is not None and command != "config":  # the one place: local or remote
        from tether.cli import _remote

        return _remote.run(ctx)
    if command == "exec":
        from tether.cli._exec import run_exec

        return run_exec(ctx, _read_prompt(ctx.inv))
    if command in ("prompt", "cancel", "set-mode", "set", "status"):
        if command == "prompt":
            from tether.cli import _prompt_cmd

            return _prompt_cmd.prompt(ctx, _read_prompt(ctx.inv))
        from tether.cli import _control_cmds

        return _control_cmds.control(ctx)
    if command == "answer":
        from tether.cli import _questions, _session_flags

        return _questions.answer_cmd(ctx, _session_flags.session_key_of(ctx))
    if command == "sessions":
        from tether.cli import _sessions_cmd

        return _sessions_cmd.sessions_cmd(ctx)
    if command in ("acp", "serve"):
        return _door(doors, command)(ctx)
    if command == "logout":
        from tether.cli import _acp_cmds

        return _acp_cmds.logout(ctx)
    if command == "reap":
        from tether.cli._reap import run_reap

        return run_reap(ctx)
    if command == "metrics":
        from tether.cli._metrics_cmd import run_metrics

        return run_metrics(ctx)
    if command == "config":
        from tether.cli._config_cmd import run_config

        return run_config(ctx)
    from tether.errors import UsageError

    raise UsageError(f"unknown command {command!r}")
