"""The kinds of configuration key (:mod:`tether.config`'s :data:`~tether.config.SCHEMA` is
built from them): :class:`Key`, its constructors (:func:`seconds`, :func:`integer`,
:func:`choice`, :func:`text`, :func:`flag`, :func:`table`) and the checks of the keys of
other shapes. Standard library only: this module is on the thin CLI path.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds on the thin CLI path; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


class Key:
    """One configuration key. Build it with :func:`seconds`, :func:`choice`… (not directly).

    ``check(value)`` returns the normalised value, or raises ``ValueError`` whose text
    says what is allowed.
    """

    __slots__ = ("allowed", "check", "default", "help", "keys", "values")

    def __init__(
        self,
        default: Any,
        help: str,
        allowed: str,
        check: Callable[[Any], Any],
        keys: Mapping[str, Key] | None = None,
        values: Key | None = None,
    ) -> None:
        self.default = default
        self.help = help
        self.allowed = allowed
        self.check = check
        self.keys = keys  # a table with its own schema
        self.values = values  # a table of free names, each value checked by this key


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def seconds(default: float | None, help: str, *, positive: bool = False) -> Key:
    """A duration in seconds: ``≥ 0`` (``> 0`` when ``positive``)."""
    allowed = "a number of seconds " + ("> 0" if positive else "≥ 0")

    def check(value: Any) -> float:
        if not is_number(value) or value < 0 or (positive and value == 0):
            raise ValueError(allowed)
        return float(value)

    return Key(default, help, allowed, check)


def integer(default: int, help: str, *, minimum: int = 1) -> Key:
    """A whole number ``≥ minimum``."""
    allowed = f"a whole number ≥ {minimum}"

    def check(value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(allowed)
        return value

    return Key(default, help, allowed, check)


def choice(default: str, choices: tuple[str, ...], help: str) -> Key:
    """One of ``choices``."""
    allowed = "one of " + ", ".join(f'"{c}"' for c in choices)

    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(allowed)
        return str(value)

    return Key(default, help, allowed, check)


def text(default: str | None, help: str) -> Key:
    """A non-empty string."""

    def check(value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ValueError("a non-empty string")
        return value

    return Key(default, help, "a non-empty string", check)


def flag(default: bool, help: str) -> Key:
    """``true`` or ``false``."""

    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueError("true or false")
        return value

    return Key(default, help, "true or false", check)


def table(
    help: str,
    *,
    keys: Mapping[str, Key] | None = None,
    values: Key | None = None,
) -> Key:
    """A TOML table: with its own ``keys`` (validated like the top level), or free names
    whose ``values`` are all checked by one key (``[agents.NAME]``, ``[auth]``)."""

    def check(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ValueError("a table")
        return dict(value)

    return Key({}, help, "a table", check, keys, values)


def a_string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("a string")
    return value


def an_agent(value: Any) -> Any:
    """An agent: a command string, an argv list, or a table with ``argv`` or ``command``."""
    allowed = 'a command string, an argv list, or a table with argv = [...] or command = "..."'
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        return value
    if isinstance(value, dict):
        argv, command, args = value.get("argv"), value.get("command"), value.get("args", [])
        good_argv = isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
        good_command = isinstance(command, str) and command and isinstance(args, list)
        if good_argv or good_command:
            return value
    raise ValueError(allowed)


def agent_patterns(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ValueError('a list of agent id patterns, e.g. ["claude", "co*"]')
    return tuple(value)


def strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError("a list of non-empty strings")
    return tuple(value)


def mcp_server_list(value: Any) -> tuple[dict[str, Any], ...]:
    """ACP ``McpServer`` objects: ``{name, command, args, env}`` or ``{type, name, url}``."""
    allowed = "a list of tables, each with a name and a command (stdio) or a url (http, sse)"
    if not isinstance(value, list):
        raise ValueError(allowed)
    for server in value:
        if not isinstance(server, dict) or not isinstance(server.get("name"), str):
            raise ValueError(allowed)
        if not isinstance(server.get("command"), str) and not isinstance(server.get("url"), str):
            raise ValueError(allowed)
    return tuple(dict(s) for s in value)
