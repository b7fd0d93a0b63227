"""A bench's profiler hook: ``TETHER_PROFILE_DIR`` set, a process profiles its loop thread.

Only ``bench/turn_cpu.py --profile`` sets it (never a user, never a test): the owner and
the gateway then run under :mod:`cProfile` and dump ``<name>-<pid>.prof`` into that
directory when they end. Without the variable this costs one ``os.environ`` lookup.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

__all__ = ["ENV", "start"]

ENV = "TETHER_PROFILE_DIR"


def start(name: str) -> Callable[[], None]:
    """Start profiling this thread if the bench asked; returns the (idempotent) dump."""
    where = os.environ.get(ENV)
    if not where:
        return lambda: None
    import cProfile

    profiler = cProfile.Profile(time.thread_time)  # CPU, not the idle loop's wait
    profiler.enable()
    done = False

    def dump() -> None:
        nonlocal done
        if done:
            return
        done = True
        profiler.disable()
        profiler.dump_stats(os.path.join(where, f"{name}-{os.getpid()}.prof"))

    return dump
