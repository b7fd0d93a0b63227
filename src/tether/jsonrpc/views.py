"""Read-only views of id-keyed tables that match ids by exact JSON type."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")


class ExactIdView(Mapping[_K, _V], Generic[_K, _V]):
    """A read-only view of an id-keyed table that matches ids by exact JSON type.

    A plain dict (or MappingProxyType) would find id ``1`` under ``True`` or ``1.0``, which
    are equal to it and hash alike in Python, and would raise TypeError for an unhashable
    key such as a list taken from a peer's ``$/cancel_request`` params. Callers test ids the
    peer sent against these views, so both must simply be "not there".
    """

    __slots__ = ("_is_key", "_table")

    def __init__(self, table: Mapping[_K, _V], is_key: Callable[[object], bool]) -> None:
        self._table = table
        self._is_key = is_key

    def __getitem__(self, key: _K) -> _V:
        if not self._is_key(key):
            raise KeyError(key)
        return self._table[key]

    def __contains__(self, key: object) -> bool:
        return self._is_key(key) and key in self._table

    def __iter__(self) -> Iterator[_K]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._table!r})"


def is_our_id(value: object) -> bool:
    """Whether ``value`` can be an id we sent (ours are plain ints)."""
    return type(value) is int
