"""A spinner on the terminal while a long turn is silent (text format, stderr a TTY).

It is drawn on stderr only after ``SILENT_S`` without output, and only where it cannot
garble the streamed text: when stdout is the same kind of terminal, only while the
text's cursor stands at the start of a line (a half-written line is never overdrawn).
Before anything else is written -- on stdout or stderr -- :class:`~tether.cli.output.Output`
erases it (``\\r`` + erase-line), so the spinner never ends up in the text. It is never
drawn while output is held (a question is being asked on the terminal).

Standard library only (``time``): ``prompt`` is a thin path.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any, TextIO

SILENT_S = 1.0  # draw after this long without output
TICK_S = 0.2  # how often the waiting loops call tick()
FRAMES = "-\\|/"
ERASE = "\r\x1b[K"


class Spinner:
    """See the module docstring. ``tick()`` draws (when due), ``clear()`` erases."""

    def __init__(self, out: Any, err: TextIO, *, stdout_tty: bool) -> None:
        self.out = out  # tether.cli.output.Output (its _mid_line and hold)
        self.err = err
        self.stdout_tty = stdout_tty
        self.started = time.monotonic()
        self.last_output = self.started
        self.shown = False
        self._frame = 0

    def activity(self) -> None:
        """Something was written: the silence starts again."""
        self.last_output = time.monotonic()

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last_output < SILENT_S or self.out.hold:
            return
        if self.stdout_tty and self.out._mid_line:  # Output's own cursor state
            return
        self._frame = (self._frame + 1) % len(FRAMES)
        try:
            self.err.write(f"{ERASE}{FRAMES[self._frame]} working {now - self.started:.0f} s")
            self.err.flush()
        except OSError:
            return
        self.shown = True

    def clear(self) -> None:
        if not self.shown:
            return
        self.shown = False
        try:
            self.err.write(ERASE)
            self.err.flush()
        except OSError:
            pass


def for_output(out: Any) -> Spinner | None:
    """A spinner for ``out`` when its format is text and its stderr is a terminal, else None."""
    if out.fmt != "text":
        return None
    try:
        if not out.err.isatty():
            return None
        stdout_tty = out.out.isatty()
    except (AttributeError, ValueError, OSError):
        return None
    spinner = Spinner(out, out.err, stdout_tty=stdout_tty)
    out.spinner = spinner
    return spinner
