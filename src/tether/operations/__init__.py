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

One concept per module: :mod:`.connect` (reaching a serving owner: connect,
connect-or-start, fencing a silent one), :mod:`.ensure` (creating or reopening a
session), :mod:`.status`, :mod:`.live` (cancel, answer), :mod:`.close`,
:mod:`.terminate`, :mod:`.listing` (``sessions list``/``show`` records),
:mod:`.journal_reads` (history, transcript, watch) and :mod:`.acp` (ACP's newer methods,
loaded only when used). Import the names from here: ``from tether.operations import X``.
"""

from __future__ import annotations

from tether.operations.acp import agent_sessions, fork_session, logout, resume_agent_session
from tether.operations.close import close_session
from tether.operations.connect import (
    START_DEADLINE_S,
    connect,
    connect_or_start,
    serving_generation,
)
from tether.operations.ensure import ensure_session
from tether.operations.journal_reads import history, transcript, watch
from tether.operations.listing import describe, list_sessions
from tether.operations.live import answer, cancel
from tether.operations.status import offline_status, status
from tether.operations.terminate import terminate

__all__ = [
    "START_DEADLINE_S",
    "agent_sessions",
    "answer",
    "cancel",
    "close_session",
    "connect",
    "connect_or_start",
    "describe",
    "ensure_session",
    "fork_session",
    "history",
    "list_sessions",
    "logout",
    "offline_status",
    "resume_agent_session",
    "serving_generation",
    "status",
    "terminate",
    "transcript",
    "watch",
]
