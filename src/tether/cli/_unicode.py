"""The CLI's edges with text that is not Unicode: what it writes, what it is given."""

from __future__ import annotations

import sys

from tether._fastjson import is_text


def escape_what_is_not_unicode() -> None:
    """stdout and stderr write a lone surrogate -- text an agent's JSON escaped that is not
    Unicode -- as its escape (``\\ud800``; on a JSON line, the JSON escape it came as),
    where the strict default raised and one broken or hostile agent's chunk ended
    ``prompt``, ``watch`` and ``read`` with an unexpected error."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):
            pass  # replaced by a caller (tests), or closed: it is theirs


def require_unicode(args: list[str]) -> None:
    """An argument that is not UTF-8 (bytes Python kept as lone surrogates) can be neither
    stored nor sent to an agent: a usage error naming it, before anything is done."""
    for index, arg in enumerate(args):
        if not is_text(arg):
            raise _not_utf8(f"argument {index + 1} ({_as_typed(arg)}) is not valid UTF-8 text")


def require_text_path(cwd: str) -> None:
    """A working directory whose path is not UTF-8 cannot be named to an agent (ACP's
    ``cwd`` is text) nor stored: a usage error saying so, not an unexpected one."""
    if not is_text(cwd):
        raise _not_utf8(
            f"the working directory {_as_typed(cwd)} is not valid UTF-8: an agent's cwd is"
            " text; run from (or pass --cwd) a directory whose path is"
        )


def _as_typed(text: str) -> str:
    """The bytes as the user typed them (``\\xff`` for one that is not UTF-8)."""
    return repr(text.encode(errors="surrogateescape"))[2:-1]


def _not_utf8(message: str) -> Exception:
    from tether.errors import UsageError

    return UsageError(message)
