"""The ``terminal/*`` client methods: terminals an agent runs through us.

Theory of operation
-------------------
An agent that sees ``clientCapabilities.terminal: true`` may ask the client to run a
command (``terminal/create``), read what it printed (``terminal/output``), wait for it
(``terminal/wait_for_exit``), kill it (``terminal/kill``) and free it
(``terminal/release``). This module is the protocol half: it checks each request,
keeps the table of live terminals and their output, and answers. Running the command
is a :class:`TerminalHost`'s job -- in production
:class:`tether.process_terminals.ProcessTerminals`, which makes every terminal a
supervised run of its own (keeper, lease, proof of extinction); in tests anything that
satisfies the Protocol. This module imports no process code.

The rules:

* **Scoped to the session that made it.** A terminal id is looked up together with the
  request's ``sessionId``; another session's terminal is "unknown" (``-32602``). When the
  agent run ends (close, retirement, owner death) the host ends every terminal.
* **cwd confined like fs.** ``cwd`` (absolute, optional) must lie inside the session's
  workspace, symlinks resolved (:func:`tether.acp.policy.confine`); the default is the
  workspace itself. ``env`` entries are laid over the agent's environment.
* **The command.** With ``args`` the argv is ``[command, *args]``, run as given. Without
  ``args`` a ``command`` that needs a shell (whitespace, quotes, pipes...) is run by
  ``/bin/sh -c``, as ACP clients do for a command line; a bare word is run as is.
* **Output is bounded.** Each terminal keeps the newest ``min(outputByteLimit,
  terminalOutputLimit)`` bytes (:class:`OutputBuffer`); when it had to drop older output
  it says ``truncated: true``, and it cuts at a UTF-8 character boundary as the schema
  asks. stdout and stderr are one stream, as on a terminal.
* **kill vs release.** ``terminal/kill`` ends the command's whole tree (with proof) and
  keeps the terminal, so its output and exit status stay readable; ``terminal/release``
  does the same if it still runs and then forgets the terminal.
* **Exit status.** ``{"exitCode": n | null, "signal": "SIGTERM" | null}``.

The permission policy is not involved: an agent asks permission for the tool call that
uses a terminal, not for the terminal.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any, Final, Protocol

from tether.acp import policy
from tether.acp.transport import ExitStatus
from tether.errors import TetherError
from tether.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, Request

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "METHODS",
    "OutputBuffer",
    "TerminalCommand",
    "TerminalHost",
    "TerminalRequests",
    "TerminalRun",
]

METHODS: Final = frozenset(
    {
        "terminal/create",
        "terminal/output",
        "terminal/wait_for_exit",
        "terminal/kill",
        "terminal/release",
    }
)
DEFAULT_OUTPUT_LIMIT: Final = 1024 * 1024  # bytes kept per terminal (config: terminalOutputLimit)
MAX_TERMINALS: Final = 64  # unreleased terminals per agent run; more is refused
_SHELL_CHARS: Final = frozenset(" \t\n'\"\\|&;<>()$`*?[]{}~#")


class OutputBuffer:
    """The newest ``limit`` bytes of a terminal's output (no I/O).

    ``truncated`` becomes true the first time older output is dropped. The front is cut
    at a UTF-8 character boundary, so the kept text may be a few bytes under the limit.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.truncated = False
        self.total = 0  # bytes seen, kept or not
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self._buf += data
        excess = len(self._buf) - self.limit
        if excess <= 0:
            return
        del self._buf[:excess]
        # A character boundary: drop continuation bytes (10xxxxxx) the cut left in front.
        skip = 0
        while skip < min(3, len(self._buf)) and self._buf[skip] & 0xC0 == 0x80:
            skip += 1
        del self._buf[:skip]
        self.truncated = True

    def text(self, *, final: bool) -> str:
        """The kept output as text. Until ``final`` (the command has exited) an incomplete
        character at the end is held back: its other bytes may still come."""
        data = bytes(self._buf)
        if not final:
            data = data[: _complete_prefix(data)]
        return data.decode("utf-8", errors="replace")


def _complete_prefix(data: bytes) -> int:
    """The length of ``data`` without a trailing incomplete UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: its lead is further back
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte >= 0xF0 else 1
        return len(data) - back if back < need and byte >= 0xC0 else len(data)
    return len(data)


class TerminalCommand:
    """What ``terminal/create`` asked for, checked: argv, cwd, environment overlay."""

    __slots__ = ("argv", "cwd", "env", "session_id")

    def __init__(self, argv: list[str], cwd: str, env: dict[str, str], session_id: str) -> None:
        self.argv = argv
        self.cwd = cwd
        self.env = env
        self.session_id = session_id


class TerminalRun(Protocol):
    """One running (or finished) terminal command, as the host runs it."""

    @property
    def id(self) -> str: ...

    def exit_status(self) -> ExitStatus | None:
        """``(exit code, signal)`` once the command has exited, else None."""

    async def wait_exited(self) -> ExitStatus:
        """Wait for the command to exit. Cancellation: only the wait is cancelled."""
        ...

    async def end(self) -> None:
        """End the command's whole tree and prove it gone. Idempotent."""


