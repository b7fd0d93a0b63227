"""Session names: the one check every door's names go through, and escaping for terminals.

A session name is chosen by whoever creates the session (the CLI's ``-s``, the gateway's
``POST /v1/sessions``, the MCP bridge's ``sessions_spawn``, a fork's new name) and is
later printed: in ``sessions list`` rows, in ``status``, in the dashboard. A name with a
newline forges a second row; one with an escape sequence drives the reader's terminal.
So :func:`check_name` refuses any character that is not printable text (``str.isprintable``:
controls, NUL, line and paragraph separators, format characters such as bidirectional
overrides and zero-width spaces; the ASCII space is allowed), and
:func:`tether.operations.ensure_session` calls it before anything is created, whatever
the door.

:func:`escape` makes anything else from the state or an agent harmless on a terminal.

Standard library only, and no imports at all: the CLI's thin path may use it.
"""

from __future__ import annotations

MAX_NAME = 200  # characters: a name is a label, not a document


def check_name(name: str) -> str:
    """``name`` if it may name a session.

    Raises:
        InvalidName: it holds a character that is not printable text, or is too long.
    """
    if not isinstance(name, str):
        raise _invalid(f"a session name must be text, not {type(name).__name__}")
    if len(name) > MAX_NAME:
        raise _invalid(f"a session name has at most {MAX_NAME} characters")
    if not name.isprintable():
        bad = next(c for c in name if not c.isprintable())
        raise _invalid(
            f"session name {escape(name, quote=True)} holds {bad!r} (U+{ord(bad):04X}):"
            " control characters, newlines, escape sequences and other non-printable"
            " characters are refused in names"
        )
    return name


def _invalid(message: str) -> Exception:
    from tether.errors import InvalidName

    return InvalidName(message, field="name")


# Every C0 control but tab and newline, DEL, and the C1 controls (0x80-0x9f).
_CONTROLS = [*range(0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)]
_TABLE = {c: f"\\x{c:02x}" for c in _CONTROLS}
# In a one-line field (a name, a cwd in a table row), tab and newline are escaped too.
_FIELD_TABLE = {**_TABLE, 0x09: "\\t", 0x0A: "\\n"}


def escape(text: str, *, field: bool = True, quote: bool = False) -> str:
    """``text`` with its control characters shown as ``\\xNN`` escapes.

    Args:
        field: a one-line field: tabs, newlines and line separators are escaped too
            (else they are kept: an agent's multi-line answer stays multi-line).
        quote: wrap the result in single quotes (to show where a name ends).
    """
    out = text.translate(_FIELD_TABLE if field else _TABLE)
    if field and not out.isprintable():
        out = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in out)
    return f"'{out}'" if quote else out
