"""A bench's profiler hook: ``TETHER_PROFILE_DIR`` set, a process profiles its loop thread.

Only ``bench/turn_cpu.py --profile`` sets it (never a user, never a test): the owner's
loop and the gateway's, and the owner's journal writer and heartbeat threads, then run
under :mod:`cProfile` and dump ``<name>-<pid>.prof`` into that directory when they end.
Without the variable this costs one ``os.environ`` lookup.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ENV", "start", "target"]

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


def target(name: str, run: Callable[[], Any]) -> Callable[[], Any]:
    """A thread's target, profiled (``<name>-<pid>.prof``) if the bench asked."""
    if not os.environ.get(ENV):
        return run

    def profiled() -> Any:
        dump = start(name)
        try:
            return run()
        finally:
            dump()

    return profiled
