"""How cost grows with sessions on one host (issue 23, item 4). Never in `make test`.

Usage::

    .venv/bin/python bench/scale.py                       # 10, 50, 100, 200, 500 sessions
    .venv/bin/python bench/scale.py --sizes 10,50 --duration 5 --concurrency 1,10,50

For each server in the same run -- Tether (``tether serve``, its HTTP API) and then
sandbox-agent 0.4.2, both on Tether's Python mock agent -- it grows one population of
warm sessions (created, then prompted once) through the sizes and, at each size:

* idle memory: Tether's own processes per session (owner + keeper; sandbox-agent has
  none: one process for all), PSS and RSS from ``/proc/<pid>/smaps_rollup`` summed and
  divided by the sessions; the agents' likewise; the kernel's share PSS leaves out (page
  tables and thread stacks of those processes); the server's growth since it was idle
  per session; and the host's ``MemAvailable`` drop per session (everything, agents
  included; noisy on a shared machine);
* idle CPU: what the idle sessions' processes and the server burn while nothing is
  prompted (``--idle-seconds``), from ``/proc/<pid>/stat``;
* create -> ready per session (Tether: ``POST /v1/sessions`` until its owner serves;
  sandbox-agent: ``initialize`` + ``session/new``, which start its agent) and create ->
  warm (plus the first prompt, which starts Tether's agent), p50/p99 of the sessions
  created for that size;
* prompt p50/p99 at a fixed offered load (``--rate`` prompts/s spread round-robin over
  every session for ``--duration`` s; ``bench/scale_load.py`` says how latency counts);

then, on the largest population it reached, the same prompts at increasing concurrency
(``--concurrency``; levels above the population are skipped, and said so).

It stops creating sessions when ``MemAvailable`` falls below ``--floor-gib`` (and after
``--max-minutes`` per server), measures what it has, and says where it stopped. Every
loop is bounded in count and time. It makes itself a child subreaper, so every owner,
keeper and agent stays its descendant; at the end it ends every server by the pid it
started, then proves that no descendant is left (survivors are killed only after a
(pid, start time) check, and reported). Results: ``--out`` (default
``bench/results/scale``) ``.json``, ``.md``, ``.png`` and ``.svg``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import scale_load
import scale_report
from fleet_procs import mem_available_kib
from scale_sides import ROOT, PeerSide, TetherSide, _proctree, sandbox_agent_binary, smaps_kib

Side = TetherSide | PeerSide


def cpu_ticks(pids: list[int]) -> int:
    """User + system clock ticks of ``pids`` so far (a process gone meanwhile counts 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total


def idle_cpu(side: Side, n: int, seconds: float) -> dict[str, float]:
    """CPU the idle sessions burn, in ms per second: per session (own processes and
    agents) and the server's; nothing is prompted meanwhile."""
    pids = side.session_pids()
    groups = {"own": pids["own"], "agents": pids["agents"], "server": side.server_pids()}
    before = {k: cpu_ticks(v) for k, v in groups.items()}
    t0 = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - t0
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    used = {k: (cpu_ticks(v) - before[k]) * tick_ms / wall for k, v in groups.items()}
    return {
        "idle_cpu_own_ms_per_s_per_session": round(used["own"] / n, 3),
        "idle_cpu_agent_ms_per_s_per_session": round(used["agents"] / n, 3),
        "idle_cpu_server_ms_per_s": round(used["server"], 2),
    }


def kernel_kib(pids: list[int]) -> int:
    """Kernel memory of ``pids`` that PSS leaves out: page tables (VmPTE) and a 16 KiB
    stack per thread (x86-64), in KiB."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmPTE:"):
                        total += int(line.split()[1])
                    elif line.startswith("Threads:"):
                        total += 16 * int(line.split()[1])
        except OSError:
            continue
    return total


def memory(side: Side, n: int, base: dict[str, int]) -> dict[str, Any]:
    """Idle memory of ``n`` sessions, per session, in MiB."""
    pids = side.session_pids()
    own = [smaps_kib(p) for p in pids["own"]]
    agents = [smaps_kib(p) for p in pids["agents"]]
    server = [smaps_kib(p) for p in side.server_pids()]
    avail = mem_available_kib()

    def per(kib: float) -> float:
        return round(kib / 1024 / n, 2)

    return {
        "own_pss_mib": per(sum(p for p, _ in own)),
        "own_rss_mib": per(sum(r for _, r in own)),
        "own_processes": len(own),
        "agent_pss_mib": per(sum(p for p, _ in agents)),
        "agent_rss_mib": per(sum(r for _, r in agents)),
        "agent_processes": len(agents),
        "kernel_mib": per(kernel_kib(pids["own"] + pids["agents"])),
        "server_pss_mib": round(sum(p for p, _ in server) / 1024, 1),
        "server_rss_mib": round(sum(r for _, r in server) / 1024, 1),
        "server_growth_pss_mib": per(sum(p for p, _ in server) - base["server_pss"]),
        "mem_available_mib": round(avail / 1024),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "mem_available_drop_mib": per(base["avail"] - avail),
    }


def ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "p50_ms": round(scale_load.pct(values, 0.5) * 1000, 1),
        "p99_ms": round(scale_load.pct(values, 0.99) * 1000, 1),
    }


def grow(side: Side, target: int, args: argparse.Namespace, deadline: float) -> dict[str, Any]:
    """Create and warm sessions up to ``target``; their times, and why it stopped short."""
    ready: list[float] = []
    warm: list[float] = []
    stop: dict[str, Any] = {}
    while len(side.sessions) < target:
        avail = mem_available_kib()
        if avail < args.floor_gib * 1024 * 1024:
            stop = {
                "reason": f"MemAvailable below {args.floor_gib} GiB",
                "mem_available_mib": avail // 1024,
            }
            break
        if time.monotonic() > deadline:
            stop = {"reason": f"--max-minutes {args.max_minutes} reached"}
            break
        i = len(side.sessions)
        try:
            created = side.create(i)
            t0 = time.perf_counter()
            asyncio.run(side.prompt(i))  # warm: Tether's owner starts its agent here
        except Exception as exc:
            stop = {"reason": f"session {i} failed: {type(exc).__name__}: {exc}"[:300]}
            break
        ready.append(created)
        warm.append(created + time.perf_counter() - t0)
    if stop:
        stop["sessions"] = len(side.sessions)
        print(
            f"{side.name}: stopped at {len(side.sessions)} sessions: {stop['reason']}",
            file=sys.stderr,
            flush=True,
        )
    return {"create_ready": ms(ready), "create_warm": ms(warm), "stopped": stop}


def run_side(side: Side, args: argparse.Namespace) -> dict[str, Any]:
    """Every size, then the concurrency sweep, on one server; its report."""
    time.sleep(args.settle)
    base = {
        "avail": mem_available_kib(),
        "server_pss": sum(smaps_kib(p)[0] for p in side.server_pids()),
    }
    report: dict[str, Any] = {
        "idle_server_pss_mib": round(base["server_pss"] / 1024, 1),
        "sizes": [],
        "concurrency": [],
    }
    deadline = time.monotonic() + args.max_minutes * 60
    for size in args.sizes:
        print(f"{side.name}: growing to {size} sessions", file=sys.stderr, flush=True)
        grown = grow(side, size, args, deadline)
        n = len(side.sessions)
        measured = report["sizes"][-1]["sessions"] if report["sizes"] else 0
        if n == measured:  # stopped before a session more: nothing new to measure
            report["stopped"] = grown["stopped"]
            break
        time.sleep(args.settle)  # idle: post-turn trims have run
        row: dict[str, Any] = {"sessions": n, "target": size, **memory(side, n, base)}
        row.update(idle_cpu(side, n, args.idle_seconds))
        row["create_ready"] = grown["create_ready"]
        row["create_warm"] = grown["create_warm"]
        row["load"] = asyncio.run(scale_load.offered_load(side.prompt, n, args.rate, args.duration))
        report["sizes"].append(row)
        print(f"{side.name}: {json.dumps(row)}", file=sys.stderr, flush=True)
        if grown["stopped"]:
            report["stopped"] = grown["stopped"]
            break
    n = len(side.sessions)
    pids = side.session_pids()
    groups = {"own": pids["own"], "agents": pids["agents"], "server": side.server_pids()}
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    for level in args.concurrency:
        if level > n:
            report["concurrency"].append({"in_flight": level, "skipped": f"only {n} sessions"})
            continue
        count = max(args.sweep_prompts, 3 * level)
        print(f"{side.name}: {level} in flight", file=sys.stderr, flush=True)
        before = {k: cpu_ticks(v) for k, v in groups.items()}
        row = asyncio.run(scale_load.in_flight(side.prompt, n, level, count, args.sweep_seconds))
        done = max(1, row.get("completed", 0))
        row["cpu_ms_per_prompt"] = {  # whose CPU the prompts took (what idles meanwhile too)
            k: round((cpu_ticks(v) - before[k]) * tick_ms / done, 3) for k, v in groups.items()
        }
        report["concurrency"].append({"sessions": n, **row})
    return report


def measure(make: Any, name: str, args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Start one server, measure it, end it (always); errors go into the report."""
    side = None
    try:
        side = make()
        report[name] = run_side(side, args)
    except Exception as exc:
        report.setdefault(name, {})["error"] = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        if side is not None:
            report.setdefault(name, {})["stop_errors"] = side.stop()


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])

    def ints(text: str) -> list[int]:
        return sorted({int(x) for x in text.split(",") if x.strip()})

    ap.add_argument("--sizes", type=ints, default=[10, 50, 100, 200, 500])
    ap.add_argument("--concurrency", type=ints, default=[1, 10, 50, 100, 200])
    ap.add_argument("--rate", type=float, default=20.0, help="offered load, prompts/s")
    ap.add_argument("--duration", type=float, default=15.0, help="offered load, seconds")
    ap.add_argument("--sweep-prompts", type=int, default=100, help="per level (>= 3 x level)")
    ap.add_argument("--sweep-seconds", type=float, default=60.0, help="per level, at most")
    ap.add_argument("--floor-gib", type=float, default=3.0, help="stop below this MemAvailable")
    ap.add_argument("--max-minutes", type=float, default=40.0, help="session creation, per server")
    ap.add_argument("--settle", type=float, default=3.0, help="idle seconds before memory")
    ap.add_argument("--idle-seconds", type=float, default=10.0, help="idle CPU window")
    ap.add_argument("--sandbox-agent", metavar="BIN", help="its Linux binary (default: .cache)")
    ap.add_argument("--no-peer", action="store_true", help="Tether alone")
    ap.add_argument(
        "--session-hosts", type=int, default=0, metavar="N", help="Tether's owners N to a host"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/scale")
    args = ap.parse_args()
    if not args.sizes or min(args.sizes) < 1 or max(args.sizes) > 1000:
        ap.error("--sizes: 1..1000")
    if not 0 < args.rate <= 1000 or not 0 < args.duration <= 600:
        ap.error("--rate 0..1000, --duration 0..600")
    return args


def main() -> int:
    args = parse_args()
    _proctree.become_subreaper()  # every owner, keeper and agent stays our descendant

    def on_term(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # through the finally blocks: servers end

    signal.signal(signal.SIGTERM, on_term)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    binary, why = (None, "--no-peer") if args.no_peer else sandbox_agent_binary(args.sandbox_agent)
    if binary is None:
        report["sandbox_agent_absent"] = why
        print(why, file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="tether-bench-scale-") as tmp:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            (Path(tmp) / "t").mkdir()
            config = f"[serve]\nsessionHosts = {args.session_hosts}\n" if args.session_hosts else ""
            side = lambda: TetherSide(Path(tmp) / "t", env, config)  # noqa: E731
            measure(side, "tether", args, report)
            if binary is not None:
                (Path(tmp) / "p").mkdir()
                time.sleep(args.settle)
                peer = lambda: PeerSide(binary, Path(tmp) / "p", env)  # noqa: E731
                measure(peer, "sandbox_agent", args, report)
        finally:  # also when interrupted: prove that nothing we started is left
            survivors = _proctree.wait_for_no_new_descendants(set(), timeout=30)
            report["survivors"] = sorted(survivors)
            if survivors:
                print(
                    f"survivors, killed by (pid, start time): {sorted(survivors)}", file=sys.stderr
                )
                _proctree.kill_verified(survivors)  # our descendants only
            after = _proctree.wait_for_no_new_descendants(set(), 10)
            report["survivors_after_kill"] = sorted(after)
    scale_report.write(report, args.out)
    print(f"wrote {args.out}.json, .md, .png, .svg; survivors: {report['survivors']}")
    return 1 if report["survivors"] else 0


if __name__ == "__main__":
    sys.exit(main())
