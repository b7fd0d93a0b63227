"""Session hosts (``serve.sessionHosts``, issue 23): what the owners of N sessions cost in
one process per session and N to a host, side by side in one run. Never in `make test`.

Usage::

    .venv/bin/python bench/session_hosts.py                  # 100 sessions; off, 50, 25
    .venv/bin/python bench/session_hosts.py --per-host 0,50 --gap 1.6 --name-threads

For each setting, on a fresh ``TETHER_HOME`` with one ``tether serve`` and the bundled
mock agent, N sessions are created and warmed, then:

* bursts: the N prompts at once sent straight to the owners (``bench/serve.py``'s
  ``owners_alone``: the gateway's own path for a waited prompt, without HTTP), ``--bursts``
  times, ``--gap`` seconds apart (above 1 s an owner's post-turn memory trim runs between
  bursts; below it none does): the median burst's p50 and p99, and the owners' CPU per
  turn from ``/proc/<pid>/task/*/schedstat`` (exact), by thread: the event loop's
  (``main``) and the rest (with ``--name-threads``, each Python thread by its name:
  ``journal-writer``, ``tether-heartbeat``...; a ``sitecustomize`` on PYTHONPATH names
  the native threads, so every process started carries it);
* idle: the owners' CPU and wakeups per second per session over ``--idle`` seconds.

Every session is closed at the end and the gateway stopped; its processes carry
TETHER_BENCH_RUN=<id> and a /proc scan proves nothing is left.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import serve as bench_serve  # bench/ is on the path: this script's directory

_NAME_THREADS = """
import ctypes, threading
_libc = ctypes.CDLL(None)
_inner = threading.Thread._bootstrap_inner
def _named(self):
    try:
        _libc.prctl(15, self.name[:15].encode(), 0, 0, 0)  # PR_SET_NAME
    except Exception:
        pass
    return _inner(self)
threading.Thread._bootstrap_inner = _named
"""


def threads_cpu(pid: int) -> dict[str, tuple[int, int]]:
    """CPU ns and wakeups of ``pid``'s threads, by name (``main``: the process's own)."""
    out: dict[str, tuple[int, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = "main" if tid == str(pid) else f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns, _wait, switches = (int(x) for x in f.read().split()[:3])
        except OSError:
            continue
        was = out.get(name, (0, 0))
        out[name] = (was[0] + ns, was[1] + switches)
    return out


def total(pids: list[int]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for pid in pids:
        for name, (ns, sw) in threads_cpu(pid).items():
            was = out.get(name, (0, 0))
            out[name] = (was[0] + ns, was[1] + sw)
    return out


def delta(after: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]]) -> Any:
    out = {}
    for name, (ns, sw) in after.items():
        was = before.get(name, (0, 0))
        out[name] = (ns - was[0], sw - was[1])
    return out


def one_setting(per_host: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    home = tmp / f"home-{per_host}"
    home.mkdir()
    cwd = tmp / "project"
    cwd.mkdir(exist_ok=True)
    if per_host:
        (home / "config.toml").write_text(f"[serve]\nsessionHosts = {per_host}\n")
        os.chmod(home / "config.toml", 0o600)
    gw = bench_serve.Gw(home)
    out: dict[str, Any] = {"per_host": per_host}
    try:
        sids = [gw.ensure(cwd, name=f"s{i}") for i in range(args.sessions)]
        asyncio.run(bench_serve.owners_alone(home, sids))  # cold: the agents start
        owners = sorted({bench_serve.owner_pid(gw, s) for s in sids})
        out["owner_processes"] = len(owners)
        before = total(owners)
        lat: list[tuple[float, float]] = []
        for _ in range(args.bursts):
            time.sleep(args.gap)
            one = asyncio.run(bench_serve.owners_alone(home, sids))
            lat.append((bench_serve.pct(one, 0.5) * 1000, bench_serve.pct(one, 0.99) * 1000))
        used = delta(total(owners), before)
        turns = args.sessions * args.bursts
        out["burst_p50_ms"] = round(statistics.median(b[0] for b in lat), 1)
        out["burst_p99_ms"] = round(statistics.median(b[1] for b in lat), 1)
        out["owner_cpu_ms_per_turn"] = round(sum(v[0] for v in used.values()) / 1e6 / turns, 3)
        out["by_thread_ms_per_turn"] = {
            k: round(v[0] / 1e6 / turns, 3)
            for k, v in sorted(used.items(), key=lambda kv: -kv[1][0])
            if v[0] / 1e6 / turns >= 0.001
        }
        time.sleep(3.0)  # the trims after the last burst
        before = total(owners)
        time.sleep(args.idle)
        idle = delta(total(owners), before)
        per = args.idle * args.sessions
        out["idle_owner_cpu_ms_per_s_per_session"] = round(
            sum(v[0] for v in idle.values()) / 1e6 / per, 3
        )
        out["idle_owner_wakeups_per_s_per_session"] = round(
            sum(v[1] for v in idle.values()) / per, 2
        )
    finally:
        gw.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--per-host", default="0,50,25", help="settings, 0 = off (comma-separated)")
    ap.add_argument("--bursts", type=int, default=10)
    ap.add_argument("--gap", type=float, default=0.3, help="seconds between bursts")
    ap.add_argument("--idle", type=float, default=10.0, help="idle CPU window, seconds")
    ap.add_argument("--name-threads", action="store_true")
    args = ap.parse_args()
    if not (1 <= args.sessions <= 500 and 1 <= args.bursts <= 100 and args.idle <= 120):
        raise SystemExit("--sessions 1..500, --bursts 1..100, --idle up to 120")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    report: dict[str, Any] = {"sessions": args.sessions, "bursts": args.bursts, "gap_s": args.gap}
    with tempfile.TemporaryDirectory(prefix="tether-bench-hosts-") as tmp:
        if args.name_threads:
            site = Path(tmp) / "site"
            site.mkdir()
            (site / "sitecustomize.py").write_text(_NAME_THREADS)
            os.environ["PYTHONPATH"] = os.pathsep.join(
                [str(site)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            )
        report["settings"] = [
            one_setting(int(n), args, Path(tmp)) for n in args.per_host.split(",")
        ]
        time.sleep(2)
    left = bench_serve.leftovers()
    report["leftover_processes"] = left
    print(json.dumps(report, indent=2))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
