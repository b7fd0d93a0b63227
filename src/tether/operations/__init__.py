"""What a caller can do to a session: the one implementation every front door calls.

The CLI calls these functions directly; the library (and later front doors: an HTTP
gateway, an ACP or MCP server) call them through ``asyncio.to_thread`` and then wrap the
connected socket into asyncio streams, speaking frames with the shared sans-IO protocol
(:class:`tether.ipc.protocol.ResponseTracker`, :class:`tether.ipc.lines.LineReader`).
So there is one connect-or-start (with the IPC version check), one ensure, one offline
status shape and one offline close.

The warm path -- a live owner answers -- computes the socket path from the session key
and talks IPC with the blocking client: standard library only, no asyncio, no sqlite3
(``tests/integration/test_import_budget.py``). The registry is imported only when no
owner answers.

Functions here take a session key (:func:`tether.sessions.session_key`) and use the
current ``TETHER_HOME`` (:func:`tether.paths.use_home` selects another per call).

One concept per module: :mod:`.connecting` (reaching a serving owner: connect,
connect-or-start, fencing a silent one), :mod:`.ensure` (creating or reopening a
session), :mod:`.session_status`, :mod:`.live` (cancel, answer), :mod:`.closing`,
:mod:`.terminating`, :mod:`.listing` (``sessions list``/``show`` records),
:mod:`.journal_reads` (history, transcript), :mod:`.watching` (following the journal,
blocking or on a loop: the one follow bridge), :mod:`.turn_rest` (a turn's rest, read
from the journal by a caller its owner let go of), :mod:`.prompting` (submitting a
prompt and reading its turn: the one payload builder, the one frame loop and the
caller-leaves rule; :mod:`.prompting_aio` is its asyncio flavour), :mod:`.controlling`
(mode and config options), :mod:`.pruning` (old entries and closed sessions),
:mod:`.settings_table` (the owner settings every door builds from one table of keys)
and :mod:`.acp` (ACP's newer methods).
Import the names from here (``from tether.operations import X``, ``operations.X``): each
module is loaded on first use, so a thin CLI path loads only the one it calls.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from tether.operations.acp import agent_sessions, fork_session, logout, resume_agent_session
    from tether.operations.closing import close_session
    from tether.operations.connecting import (
        START_DEADLINE_S,
        connect,
        connect_or_start,
        serving_generation,
    )
    from tether.operations.controlling import control, set_config_option, set_mode
    from tether.operations.ensure import ensure_session
    from tether.operations.journal_reads import (
        first_seq,
        history,
        last_seq,
        open_journal,
        read_lines,
        transcript,
    )
    from tether.operations.listing import describe, list_sessions, resolve_key
    from tether.operations.live import answer, cancel
    from tether.operations.prompting import (
        TurnEnd,
        admit,
        leave_turn,
        prompt_payload,
        rest_result,
        run_turn,
        submit,
    )
    from tether.operations.prompting_aio import AsyncTurn, asubmit
    from tether.operations.pruning import prune
    from tether.operations.session_status import offline_status, status
    from tether.operations.settings_table import settings
    from tether.operations.terminating import terminate
    from tether.operations.turn_rest import TurnRest
    from tether.operations.watching import watch, watch_async, watch_batches

__all__ = [
    "START_DEADLINE_S",
    "AsyncTurn",
    "TurnEnd",
    "TurnRest",
    "admit",
    "agent_sessions",
    "answer",
    "asubmit",
    "cancel",
    "close_session",
    "connect",
    "connect_or_start",
    "control",
    "describe",
    "ensure_session",
    "first_seq",
    "fork_session",
    "history",
    "last_seq",
    "leave_turn",
    "list_sessions",
    "logout",
    "offline_status",
    "open_journal",
    "prompt_payload",
    "prune",
    "read_lines",
    "resolve_key",
    "rest_result",
    "resume_agent_session",
    "run_turn",
    "serving_generation",
    "set_config_option",
    "set_mode",
    "settings",
    "status",
    "submit",
    "terminate",
    "transcript",
    "watch",
    "watch_async",
    "watch_batches",
]

# Where each name lives. No submodule is named like a name it exports: importing a
# submodule binds its name on this package, which must never hide a function.
_HOME = {
    "START_DEADLINE_S": "connecting",
    "connect": "connecting",
    "connect_or_start": "connecting",
    "serving_generation": "connecting",
    "ensure_session": "ensure",
    "status": "session_status",
    "settings": "settings_table",
    "offline_status": "session_status",
    "cancel": "live",
    "answer": "live",
    "close_session": "closing",
    "terminate": "terminating",
    "list_sessions": "listing",
    "describe": "listing",
    "resolve_key": "listing",
    "first_seq": "journal_reads",
    "history": "journal_reads",
    "transcript": "journal_reads",
    "TurnRest": "turn_rest",
    "watch": "watching",
    "watch_async": "watching",
    "watch_batches": "watching",
    "last_seq": "journal_reads",
    "open_journal": "journal_reads",
    "read_lines": "journal_reads",
    "prune": "pruning",
    "prompt_payload": "prompting",
    "submit": "prompting",
    "admit": "prompting",
    "run_turn": "prompting",
    "leave_turn": "prompting",
    "rest_result": "prompting",
    "TurnEnd": "prompting",
    "asubmit": "prompting_aio",
    "AsyncTurn": "prompting_aio",
    "control": "controlling",
    "set_mode": "controlling",
    "set_config_option": "controlling",
    "fork_session": "acp",
    "resume_agent_session": "acp",
    "agent_sessions": "acp",
    "logout": "acp",
}


def __getattr__(name: str) -> object:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'tether.operations' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"tether.operations.{module}"), name)
    globals()[name] = value
    return value
