"""CPU per warm turn: the owner's and the gateway's (issue 23). Never in `make test`.

Usage::

    .venv/bin/python bench/turn_cpu.py                 # 300 warm turns per figure
    .venv/bin/python bench/turn_cpu.py --turns 1000
    .venv/bin/python bench/turn_cpu.py --profile 25    # + the top 25 functions of each
    .venv/bin/python bench/turn_cpu.py --profile 25 --profile-cli   # of CLI turns instead

The machine is shared, so the figures are CPU time, not wall time: user + system ticks
of the owner and of the gateway (``/proc/PID/stat``, all their threads) across N warm
turns of the bundled mock agent (``echo hi``: one chunk, then ``end_turn``), divided by
N. Latencies are printed only as context. One gateway on a temporary TETHER_HOME, one
session, prompted one turn at a time with ``bench/rawhttp.py`` (httpx's own CPU is not
the server's):

* ``sse``: ``POST …/prompt`` (202) on a kept connection, the turn's end read from one
  SSE stream kept open for the whole run (the cost of the prompt and of its relay);
* ``wait``: ``POST …/prompt?wait=true`` on a kept connection, answered at the turn's
  end (no stream), where the gateway has that route -- measured first, before any
  stream has made the gateway follow the session;
* ``cli``: the owner's CPU per ``tether prompt`` (the CLI's own process not counted);
* ``sparse`` (``--sparse-turns``): ``wait`` turns ``--gap`` seconds apart (a session
  prompted now and then: what the pauses cost -- cold caches, the trims after each
  turn -- lands on its turns);
* ``idle`` (``--idle S``): the gateway's and the idle owner's CPU per second and
  wakeups per second over S seconds of nothing, from ``schedstat`` (exact).

``--prompt TEXT`` prompts another mock verb (``"stream 50 x"``: 50 chunks a turn).

``--profile N`` runs a second gateway with ``TETHER_PROFILE_DIR`` set
(:mod:`tether._profile`): its owner (loop, journal writer and heartbeat threads) and the
gateway run under cProfile by thread CPU time, dump their stats when they end, and the
top N functions by own time and by cumulative time are printed, with each profile's CPU
seconds (the profiler's overhead inflates every figure of that run: read the shares).
``TURN_CPU_KEEP_PROFILES=DIR`` keeps the ``.prof`` files there for ``pstats``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import rawhttp
from serve import TETHER, Gw, cpu_s, env_for, leftovers

PROMPT = "echo hi"  # --prompt: e.g. "stream 50 x" for a turn of 50 chunks
GAP_S = 1.2  # --gap: the pause before each ``sparse`` turn


async def sse_turns(gw: Gw, sid: str, n: int) -> list[float]:
    """N turns: POST (kept connection), the end read from one kept SSE stream."""
    post = await rawhttp.Conn.open(gw.url)
    events = await rawhttp.Conn.open(gw.url)
    try:
        events._send("GET", f"/v1/sessions/{sid}/events?tail=0", gw.headers, b"")
        await events.reader.readuntil(b"\r\n\r\n")
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            status, r = await post.json(
                "POST", f"/v1/sessions/{sid}/prompt", gw.headers, {"prompt": PROMPT}
            )
            if status != 202:
                raise RuntimeError(f"refused: {status} {r}")
            marker = b'"kind":"turn_ended","requestId":"' + r["requestId"].encode()
            seen = b""
            while marker not in seen:
                data = await events.reader.read(65536)
                if not data:
                    raise ConnectionError("the stream ended")
                seen = seen[-len(marker) :] + data
            out.append(time.perf_counter() - t0)
        return out
    finally:
        post.close()
        events.close()


async def wait_turns(gw: Gw, sid: str, n: int, gap: float = 0.0) -> list[float]:
    """N turns: ``POST …/prompt?wait=true`` on a kept connection, answered at the end;
    ``gap`` seconds before each (``sparse``: what a turn costs when the session goes quiet
    between turns, and timers that a back-to-back run keeps pushing back fire)."""
    post = await rawhttp.Conn.open(gw.url)
    try:
        out = []
        for _ in range(n):
            if gap:
                await asyncio.sleep(gap)
            t0 = time.perf_counter()
            status, r = await post.json(
                "POST", f"/v1/sessions/{sid}/prompt?wait=true", gw.headers, {"prompt": PROMPT}
            )
            if status != 200 or r.get("stopReason") != "end_turn":
                raise RuntimeError(f"refused: {status} {r}")
            out.append(time.perf_counter() - t0)
        return out
    finally:
        post.close()


def cli_turns(home: Path, cwd: Path, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(
            [TETHER, "--cwd", str(cwd), "mock", "prompt", PROMPT],
            env=env_for(home),
            check=True,
            capture_output=True,
        )
        out.append(time.perf_counter() - t0)
    return out


def threads_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of ``pid``, by thread name (same names summed)."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:
            continue
        name = head.split("(", 1)[1] if tid != str(pid) else "main"
        fields = tail.split()
        ticks = int(fields[11]) + int(fields[12])
        out[name] = out.get(name, 0.0) + ticks / os.sysconf("SC_CLK_TCK")
    return out


def minor_faults(pid: int) -> int:
    """Pages ``pid`` faulted in so far (a page it touched that was not mapped: after a
    trim gave it back, the next turn maps it again)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def measure(gw: Gw, pids: dict[str, int], run: Any, n: int) -> dict[str, Any]:
    """CPU ms per turn of each pid (and of the owner's and the gateway's threads) across
    ``run()`` (N turns), and the latency p50."""
    before = {name: cpu_s(pid) for name, pid in pids.items()}
    split = [name for name in ("owner", "gateway") if name in pids]
    threads = {name: threads_cpu_s(pids[name]) for name in split}
    faults = minor_faults(pids["owner"])
    lat = run()
    out: dict[str, Any] = {
        f"{name}_cpu_ms_per_turn": round((cpu_s(pid) - before[name]) * 1000 / n, 3)
        for name, pid in pids.items()
    }
    for name in split:
        after, was = threads_cpu_s(pids[name]), threads[name]
        out[f"{name}_threads_cpu_ms_per_turn"] = {
            thread: round((t - was.get(thread, 0.0)) * 1000 / n, 3) for thread, t in after.items()
        }
    out["owner_page_faults_per_turn"] = round((minor_faults(pids["owner"]) - faults) / n, 1)
    out["latency_ms_p50"] = round(statistics.median(lat) * 1000, 2)
    return out


