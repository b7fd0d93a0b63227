"""The two loads of ``bench/scale.py``, each bounded in count and in time.

* :func:`offered_load` -- open loop: ``rate`` prompts a second for ``duration`` seconds,
  prompt ``k`` due at ``k / rate`` and sent to session ``k mod N`` (so every session
  gets its share). A prompt's latency runs from when it was *due* to its turn's end,
  so a server that falls behind is charged for the wait (no coordinated omission). A
  session takes one prompt at a time (a prompt due on a busy session waits for it,
  and that wait counts); a prompt still running at the end is waited for up to
  ``grace`` seconds, then counted as unfinished.
* :func:`in_flight` -- closed loop: ``level`` callers, caller ``w`` prompting sessions
  ``w, w + level, ...`` in turn (never two prompts on one session), until ``count``
  prompts have been sent or ``duration`` seconds have passed.

Errors are counted and the first few kept, never retried.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

Prompt = Callable[[int], Awaitable[None]]
PROMPT_TIMEOUT_S = 60.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(lat: list[float], errors: list[str], wall: float, sent: int) -> dict[str, Any]:
    out: dict[str, Any] = {"sent": sent, "completed": len(lat), "errors": len(errors)}
    if errors:
        out["first_errors"] = errors[:3]
    if lat:
        out["p50_ms"] = round(pct(lat, 0.5) * 1000, 1)
        out["p99_ms"] = round(pct(lat, 0.99) * 1000, 1)
        out["max_ms"] = round(max(lat) * 1000, 1)
    out["throughput_per_s"] = round(len(lat) / wall, 1) if wall > 0 else 0.0
    return out


async def _one(prompt: Prompt, i: int, errors: list[str]) -> bool:
    try:
        async with asyncio.timeout(PROMPT_TIMEOUT_S):
            await prompt(i)
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}"[:300])
        return False
    return True


async def offered_load(
    prompt: Prompt, sessions: int, rate: float, duration: float, grace: float = 60.0
) -> dict[str, Any]:
    """``rate`` prompts/s over ``sessions`` sessions for ``duration`` s; latency from due."""
    total = max(1, round(rate * duration))
    locks = [asyncio.Lock() for _ in range(sessions)]
    lat: list[float] = []
    errors: list[str] = []
    t0 = time.perf_counter()

    async def arrival(k: int) -> None:
        due = t0 + k / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        async with locks[k % sessions]:
            if await _one(prompt, k % sessions, errors):
                lat.append(time.perf_counter() - due)

    tasks = [asyncio.ensure_future(arrival(k)) for k in range(total)]
    _, pending = await asyncio.wait(tasks, timeout=duration + grace)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=10)
    out = summary(lat, errors, time.perf_counter() - t0, total)
    out.update(rate_per_s=rate, duration_s=duration, unfinished=len(pending))
    return out


async def in_flight(
    prompt: Prompt, sessions: int, level: int, count: int, duration: float
) -> dict[str, Any]:
    """``level`` callers at once, each on its own sessions, ``count`` prompts at most."""
    lat: list[float] = []
    errors: list[str] = []
    sent = 0
    t0 = time.perf_counter()
    deadline = t0 + duration

    async def caller(w: int) -> None:
        nonlocal sent
        mine = list(range(w, sessions, level))
        j = 0
        while sent < count and time.perf_counter() < deadline:
            sent += 1
            start = time.perf_counter()
            if await _one(prompt, mine[j % len(mine)], errors):
                lat.append(time.perf_counter() - start)
            j += 1

    await asyncio.gather(*(caller(w) for w in range(level)))
    out = summary(lat, errors, time.perf_counter() - t0, sent)
    out["in_flight"] = level
    return out
