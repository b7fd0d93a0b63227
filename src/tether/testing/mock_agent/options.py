"""The mock agent's command-line flags."""

from __future__ import annotations

from tether.testing.mock_agent.protocol import AGENT_NAME

USAGE = """\
usage: tether-mock-agent [--ignore-sigterm] [--hang-on-initialize] [--hang-on-new-session]
                         [--startup-delay-ms N] [--load-session] [--resume-session]
                         [--close-session] [--modes] [--config-options] [--auth-required]
                         [--no-exit-on-eof] [--log-stderr] [--fork-session]
                         [--list-sessions] [--delete-session] [--logout]
A scriptable ACP v1 agent on stdin/stdout; see `pydoc tether.testing.mock_agent`.
"""


class Options:
    """The agent's command-line flags."""

    def __init__(self) -> None:
        self.ignore_sigterm = False
        self.hang_on_initialize = False
        self.hang_on_new_session = False
        self.startup_delay_ms = 0
        self.load_session = False
        self.resume_session = False
        self.close_session = False
        self.modes = False
        self.config_options = False
        self.auth_required = False
        self.exit_on_eof = True
        self.log_stderr = False
        self.system_prompt = False
        self.agent_name = AGENT_NAME
        self.fork_session = False
        self.list_sessions = False
        self.delete_session = False
        self.logout = False

    @classmethod
    def parse(cls, argv: list[str]) -> Options:
        """Parse argv (without the program name); raise ValueError on a bad flag."""
        opts = cls()
        switches = {
            "--ignore-sigterm": "ignore_sigterm",
            "--hang-on-initialize": "hang_on_initialize",
            "--hang-on-new-session": "hang_on_new_session",
            "--load-session": "load_session",
            "--resume-session": "resume_session",
            "--close-session": "close_session",
            "--modes": "modes",
            "--config-options": "config_options",
            "--auth-required": "auth_required",
            "--log-stderr": "log_stderr",
            "--system-prompt": "system_prompt",
            "--fork-session": "fork_session",
            "--list-sessions": "list_sessions",
            "--delete-session": "delete_session",
            "--logout": "logout",
        }
        args = iter(argv)
        for arg in args:
            name, eq, value = arg.partition("=")
            if name in switches and not eq:
                setattr(opts, switches[name], True)
            elif name == "--no-exit-on-eof" and not eq:
                opts.exit_on_eof = False
            elif name == "--agent-name":
                opts.agent_name = value if eq else next(args, "")
            elif name == "--startup-delay-ms":
                raw = value if eq else next(args, "")
                try:
                    opts.startup_delay_ms = int(raw)
                except ValueError:
                    raise ValueError(f"--startup-delay-ms needs an integer, got {raw!r}") from None
            else:
                raise ValueError(f"unknown argument {arg!r}")
        return opts