def run_ns_and_wakes(pid: int) -> tuple[int, int]:
    """Nanoseconds ``pid``'s live threads have run and how many times they were put on a
    CPU (``/proc/PID/task/TID/schedstat``: exact, where ``stat``'s ticks are 10 ms)."""
    ran = wakes = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                fields = f.read().split()
        except OSError:
            continue
        ran += int(fields[0])
        wakes += int(fields[2])
    return ran, wakes


def idle(pids: dict[str, int], seconds: float) -> dict[str, Any]:
    """What the gateway and the owner cost per second while nothing happens (after a
    settling pause: the trims after the last turn are not counted)."""
    time.sleep(3.0)
    before = {name: run_ns_and_wakes(pids[name]) for name in ("gateway", "owner")}
    time.sleep(seconds)
    out: dict[str, Any] = {"seconds": seconds}
    for name, (ran, wakes) in before.items():
        ran2, wakes2 = run_ns_and_wakes(pids[name])
        out[f"{name}_cpu_ms_per_s"] = round((ran2 - ran) / 1e6 / seconds, 3)
        out[f"{name}_wakeups_per_s"] = round((wakes2 - wakes) / seconds, 1)
    return out


def figures(
    home: Path, cwd: Path, n: int, cli_n: int, sparse_n: int = 0, idle_s: float = 0.0
) -> dict[str, Any]:
    """Each path's CPU per turn on a fresh gateway and session (``n`` 0: HTTP skipped)."""
    gw = Gw(home)
    report: dict[str, Any] = {}
    try:
        time.sleep(0.5)
        sid = gw.ensure(cwd)
        gw.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "echo warm"})
        deadline = time.monotonic() + 60
        while not (status := gw.http.get(f"/v1/sessions/{sid}").json()["status"])["agentPid"]:
            if time.monotonic() > deadline:
                raise RuntimeError("the agent did not start")
            time.sleep(0.05)
        pids = {"owner": status["ownerPid"], "gateway": gw.proc.pid, "agent": status["agentPid"]}
        # ``wait`` first: the hub the SSE turns open lingers, and would follow its turns.
        has_wait = gw.http.post(f"/v1/sessions/{sid}/prompt?wait=true", json={"prompt": "hi"})
        if n and has_wait.status_code == 200:
            asyncio.run(wait_turns(gw, sid, 20))
            report["wait"] = measure(gw, pids, lambda: asyncio.run(wait_turns(gw, sid, n)), n)
        if sparse_n and has_wait.status_code == 200:
            turns = lambda: asyncio.run(wait_turns(gw, sid, sparse_n, GAP_S))  # noqa: E731
            report["sparse"] = measure(gw, pids, turns, sparse_n)
        if n:
            asyncio.run(sse_turns(gw, sid, 20))
            report["sse"] = measure(gw, pids, lambda: asyncio.run(sse_turns(gw, sid, n)), n)
        if cli_n:
            cli_pids = {"owner": pids["owner"], "agent": pids["agent"]}
            cli_turns(home, cwd, 3)
            report["cli"] = measure(gw, cli_pids, lambda: cli_turns(home, cwd, cli_n), cli_n)
        if idle_s:
            report["idle"] = idle(pids, idle_s)
    finally:
        gw.stop()
    return report


