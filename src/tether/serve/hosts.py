"""Which ``Host:`` headers the gateway answers (DNS rebinding). No I/O.

A web page on any site can make the browser send requests to ``127.0.0.1:8787`` by
pointing a name it controls at that address (*DNS rebinding*): the browser then sends
``Host: attacker.example:8787``. The token stops such a request today, but a loopback
service should not rest on that alone: the gateway answers only the names it serves.

The defaults are the bound address, ``localhost``, ``127.0.0.1`` and ``[::1]`` (and, on a
wildcard address such as ``0.0.0.0``, the machine's host name), with the gateway's port
or none. ``--allowed-host`` (repeatable) and the config's ``serve.allowedHosts`` add more:
``NAME`` (with the gateway's port or none), ``NAME:PORT`` (that port only), or ``*``
(any Host: for a proxy that rewrites it). A Unix socket is not reachable from a browser:
its Host is not checked unless hosts are given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from tether.errors import UsageError

__all__ = ["HostRule", "host_rule", "parse_host"]

LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "[::1]")
ALLOWED_KEPT: Final = 64  # distinct Host headers remembered as allowed (each is parsed once)
WILDCARDS: Final = ("0.0.0.0", "::", "[::]", "")  # noqa: S104 -- recognised, never bound here


def parse_host(value: str) -> tuple[str, int | None] | None:
    """``(name, port)`` of a Host header or an allowed-host entry (name lowercased,
    IPv6 in brackets); None if it is not one."""
    value = value.strip().lower()
    if not value or any(c in value for c in " /\\@?#"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1 :]
    elif value.count(":") > 1:  # a bare IPv6 address (an entry may be written so)
        return f"[{value}]", None
    else:
        name, colon, port = value.partition(":")
        rest = colon + port
    if not rest:
        return name, None
    if not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6:
        return None
    return name, int(rest[1:])


class HostRule:
    """The Host headers one gateway answers."""

    def __init__(self, port: int, names: Iterable[str], exact: Iterable[tuple[str, int]]) -> None:
        self.port = port
        self.names = frozenset(names)  # with our port or none
        self.exact = frozenset(exact)  # name:port as given
        self.any = "*" in self.names
        self._allowed: set[str] = set()  # headers seen and allowed (a client sends one)

    def allows(self, header: str | None) -> bool:
        if self.any or header in self._allowed:
            return True
        if self._check(header):
            if len(self._allowed) < ALLOWED_KEPT:
                self._allowed.add(header or "")
            return True
        return False

    def _check(self, header: str | None) -> bool:
        parsed = parse_host(header or "")
        if parsed is None:
            return False
        name, port = parsed
        if name in self.names and (port is None or port == self.port):
            return True
        return port is not None and (name, port) in self.exact

    def shown(self) -> str:
        """The allowed hosts, for a refusal's detail."""
        items = sorted(f"{n}:{self.port}" for n in self.names)
        return ", ".join(items + sorted(f"{n}:{p}" for n, p in self.exact))


def host_rule(
    bound: str | None, port: int, extra: Iterable[str], *, hostname: str = ""
) -> HostRule | None:
    """The rule for a gateway bound to ``bound:port`` (None: a Unix socket), with the
    ``extra`` entries of ``--allowed-host`` and the config. None: no check at all.

    Raises:
        UsageError: an entry that is not a host name, ``NAME:PORT`` or ``*``.
    """
    names: set[str] = set()
    exact: set[tuple[str, int]] = set()
    for entry in extra:
        if entry.strip() == "*":
            names.add("*")
            continue
        parsed = parse_host(entry)
        if parsed is None:
            raise UsageError(f"allowed host {entry!r}: expected NAME, NAME:PORT or *")
        if parsed[1] is None:
            names.add(parsed[0])
        else:
            exact.add((parsed[0], parsed[1]))
    if bound is None:
        return HostRule(port, names, exact) if names or exact else None
    names.update(LOOPBACK_NAMES)
    address = f"[{bound}]" if ":" in bound else bound
    if bound.lower() in WILDCARDS:
        if hostname:
            names.add(hostname.lower())
    else:
        names.add(address.lower())
    return HostRule(port, names, exact)
