"""Questions for a human on the command line: ``answer``, and asking on a terminal.

``tether answer [-s NAME] ID ANSWER [JSON]`` answers a question the session's agent
asked, from any shell (:func:`tether.operations.answer`; the first answer wins).

:class:`Asker` is the controller side shared by ``prompt`` on a terminal and
``sessions watch --control``: the owner sends ``interaction`` frames; the asker shows
the question on stderr and takes the answer from stdin, in a thread, while the caller's
main loop keeps reading the owner's frames. When someone else answers first (another
controller, a deadline, a cancel), the ``interaction_resolved`` frame ends the
question here too, and a line typed after that is answered "[already answered] ...;
this answer was not sent" (the typist is told, as ``tether answer`` is with
``ALREADY_ANSWERED``). Standard library only; no asyncio.

Garbling: while the turn streams, the terminal does not echo what is typed (ECHO off,
so keystrokes cannot land in the agent's output); when a question opens, typed-ahead
input is discarded (it was not an answer to a question nobody had seen), echo comes
back for the answer, and the turn's output is held until the question is resolved.
The terminal's settings are restored however the command ends.
"""

from __future__ import annotations

import os
import sys
import threading

from tether import _fastjson, operations
from tether.errors import AlreadyAnswered, NoSession, TetherError, UsageError

TYPE_CHECKING = False  # typing costs milliseconds; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TextIO

POLL_S = 0.1  # how often the reading thread looks whether its question was resolved
_KEYS = {"y": "allow", "yes": "allow", "a": "always", "always": "always", "n": "deny", "no": "deny"}


def describe(question: dict[str, Any]) -> str:
    """The question as a few lines of text (what the agent wants to do, or know)."""
    qid = question.get("id")
    if question.get("question") == "elicitation":
        lines = [f"[question {qid}] the agent asks: {question.get('message') or ''}"]
        if question.get("mode") == "url":
            lines.append(f"  open: {question.get('url')}")
        schema = question.get("requestedSchema") or {}
        props = schema.get("properties") if isinstance(schema, dict) else None
        if isinstance(props, dict) and props:
            required = set(schema.get("required") or ())
            fields = ", ".join(
                f"{name} ({(spec or {}).get('type', '?')}"
                + (", required)" if name in required else ")")
                for name, spec in props.items()
            )
            lines.append(f"  fields: {fields}  (answer: a {{JSON object}})")
        return "\n".join(lines)
    tool = question.get("toolCall") or {}
    lines = [f"[permission {qid}] {tool.get('kind') or 'tool'}: {tool.get('title') or ''}"]
    raw = tool.get("rawInput")
    if raw is not None:
        text = raw if isinstance(raw, str) else _fastjson.dumps(raw)
        lines.append(f"  input: {text[:400]}")
    return "\n".join(lines)


def resolved_text(question: dict[str, Any]) -> str:
    """``[answered ID] WORD (how by pid N uid U)``: who answered, as the kernel said."""
    by = question.get("by") or {}
    who = f" by pid {by.get('pid')}" if by.get("pid") else ""
    if who and by.get("uid") is not None:
        who += f" uid {by.get('uid')}"
    return f"[answered {question.get('id')}] {question.get('answer')} ({question.get('how')}{who})"


def _prompt_for(question: dict[str, Any]) -> str:
    if question.get("question") == "elicitation":
        return "Answer? [a]ccept, [d]ecline, [c]ancel: "
    return "Allow? [y]es, [a]lways, [n]o: "


def _word(question: dict[str, Any], line: str) -> tuple[str, Any] | None:
    """The answer (and content) a typed line stands for, or None (ask again).

    A form's values are typed as a JSON object (``{"name": "Ada"}``), alone or after
    ``a``/``accept``."""
    text = line.strip()
    if not text:
        return None
    if question.get("question") == "elicitation":
        word, _, rest = text.partition(" ")
        if text.startswith("{"):
            word, rest = "accept", text
        word = {"a": "accept", "d": "decline", "c": "cancel"}.get(word.lower(), word.lower())
        if word == "accept" and rest.strip():
            try:
                return word, _fastjson.loads(rest)
            except ValueError:
                return None
        return word, None
    return _KEYS.get(text.lower(), text), None


class _Terminal:
    """ECHO off while output streams, on while a question waits; restored at the end."""

    def __init__(self, fd: int) -> None:
        import termios

        self.fd = fd
        self._termios = termios
        self.saved: list[Any] | None = None
        try:
            self.saved = termios.tcgetattr(fd)
        except termios.error:
            self.saved = None

    def echo(self, on: bool) -> None:
        if self.saved is None:
            return
        termios = self._termios
        attrs = termios.tcgetattr(self.fd)
        attrs[3] = attrs[3] | termios.ECHO if on else attrs[3] & ~termios.ECHO
        termios.tcsetattr(self.fd, termios.TCSANOW, attrs)

    def discard_typed(self) -> None:
        if self.saved is not None:
            self._termios.tcflush(self.fd, self._termios.TCIFLUSH)

    def restore(self) -> None:
        if self.saved is not None:
            self._termios.tcsetattr(self.fd, self._termios.TCSADRAIN, self.saved)