def top(path: Path, count: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for order in ("tottime", "cumulative"):
        stats = pstats.Stats(str(path))
        total = stats.total_tt  # type: ignore[attr-defined]
        rows = []
        for func, (_cc, nc, tt, ct, _callers) in sorted(
            stats.stats.items(),  # type: ignore[attr-defined]
            key=lambda kv: -(kv[1][2] if order == "tottime" else kv[1][3]),
        )[:count]:
            where = f"{Path(func[0]).name}:{func[1]}({func[2]})"
            t = tt if order == "tottime" else ct
            rows.append(f"{100 * t / total:5.1f}%  {nc:>7}  {where}")
        out[order] = rows
    out["cpu_s"] = [f"{pstats.Stats(str(path)).total_tt:.3f}"]  # type: ignore[attr-defined]
    return out


def profiled(
    home: Path, cwd: Path, n: int, cli_n: int, count: int, sparse_n: int = 0
) -> dict[str, Any]:
    from tether._profile import ENV

    keep = os.environ.get("TURN_CPU_KEEP_PROFILES")  # a directory: the .prof files stay
    with tempfile.TemporaryDirectory(prefix="tether-prof-") as where:
        where = keep or where
        os.environ[ENV] = where
        try:
            figures(home, cwd, n, cli_n, sparse_n)
        finally:
            del os.environ[ENV]
        deadline = time.monotonic() + 30
        out: dict[str, Any] = {}
        while time.monotonic() < deadline:
            found = sorted(Path(where).glob("*.prof"))
            if {p.name.split("-")[0] for p in found} >= {"owner", "gateway"}:
                break
            time.sleep(0.2)
        for path in sorted(Path(where).glob("*.prof")):
            out[path.name] = top(path, count)
        return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--cli-turns", type=int, default=30)
    parser.add_argument("--prompt", default="echo hi", help="the mock agent's verb (echo hi)")
    parser.add_argument("--sparse-turns", type=int, default=0, help="``wait`` turns --gap apart")
    parser.add_argument("--gap", type=float, default=1.2, help="seconds between sparse turns")
    parser.add_argument(
        "--idle", type=float, default=10.0, help="seconds of the idle figure (0: none)"
    )
    parser.add_argument("--profile", type=int, metavar="TOP", default=0)
    parser.add_argument(
        "--profile-cli", action="store_true", help="profile CLI turns instead of HTTP ones"
    )
    args = parser.parse_args()
    global PROMPT, GAP_S
    PROMPT, GAP_S = args.prompt, args.gap
    report: dict[str, Any] = {"turns": args.turns, "prompt": PROMPT}
    with tempfile.TemporaryDirectory(prefix="tether-bench-turncpu-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        cwd = Path(tmp) / "project"
        cwd.mkdir()
        report.update(figures(home, cwd, args.turns, args.cli_turns, args.sparse_turns, args.idle))
        if args.profile:
            http_n, cli_n = (0, args.cli_turns) if args.profile_cli else (args.turns, 0)
            report["profile"] = profiled(
                home, cwd, http_n, cli_n, args.profile, 0 if args.profile_cli else args.sparse_turns
            )
        time.sleep(2)
    left = leftovers()
    report["leftover_processes"] = left
    print(json.dumps(report, indent=2))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
