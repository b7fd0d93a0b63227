"""The ``tether`` program: the CLI door, and the other doors that are its subcommands.

``tether serve`` (the HTTP gateway, and a fleet host or router), ``tether acp`` (Tether
as an ACP agent on stdio) and ``tether mcp`` (the MCP bridge) are doors of their own,
standing beside the CLI on ``tether.operations``; the CLI parses the command line and
reports errors for all of them, and this module -- above every door, imported by none --
hands it the other doors, so that no door imports another.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from tether.cli import main as cli_main

    return cli_main(argv, {"serve": _serve, "acp": _acp, "mcp": _mcp})


def _serve(ctx: Any) -> int:
    from tether.acp_door.channel import check_event_id, open_http_server
    from tether.serve.acp_binding import AcpBinding
    from tether.serve.command import run_serve

    # ACP over HTTP: the gateway is handed the ACP door rather than importing it.
    return run_serve(ctx, AcpBinding(open_http_server, check_event_id))


def _acp(ctx: Any) -> int:
    from tether.acp_door.stdio import run_stdio
    from tether.cli._session_flags import owner_flags

    return run_stdio(ctx, owner_flags(ctx))


def _mcp(argv: Any) -> int:
    from tether.mcp.cli import main as mcp_main

    return mcp_main(argv)