class Asker:
    """Shows the owner's questions and answers them from stdin (see the module doc).

    Args:
        key: the session key (answers go through :func:`tether.operations.answer`).
        err: where questions and resolutions are shown.
        tty: stdin is a terminal: prompt per question, manage echo.
        hold: called with True while a question is open (hold the turn's output), False
            once it is resolved.
    """

    def __init__(
        self,
        key: str,
        *,
        err: TextIO | None = None,
        tty: bool = False,
        hold: Callable[[bool], None] | None = None,
    ) -> None:
        self.key = key
        self.err = err or sys.stderr
        self.tty = tty
        self.hold = hold or (lambda _on: None)
        self.open: dict[str, dict[str, Any]] = {}  # id -> question, oldest first
        # The last question resolved while shown here: a line typed after it was
        # resolved elsewhere is told it was not sent (not silently dropped).
        self.last_resolved: dict[str, Any] | None = None
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.fd = sys.stdin.fileno()
        self.terminal = _Terminal(self.fd) if tty else None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Asker:
        if self.terminal is not None:
            self.terminal.echo(False)
        self._thread = threading.Thread(target=self._read_answers, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        if self.terminal is not None:
            self.terminal.restore()
        if self.open:
            self.hold(False)  # interrupted with a question open: release the output

    def _say(self, text: str) -> None:
        from tether.names import escape  # the agent's titles and messages, never raw

        self.err.write(escape(text, field=False) + "\n")
        self.err.flush()

    def on_frame(self, frame: dict[str, Any]) -> bool:
        """Handle an owner frame about questions; False when it is not one."""
        kind = frame.get("type")
        question = frame.get("interaction")
        if kind not in ("interaction", "interaction_resolved") or not isinstance(question, dict):
            return False
        qid = str(question.get("id"))
        with self.lock:
            if kind == "interaction" and qid not in self.open:
                first = not self.open
                self.open[qid] = question
                if first:
                    self.hold(True)
                    if self.terminal is not None:
                        self.terminal.discard_typed()
                    self._say(describe(question))
                    if self.terminal is not None:
                        self.terminal.echo(True)
                    if self.tty:
                        self.err.write(_prompt_for(question))
                        self.err.flush()
            elif kind == "interaction_resolved" and qid in self.open:
                del self.open[qid]
                self.last_resolved = question
                self._say(("\n" if self.tty else "") + resolved_text(question))
                if self.open:
                    nxt = next(iter(self.open.values()))
                    self._say(describe(nxt))
                    if self.tty:
                        self.err.write(_prompt_for(nxt))
                        self.err.flush()
                else:
                    if self.terminal is not None:
                        self.terminal.echo(False)
                    self.hold(False)
        return True

    def _read_answers(self) -> None:
        """The reading thread: each line answers the oldest open question (or ``ID WORD``)."""
        import select

        buf = b""
        while not self.stopped.is_set():
            ready, _, _ = select.select([self.fd], [], [], POLL_S)
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:
                return
            if not chunk:
                return  # stdin closed: answers may still come from elsewhere
            buf += chunk
            while b"\n" in buf:
                line, _, buf = buf.partition(b"\n")
                self._answer_line(line.decode("utf-8", "replace"))

    def _answer_line(self, line: str) -> None:
        with self.lock:
            if not self.open:
                # Typed with no question open: not sent. Say why -- most likely it was
                # meant for the question someone else (a deadline, a cancel) just settled.
                if line.strip():
                    late = self.last_resolved
                    self._say(
                        f"[already answered] {resolved_text(late)}; this answer was not sent"
                        if late is not None
                        else "[no question is open] this answer was not sent"
                    )
                return
            first_id, first = next(iter(self.open.items()))
            parts = line.split(None, 1)
            if parts and parts[0] in self.open and len(parts) == 2:
                first_id, first, line = parts[0], self.open[parts[0]], parts[1]
        parsed = _word(first, line)
        if parsed is None:
            if self.tty:
                self.err.write(_prompt_for(first))
                self.err.flush()
            return
        word, content = parsed
        try:
            operations.answer(self.key, first_id, word, content=content)
        except AlreadyAnswered as exc:
            self._say(f"[already answered] {exc.message}")
        except UsageError as exc:
            self._say(f"[error] {exc.message}")
            if self.tty:
                self.err.write(_prompt_for(first))
                self.err.flush()
        except TetherError as exc:
            self._say(f"[error] {exc.message}")


def answer_cmd(ctx: Any, key: str) -> int:
    """``tether answer [-s NAME] ID ANSWER [JSON]``."""
    qid, word, content = answer_args(ctx)
    try:
        result = operations.answer(key, qid, word, content=content)
    except NoSession:
        from tether.cli._session_flags import _no_session_hint

        raise _no_session_hint(ctx) from None
    return show_answered(ctx, result)


def answer_args(ctx: Any) -> tuple[str, str, dict[str, Any] | None]:
    """``answer``'s words: the question's id, the answer, an elicitation's content."""
    words = ctx.inv.words
    if len(words) not in (2, 3):
        raise UsageError(
            "usage: tether answer [-s NAME] ID allow|always|deny|deny-always|OPTION_ID"
            " (an elicitation: accept [JSON]|decline|cancel)"
        )
    content = None
    if len(words) == 3:
        try:
            content = _fastjson.loads(words[2])
        except ValueError:
            raise UsageError(f"the answer's content is not JSON: {words[2]!r}") from None
        if not isinstance(content, dict):
            raise UsageError("the answer's content must be a JSON object")
    return words[0], words[1], content


def show_answered(ctx: Any, result: dict[str, Any]) -> int:
    """``answer``'s output of its result."""
    question = result.get("interaction") or {}
    ctx.output.control(result, text=resolved_text(question), quiet=str(question.get("answer")))
    return 0
