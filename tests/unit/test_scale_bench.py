"""bench/scale.py's loads and report, without servers (issue 23 item 4): the loads are
bounded and never put two prompts on one session; matplotlib stays out of the runtime."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _bench(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(f"_bench_{name}", module)
    spec.loader.exec_module(module)
    return module


class Recorder:
    """A fake prompt: records which session each call went to and any overlap."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[int] = []
        self.busy: set[int] = set()
        self.overlaps: list[int] = []
        self.most_at_once = 0
        self.fail_on = fail_on

    async def __call__(self, i: int) -> None:
        if i in self.busy:
            self.overlaps.append(i)
        self.busy.add(i)
        self.most_at_once = max(self.most_at_once, len(self.busy))
        self.calls.append(i)
        try:
            await asyncio.sleep(0.002)
            if i == self.fail_on:
                raise ConnectionError("refused")
        finally:
            self.busy.discard(i)


def test_offered_load_sends_rate_times_duration_round_robin_one_per_session() -> None:
    """Every due prompt is sent once, to session k mod N, never two at once on a session."""
    load = _bench("scale_load")
    rec = Recorder()
    out = asyncio.run(load.offered_load(rec, sessions=3, rate=400.0, duration=0.05))
    assert out["sent"] == 20
    assert out["completed"] == 20
    assert out["errors"] == 0
    assert out["unfinished"] == 0
    assert sorted(rec.calls) == sorted(k % 3 for k in range(20))
    assert rec.overlaps == []
    assert {"p50_ms", "p99_ms", "throughput_per_s"} <= out.keys()


def test_in_flight_keeps_level_callers_on_disjoint_sessions_and_stops_at_count() -> None:
    """``level`` callers at most, each on its own sessions; ``count`` prompts, no more."""
    load = _bench("scale_load")
    rec = Recorder()
    out = asyncio.run(load.in_flight(rec, sessions=7, level=3, count=12, duration=60.0))
    assert out["sent"] == 12
    assert out["completed"] == 12
    assert len(rec.calls) == 12
    assert rec.overlaps == []
    assert rec.most_at_once <= 3
    assert out["in_flight"] == 3


def test_a_failing_prompt_is_counted_and_never_retried() -> None:
    """An error is counted with its message; the load goes on and sends nothing extra."""
    load = _bench("scale_load")
    rec = Recorder(fail_on=1)
    out = asyncio.run(load.in_flight(rec, sessions=2, level=2, count=6, duration=60.0))
    assert out["sent"] == 6
    assert out["errors"] == 3
    assert out["completed"] == 3
    assert "ConnectionError: refused" in out["first_errors"][0]


def _row(n: int, own: float) -> dict[str, Any]:
    load = {"sent": 10, "completed": 10, "errors": 0, "p50_ms": 5.0, "p99_ms": 9.0}
    return {
        "sessions": n, "own_pss_mib": own, "own_rss_mib": 2 * own, "own_processes": 2 * n,
        "agent_pss_mib": 5.0, "agent_rss_mib": 11.0, "server_growth_pss_mib": 0.5,
        "mem_available_drop_mib": 30.0, "create_ready": {"p50_ms": 100.0, "p99_ms": 150.0},
        "create_warm": {}, "load": load,
    }  # fmt: skip


def test_the_report_tables_say_where_it_stopped_and_what_was_skipped() -> None:
    """The Markdown names every size, a skipped level, the stop, and a host's capacity."""
    report_mod = _bench("scale_report")
    report = {
        "date": "2026-11-27 13:00 UTC",
        "args": {"sizes": [10, 50], "rate": 20.0, "duration": 5.0, "floor_gib": 3.0},
        "sandbox_agent_absent": "not installed: Tether measured alone",
        "tether": {
            "sizes": [_row(10, 20.0), _row(40, 20.0)],
            "concurrency": [{"in_flight": 50, "skipped": "only 40 sessions"}],
            "stopped": {"reason": "MemAvailable below 3.0 GiB", "sessions": 40},
        },
        "survivors": [],
        "survivors_after_kill": [],
    }
    text = report_mod.markdown(report)
    assert "| Tether (tether serve) | 10 | 20.0 / 40.0 |" in text
    assert "| Tether (tether serve) | 40 |" in text
    assert "skipped: only 40 sessions" in text
    assert "stopped creating sessions at 40: MemAvailable below 3.0 GiB" in text
    assert "Tether measured alone" in text
    # all-in PSS 25.5 MiB per session: (8 - 3) GiB hold 200 sessions
    assert "8 GiB: 200" in text


def test_matplotlib_is_in_the_bench_extra_only_and_never_imported_by_tether() -> None:
    """The plot's library is pinned for bench/ and appears nowhere in the runtime."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [d for d in project["optional-dependencies"]["bench"] if d.startswith("matplotlib")]
    assert not [d for d in project["dependencies"] if "matplotlib" in d]
    for extra in ("serve", "fleet"):
        assert not [d for d in project["optional-dependencies"][extra] if "matplotlib" in d]
    src = ROOT / "src" / "tether"
    assert not [p for p in src.rglob("*.py") if "matplotlib" in p.read_text()]
