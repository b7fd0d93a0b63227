"""Giving a burst's memory back to the system: one collection, then glibc's
``malloc_trim`` (where there is one), so a long-lived process (an owner after a big turn,
the gateway after relaying one to many streams) returns to near its idle size.

Used by :mod:`tether.owner.memory` and :mod:`tether.serve.memory`, which decide *when*;
this module only knows *how*. Standard library only, nothing imported until first use.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

__all__ = ["give_back"]

_TRIM: list[Callable[[int], int] | None] = []  # looked up once, on the first trim


def _libc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where there is none (musl, other platforms).

    Looked up in the process's own symbols (libc is loaded): ``ctypes.util.find_library``
    would run ``ldconfig`` and cost tens of milliseconds. Imported here, on the first
    trim, not at the process's start.
    """
    import ctypes

    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def give_back(*, freeze: bool = False) -> None:
    """Collect garbage, then hand freed heap pages back to the system.

    ``freeze``: after the collection, move every object that survived it into the
    permanent generation (``gc.freeze``), so that later collections -- the next trims and
    the interpreter's own -- no longer walk them. For a process's first trim, once its
    long-lived state exists: a full collection of an owner walks its ~20,000 objects
    (modules, the session's state) in ~5 ms, a frozen one ~0.01 ms, and a session
    prompted now and then trims after every turn. What was frozen is never collected:
    cyclic garbage among those objects later would stay (a one-time, bounded set).
    """
    gc.collect()
    if freeze:
        gc.freeze()
    if not _TRIM:
        _TRIM.append(_libc_trim())
    trim = _TRIM[0]
    if trim is not None:
        trim(0)
