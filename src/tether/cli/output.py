"""The three output formats, shared by ``exec`` (frames seen in-process) and ``prompt``
(frames relayed by the owner): the same raw ACP frames go through the same renderer.

``text``   assistant text on stdout as it streams, tool calls and plans as readable
           lines, ``[done] <stopReason>`` at the end; banners and errors on stderr.
``json``   NDJSON: every raw ACP JSON-RPC frame, unchanged, both directions (acpx's
           "ACP-only stream contract"), plus Tether's control objects (an ``"action"``
           key) and JSON-RPC shaped error envelopes carrying ``acpxCode``.
``quiet``  assistant text only.

A closed stdout (``tether ... | head -1``) is the reader leaving, not an error: the
first write that finds the pipe closed points stdout at ``/dev/null`` (so nothing later,
not even the interpreter's last flush, fails again) and raises
:class:`~tether.errors.OutputClosed` once; every later write is dropped. ``exec`` sees
it from inside the ACP reader, where the driver turns it into the end of the turn;
``prompt`` sees it from the IPC client's flush before a blocking read. Both then leave
like Ctrl-C, quietly, with exit status 141.

Standard library only (``json``): on the thin path of ``prompt``.
"""

from __future__ import annotations

import os
import sys

from tether import _fastjson
from tether.errors import OutputClosed, TetherError
from tether.names import escape

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any, TextIO


SUPPRESSED = "[suppressed: --suppress-reads]"


def _dumps(obj: Any) -> str:
    return _fastjson.dumps(obj)


