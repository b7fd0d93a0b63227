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
    from typing import Any


HELP = """\
usage: tether [global options] [<agent>] <command> [options] [text...]
       tether [global options] <agent> "text"          (implicit prompt)

commands:
  exec [-f FILE|-] [TEXT...]           one-shot: start the agent, one prompt, tear it down
  prompt [-s NAME] [--no-wait] [-f FILE|-] [TEXT...]
                                       prompt a saved session through its warm owner
  cancel [-s NAME]                     cancel the session's running turn (keeps the session)
  set-mode [-s NAME] MODE              session/set_mode
  set [-s NAME] KEY VALUE              session/set_config_option (`set model X` too)
  status [-s NAME]                     owner health, pids, queue, lease state
  sessions new|ensure [-s NAME]        create (new: fresh) or reuse a session; starts its owner
  sessions list|show|history [NAME]    inspect sessions
  sessions close [NAME]                end the session and prove its process tree gone
  reap [--dry-run]                     reconcile leases: reap verified orphans of this instance

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
  --timeout SECONDS                    give up on a prompt after this long (exit 3)
  --ttl SECONDS                        owner idle TTL (default 3600; 0 = forever)
  --no-fs                              do not offer file-system access to the agent
  --verbose                            debug logs on stderr
  --version, --help

exit codes: 0 ok, 1 agent/protocol/runtime error, 2 usage, 3 timeout, 4 no session,
            5 permission denied, 130 interrupted
"""


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


def _context(inv: Any) -> Context:
    from tether import agents, config
    from tether.cli.output import Output
    from tether.errors import UsageError

    cwd = os.path.expanduser(inv.cwd) if inv.cwd else os.getcwd()
    if not os.path.isdir(cwd):
        raise UsageError(f"--cwd {cwd} is not a directory")
    cwd = os.path.realpath(cwd)
    cfg = config.load(cwd)
    from tether.sessions import agent_scope

    if inv.agent_cmd:
        label = inv.agent_cmd
        argv = agents.resolve(inv.agent_cmd, {})
        named = False
    else:
        label = inv.agent or str(cfg.get("defaultAgent") or agents.DEFAULT_AGENT)
        argv = agents.resolve(label, cfg.get("agents"))
        named = agents.is_agent_name(label, cfg.get("agents"))
    if not argv:
        raise UsageError("empty agent command")
    fmt = inv.format or str(cfg.get("format") or "text")
    if inv.json_strict and fmt != "json":
        raise UsageError("--json-strict requires --format json")
    timeout = inv.timeout if inv.timeout is not None else cfg.get("timeout")
    ttl = inv.ttl if inv.ttl is not None else float(cfg.get("ttl") or 0)
    return Context(
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
        output=Output(fmt, verbose=inv.verbose, json_strict=inv.json_strict),
    )


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["--version"], ["-V"]):
        sys.stdout.write(f"tether {__version__}\n")
        return 0
    flags = args[: args.index("--")] if "--" in args else args
    if not args or args[:1] == ["help"] or "--help" in flags or "-h" in flags:
        sys.stdout.write(HELP)
        return 0
    from tether.cli import _parse
    from tether.errors import OutputClosed, TetherError, UsageError

    ctx: Context | None = None
    try:
        from tether import agents

        inv = _parse.parse(args, agents.is_agent_name)
        if inv.verbose:
            from tether import _log

            _log.configure(level=10)
        ctx = _context(inv)
        return _dispatch(ctx)
    except OutputClosed as exc:
        return exc.exit_code  # the reader of our stdout left: quietly, like `yes | head -1`
    except TetherError as exc:
        if ctx is not None:
            ctx.output.error(exc)
        else:
            sys.stderr.write(f"[error] {exc}\n")
            if isinstance(exc, UsageError):
                sys.stderr.write("try `tether --help`\n")
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


def _dispatch(ctx: Context) -> int:
    command = ctx.inv.command
    if command == "exec":
        from tether.cli._exec import run_exec

        return run_exec(ctx, _read_prompt(ctx.inv))
    if command in ("prompt", "cancel", "set-mode", "set", "status"):
        from tether.cli import _session_cmds

        if command == "prompt":
            return _session_cmds.prompt(ctx, _read_prompt(ctx.inv))
        return _session_cmds.control(ctx)
    if command == "sessions":
        from tether.cli import _session_cmds

        return _session_cmds.sessions_cmd(ctx)
    if command == "reap":
        from tether.cli._reap import run_reap

        return run_reap(ctx)
    if command == "config":
        import json

        ctx.output.control(
            {"action": "config", "config": ctx.config}, text=json.dumps(ctx.config, indent=2)
        )
        return 0
    from tether.errors import UsageError

    raise UsageError(f"unknown command {command!r}")
