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
    """Run the ``tether`` program; returns its exit code.

    As the program itself (``argv`` None: the console script, ``python -m tether``) it
    ends the process once its work is done, through :func:`leave`: what a normal exit
    does that anyone could observe, without the interpreter's teardown.
    """
    from tether.cli import main as cli_main

    code = cli_main(argv, {"serve": _serve, "acp": _acp, "mcp": _mcp})
    if argv is None:
        leave(code)
    return code


def leave(code: int) -> int:
    """End the process with ``code`` now, as a normal exit would end it, or return
    ``code`` for the caller's normal exit when we cannot do that.

    A normal exit waits for the threads, runs the ``atexit`` functions (logging's
    flush, coverage's save), flushes stdout and stderr, then frees every module's
    objects one by one: milliseconds that a CLI command which has done its work (a
    ``sessions close`` that imported the registry, a warm ``prompt``) would pay
    before its caller sees it exit, for nothing anyone can observe. We do the first
    three and skip the last. Only single-threaded and unprofiled: another thread still
    running (a server's, an executor's whose ``atexit`` hook joins it) or a profiler or
    tracer (``python -m cProfile -o``, a debugger: they write at exit) takes the normal
    way out, as does stdout that cannot be flushed (the interpreter's own exit status
    120 and message for that case stay its own).
    """
    import sys

    if sys.getprofile() is not None or sys.gettrace() is not None:
        return code  # a profiler or tracer (cProfile, a debugger) writes its data at exit
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return code
    import atexit
    import os

    atexit._run_exitfuncs()  # the interpreter's own exit step (it clears them: run once)
    if _flushed(sys.stdout) and _flushed(sys.stderr):
        os._exit(code)
    return code


def _flushed(stream: Any) -> bool:
    try:
        if stream is not None:
            stream.flush()
    except (OSError, ValueError):
        return False
    return True


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