class Output:
    """Renders frames, control objects and errors in one format."""

    def __init__(
        self,
        fmt: str = "text",
        *,
        verbose: bool = False,
        json_strict: bool = False,
        batch: bool = False,
        suppress_reads: bool = False,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.fmt = fmt
        self.verbose = verbose
        self.json_strict = json_strict
        self.out = stdout or sys.stdout
        self.err = stderr or sys.stderr
        # batch=True: writes are kept until flush(); the IPC client flushes before each
        # blocking read, so streamed output is written once per batch of frames.
        self.batch = batch
        # hold=True: flush() keeps the output too (a question is being asked on the
        # terminal; the turn's output follows once it is answered).
        self.hold = False
        self._pending: list[str] = []
        self.closed = False  # stdout was closed by its reader
        self._mid_line = False
        self._tool_titles: dict[str, str] = {}
        # --suppress-reads: file contents the agent read are not shown (fs/read_text_file
        # answers, and the content of tool calls of kind "read").
        self.suppress_reads = suppress_reads
        self._read_ids: set[Any] = set()  # ids of the agent's fs/read_text_file requests
        self._read_calls: set[str] = set()  # toolCallIds of kind "read"
        self.spinner: Any = None  # tether.cli._spinner.Spinner on a terminal, else None
        # On a terminal, text from an agent or the state never reaches it raw: control
        # characters (escape sequences, carriage returns) are shown as \xNN escapes.
        # JSON escapes them itself; a pipe or a file gets the text as it is.
        self._tty_out = fmt != "json" and _isatty(self.out)
        self._tty_err = _isatty(self.err)

    # --- frames ---------------------------------------------------------------------

    def frame(self, direction: str, frame: dict[str, Any]) -> None:
        """One raw ACP frame (``direction`` is ``out`` = to the agent, ``in`` = from it)."""
        if self.suppress_reads:
            frame = self._suppressed(direction, frame)
        if self.fmt == "json":
            self._write(_dumps(frame) + "\n")
            return
        if frame.get("method") != "session/update":
            return
        params = frame.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        if isinstance(update, dict):
            self._render_update(update)

    def _suppressed(self, direction: str, frame: dict[str, Any]) -> dict[str, Any]:
        """``frame`` without the contents of files the agent read (a copy when changed).

        The agent's requests come ``in`` and our answers go ``out``; ids are per direction.
        """
        method = frame.get("method")
        if method == "fs/read_text_file" and "id" in frame and direction == "in":
            self._read_ids.add(frame["id"])
            return frame
        if direction == "out" and "result" in frame and frame.get("id") in self._read_ids:
            self._read_ids.discard(frame.get("id"))
            result = frame.get("result")
            if isinstance(result, dict) and "content" in result:
                return {**frame, "result": {**result, "content": SUPPRESSED}}
            return frame
        if method != "session/update":
            return frame
        params = frame.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        if not isinstance(params, dict) or not isinstance(update, dict):
            return frame
        if update.get("sessionUpdate") not in (
            "tool_call",
            "tool_call_update",
        ):
            return frame
        call_id = str(update.get("toolCallId", ""))
        if update.get("kind") == "read":
            self._read_calls.add(call_id)
        if call_id not in self._read_calls or not ("content" in update or "rawOutput" in update):
            return frame
        hidden = {k: v for k, v in update.items() if k not in ("content", "rawOutput")}
        hidden["content"] = [{"type": "content", "content": {"type": "text", "text": SUPPRESSED}}]
        return {**frame, "params": {**params, "update": hidden}}

    def _text(self, text: str) -> None:
        if text:
            self._write(text)
            self._mid_line = not text.endswith("\n")

    def _line(self, text: str) -> None:
        if self._mid_line:
            self._write("\n")
        self._write(text + "\n")
        self._mid_line = False

    def _render_update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            content = update.get("content")
            if isinstance(content, dict) and content.get("type") == "text":
                self._text(str(content.get("text", "")))
            return
        if self.fmt == "quiet":
            return
        if kind == "agent_thought_chunk" and self.verbose:
            content = update.get("content")
            if isinstance(content, dict) and content.get("type") == "text":
                self._line(f"[thought] {content.get('text', '')}")
        elif kind == "tool_call":
            call_id = str(update.get("toolCallId", ""))
            title = str(update.get("title") or call_id)
            self._tool_titles[call_id] = title
            kind_name = update.get("kind") or "other"
            self._line(f"[tool] {title} ({kind_name}) {update.get('status') or 'pending'}")
        elif kind == "tool_call_update":
            status = update.get("status")
            if status:
                call_id = str(update.get("toolCallId", ""))
                title = update.get("title") or self._tool_titles.get(call_id, call_id)
                self._line(f"[tool] {title} {status}")
        elif kind == "plan":
            raw_entries = update.get("entries")
            entries = raw_entries if isinstance(raw_entries, list) else []
            self._line("[plan]")
            for entry in entries:
                if isinstance(entry, dict):
                    mark = {"completed": "x", "in_progress": "~"}.get(str(entry.get("status")), " ")
                    self._line(f"  [{mark}] {entry.get('content', '')}")
        elif kind == "current_mode_update":
            self._line(f"[mode] {update.get('currentModeId')}")

    # --- control --------------------------------------------------------------------

    def done(self, stop_reason: str, elapsed: float | None = None) -> None:
        """The turn's end: ``[done] end_turn (1.2 s)`` in text (``elapsed`` in seconds)."""
        if self.fmt == "text":
            took = f" ({elapsed:.1f} s)" if elapsed is not None else ""
            self._line(f"[done] {stop_reason}{took}")
        elif self.fmt == "quiet" and self._mid_line:
            self._write("\n")
            self._mid_line = False
        self.flush()

    def control(
        self, obj: dict[str, Any], text: str | None = None, quiet: str | None = None
    ) -> None:
        """A control command's answer: the object in json, ``text`` or ``quiet`` otherwise."""
        if self.fmt == "json":
            self._write(_dumps(obj) + "\n")
        elif self.fmt == "quiet":
            if quiet is not None:
                self._write(quiet + "\n")
        elif text is not None:
            self._line(text)
        self.flush()

    def banner(self, text: str) -> None:
        if self.fmt == "text" or (self.verbose and not self.json_strict):
            self.flush()
            self._err_write(f"[tether] {text}\n")

    def notice(self, text: str) -> None:
        """Something the user must know whatever the format (stderr; not with --json-strict)."""
        if not self.json_strict:
            self.flush()
            self._err_write(f"[tether] {text}\n")

    def warning(self, text: str) -> None:
        """A ``[tether] warning:`` line on stderr (not with ``--json-strict``)."""
        if not self.json_strict:
            self.flush()
            self._err_write(f"[tether] warning: {text}\n")

    def error(self, exc: TetherError) -> None:
        """Report ``exc``: a JSON-RPC shaped envelope on stdout in json, a line on stderr.

        Never raises: with stdout closed, the envelope is dropped and the line still goes
        to stderr.
        """
        try:
            self._error_stdout(exc)
        except OutputClosed:
            pass  # the reader has gone; there is nobody to tell on stdout
        if self.fmt != "json" or not self.json_strict:
            text = f"[error] {exc}\n"
            tail = exc.fields.get("stderr_tail")
            if tail and self.fmt != "quiet":
                text += "[error] agent stderr (tail):\n" + str(tail)[-2000:].rstrip() + "\n"
            self._err_write(text)

    def _error_stdout(self, exc: TetherError) -> None:
        if self.fmt == "json":
            envelope = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": -32070,
                    "message": exc.message,
                    "data": {
                        "acpxCode": exc.code,
                        "detailCode": exc.detail_code,
                        "origin": exc.origin,
                        "retryable": exc.retryable,
                        **({"acp": exc.acp} if exc.acp else {}),
                    },
                },
            }
            self._write(_dumps(envelope) + "\n")
        elif self._mid_line:
            self._write("\n")
            self._mid_line = False
        self.flush()

    def _write(self, text: str) -> None:
        if self.closed:
            return
        if self._tty_out:
            text = escape(text, field=False)
        if self.batch:
            self._pending.append(text)
            return
        if self.spinner is not None:
            self.spinner.clear()
            self.spinner.activity()
        try:
            self.out.write(text)
        except BrokenPipeError:
            self._reader_left()

    def flush(self) -> None:
        """Write what is pending and flush stdout (called per batch of frames).

        Raises:
            OutputClosed: stdout's reader has gone (raised once; later calls do nothing).
        """
        if self.closed:
            self._pending.clear()
            return
        if self.hold:
            return
        try:
            if self._pending:
                data, self._pending = "".join(self._pending), []
                if self.spinner is not None:
                    self.spinner.clear()
                    self.spinner.activity()
                self.out.write(data)
            self.out.flush()
        except BrokenPipeError:
            self._reader_left()

    def _reader_left(self) -> None:
        self.closed = True
        self._pending.clear()
        _to_devnull(self.out)
        raise OutputClosed("stdout was closed by its reader")

    def _err_write(self, text: str) -> None:
        """stderr is best effort: its reader may have gone too (``2>&1 | head``)."""
        if self.spinner is not None:
            self.spinner.clear()
            self.spinner.activity()
        if self._tty_err:
            text = escape(text, field=False)
        try:
            self.err.write(text)
            self.err.flush()
        except BrokenPipeError:
            _to_devnull(self.err)


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (OSError, ValueError, AttributeError):  # closed, or not a real file
        return False


def _to_devnull(stream: TextIO) -> None:
    """Point a closed pipe's descriptor at /dev/null: its buffered rest goes nowhere, and
    the interpreter's final flush does not print "Exception ignored ... BrokenPipeError"."""
    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):  # not a real file (a test's StringIO), or closed
        return
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
