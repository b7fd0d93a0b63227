"""Giving a burst's memory back to the system: one collection, then glibc's
``malloc_trim`` (where there is one), so a long-lived process (an owner after a big turn,
the gateway after relaying one to many streams) returns to near its idle size.

Used by :mod:`tether.owner.memory` and :mod:`tether.serve.memory`, which decide *when*;
this module only knows *how*. Standard library only, nothing imported until first use.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

from tether import _libc

__all__ = ["give_back", "one_arena"]

M_ARENA_MAX = -8  # glibc's mallopt parameter

_TRIM: list[Callable[..., int] | None] = []  # looked up once, on the first trim


def one_arena() -> None:
    """Have every thread of this process allocate from one malloc arena (glibc's
    ``mallopt(M_ARENA_MAX, 1)``; a no-op without it). Call it before any thread starts.

    glibc gives threads arenas of their own as they contend; an owner's few threads
    (journal writer, status writer, lease heartbeat, state watch) allocate little and
    seldom at once, and their arenas together kept ~0.1 MiB of an idle owner's memory
    (``bench/idle_memory.py``)."""
    mallopt = _libc.function("mallopt")
    if mallopt is not None:
        mallopt(M_ARENA_MAX, 1)


def give_back(*, freeze: bool = False, generation: int = 2) -> None:
    """Collect garbage, then hand freed heap pages back to the system.

    ``freeze``: after the collection, move every object that survived it into the
    permanent generation (``gc.freeze``), so that later collections -- the next trims and
    the interpreter's own -- no longer walk them. For a process's first trim, once its
    long-lived state exists: a full collection of an owner walks its ~20,000 objects
    (modules, the session's state) in ~5 ms, a frozen one ~0.01 ms, and a session
    prompted now and then trims after every turn. What was frozen is never collected:
    cyclic garbage among those objects later would stay (a one-time, bounded set).

    ``generation``: collect up to it only (a session host's trim: its recent garbage,
    not every session's long-lived objects).
    """
    gc.collect(generation)
    if freeze:
        gc.freeze()
    if not _TRIM:
        # Looked up in the process's own symbols (libc is loaded): ctypes.util's
        # find_library would run ldconfig and cost tens of milliseconds.
        _TRIM.append(_libc.function("malloc_trim"))
    trim = _TRIM[0]
    if trim is not None:
        trim(0)