class TerminalHost(Protocol):
    """Runs terminal commands for one agent run (see :mod:`tether.process_terminals`)."""

    @property
    def output_limit(self) -> int:
        """The most output bytes a terminal keeps (``terminalOutputLimit``)."""
        ...

    async def start(
        self, command: TerminalCommand, on_output: Callable[[bytes], None]
    ) -> TerminalRun:
        """Start ``command``; its output (stdout and stderr) goes to ``on_output``.

        Raises:
            TetherError: it could not be started (``SpawnError``), or the host is closed.
        """
        ...


class _Terminal:
    __slots__ = ("output", "run", "session_id")

    def __init__(self, run: TerminalRun, session_id: str, output: OutputBuffer) -> None:
        self.run = run
        self.session_id = session_id
        self.output = output


class _Refused(Exception):
    """A request we answer -32602 (its message is the error's)."""


Reply = Callable[[Any, Any], None]
ReplyError = Callable[[Any, int, str], None]


class TerminalRequests:
    """Answers one connection's ``terminal/*`` requests (see the module docstring)."""

    def __init__(
        self,
        host: TerminalHost,
        cwd: str,
        *,
        answer: Reply,
        error: ReplyError,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self._host = host
        self._cwd = cwd
        self._answer = answer
        self._error = error
        self._spawn = spawn
        self._terminals: dict[str, _Terminal] = {}
        self._starting = 0

    def on_request(self, req: Request, params: dict[str, Any]) -> None:
        """Dispatch one ``terminal/*`` request (its answer may come later)."""
        self._spawn(self._handle(req, params))

    async def _handle(self, req: Request, params: dict[str, Any]) -> None:
        try:
            result = await self._dispatch(req.method, params)
        except _Refused as exc:
            self._error(req.id, INVALID_PARAMS, str(exc))
            return
        except TetherError as exc:
            self._error(req.id, INTERNAL_ERROR, str(exc))
            return
        self._answer(req.id, result)

    async def _dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "terminal/create":
            return await self._create(params)
        term_id, term = self._find(params)
        if method == "terminal/output":
            status = term.run.exit_status()
            out: dict[str, Any] = {
                "output": term.output.text(final=status is not None),
                "truncated": term.output.truncated,
            }
            if status is not None:
                out["exitStatus"] = _exit_status(status)
            return out
        if method == "terminal/wait_for_exit":
            return _exit_status(await term.run.wait_exited())
        if method == "terminal/kill":
            await term.run.end()
            return {}
        # terminal/release: end it if it still runs, then forget it.
        await term.run.end()
        self._terminals.pop(term_id, None)
        return {}

    def _find(self, params: dict[str, Any]) -> tuple[str, _Terminal]:
        term_id = params.get("terminalId")
        term = self._terminals.get(term_id) if isinstance(term_id, str) else None
        if term is None or term.session_id != params.get("sessionId"):
            raise _Refused(f"unknown terminal: {term_id!r}")
        assert isinstance(term_id, str)
        return term_id, term

    async def _create(self, params: dict[str, Any]) -> dict[str, Any]:
        command = self._command(params)
        limit = params.get("outputByteLimit")
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or limit < 0
        ):
            raise _Refused("outputByteLimit must be a whole number >= 0")
        if len(self._terminals) + self._starting >= MAX_TERMINALS:
            raise _Refused(f"too many terminals (at most {MAX_TERMINALS}); release one first")
        cap = self._host.output_limit
        output = OutputBuffer(cap if limit is None else min(limit, cap))
        self._starting += 1
        try:
            run = await self._host.start(command, output.feed)
        finally:
            self._starting -= 1
        self._terminals[run.id] = _Terminal(run, command.session_id, output)
        return {"terminalId": run.id}

    def _command(self, params: dict[str, Any]) -> TerminalCommand:
        session_id = params.get("sessionId")
        if not isinstance(session_id, str):
            raise _Refused("sessionId must be a string")
        command = params.get("command")
        if not isinstance(command, str) or not command.strip():
            raise _Refused("command must be a non-empty string")
        args = params.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise _Refused("args must be a list of strings")
        env: dict[str, str] = {}
        for var in params.get("env") or []:
            if not (
                isinstance(var, dict)
                and isinstance(var.get("name"), str)
                and isinstance(var.get("value"), str)
                and var["name"]
                and "=" not in var["name"]
            ):
                raise _Refused("env must be a list of {name, value} strings")
            env[var["name"]] = var["value"]
        cwd = params.get("cwd")
        try:
            where = self._cwd if cwd is None else str(policy.confine(self._cwd, cwd))
        except policy.PathRefused as exc:
            raise _Refused(f"cwd: {exc}") from None
        if not os.path.isdir(where):
            raise _Refused(f"cwd is not a directory: {where!r}")
        if args or not _SHELL_CHARS.intersection(command):
            argv = [command, *args]
        else:
            argv = ["/bin/sh", "-c", command]
        return TerminalCommand(argv, where, env, session_id)


def _exit_status(status: ExitStatus) -> dict[str, Any]:
    code, sig = status
    name: str | None = None
    if sig is not None:
        with contextlib.suppress(ValueError):
            name = signal.Signals(sig).name
        name = name or str(sig)
    return {"exitCode": code, "signal": name}
