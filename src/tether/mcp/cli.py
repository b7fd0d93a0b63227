"""``tether mcp [--session-key KEY]``: serve the session tools on stdin/stdout."""

from __future__ import annotations

import os
import sys

from tether.errors import UsageError

USAGE = "usage: tether mcp [--session-key KEY]"


def main(args: list[str]) -> int:
    """Run the server until stdin closes; returns the exit code."""
    key: str | None = None
    rest = list(args)
    while rest:
        word = rest.pop(0)
        if word == "--session-key" and rest:
            key = rest.pop(0)
        elif word.startswith("--session-key="):
            key = word.split("=", 1)[1]
        elif word in ("-h", "--help"):
            # `tether mcp --help` shows the full text before we run (the CLI's help);
            # called on its own, the usage line.
            sys.stdout.write(f"{USAGE}\n")
            return 0
        else:
            raise UsageError(f"tether mcp: unexpected {word!r}; {USAGE}")
    if key:
        # The claim Tether handed us; tether.policy.requester proves it against the kernel
        # (this process descends from that session's keeper) or clamps it to `self`.
        os.environ["TETHER_SESSION_KEY"] = key
    from tether._version import __version__
    from tether.mcp.server import McpServer, serve
    from tether.mcp.tools import build_tools

    server = McpServer(build_tools(), name="tether", version=__version__)
    serve(server, sys.stdin.buffer, sys.stdout.buffer)
    return 0
