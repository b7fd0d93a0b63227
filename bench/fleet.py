"""The fleet (issue 24): a router's cost, host-loss detection, the index, and many sessions.

Usage::

    .venv/bin/python bench/fleet.py                  # every figure (a few minutes)
    .venv/bin/python bench/fleet.py --sessions 1000  # the issue's full size, memory allowing
    .venv/bin/python bench/fleet.py --quick          # fewer runs, 30 sessions

Needs the fleet extra (``psycopg``), the serve extra and Debian's ``postgresql`` server
binaries; ``make bench`` needs none of them. Everything is real and on loopback, in one
run: a PostgreSQL started by ``tests/fleet/_pg.py``, three hosts (``tether serve
--fleet-index``, each with its own ``TETHER_HOME``) and two routers (``tether serve
--router``), all started here and ended here by their pids.

Figures, in order:

* **index**: on its own database, 10,000 sessions over 50 hosts; N ``FleetIndex.session``
  lookups and N heartbeats, one connection, one after the other (per-call latency and
  calls/s);
* **routed vs direct warm prompt**: the same session, the same request (POST the prompt,
  then its SSE stream from ``fromSeq`` until ``turn_ended``, a new connection each, the
  ``bench/rawhttp.py`` client of ``bench/serve.py``) through a router with the users'
  token and straight to the host with the fleet credential, alternating;
* **routed warm prompt, host over TLS vs plain**: a 4th host serving HTTPS (a throwaway
  CA made as the tests make it) behind a router with ``--fleet-ca``, against the plain
  host of the figure above through its router, alternating (users reach both routers
  over plain HTTP); the TLS host and its router are retired after;
* **N sessions over 3 hosts through 2 routers**: created (owner started), prompted once
  at once through the other router (its agent starts: cold), then once more each (warm),
  at most ``--concurrency`` in flight; creation stops early, saying so, if the machine's
  MemAvailable falls below ``--mem-floor-gib`` (each session costs ~26 MiB: the 1,000 of
  the issue do not fit a 24 GiB machine);
* **host loss**: a host SIGKILLed, then another SIGSTOPped (each with one session and an
  open SSE stream through a router): time from the signal to the first ``503`` answered
  to a ``GET /v1/sessions/{id}`` sent every ``--probe-ms``, and to ``event: host_lost``
  on the open stream (bounded: TTL + 5 s; the frozen host is resumed after).

Results: printed as a table and written to ``bench/results/fleet.json`` (git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

import fleet_loss
import fleet_procs
import rawhttp
from fleet_loss import ROUTER_TTL_S
from fleet_procs import FLEET_TOKEN, USER_TOKEN, Fleet, Server
from serve import cpu_s, pct

from tether.fleet.index import Capacity, FleetIndex

RESULTS = Path(__file__).resolve().parent / "results"
OP_TIMEOUT_S = 120.0
USER = {"Authorization": f"Bearer {USER_TOKEN}"}
FLEET = {"Authorization": f"Bearer {FLEET_TOKEN}"}


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def summary(values: list[float]) -> dict[str, Any]:
    """n, p50, p99, max in ms."""
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50_ms": ms(pct(values, 0.5)), "p99_ms": ms(pct(values, 0.99)),
            "max_ms": ms(max(values))}  # fmt: skip


# --- the index -------------------------------------------------------------------------


def index_figures(fleet: Fleet, n_ops: int) -> dict[str, Any]:
    dsn = fleet.pg.create_database("bench_index")
    hosts, sessions = 50, 10_000
    with FleetIndex.connect(dsn) as index:
        epochs = {f"h{i}": index.register_host(f"h{i}", f"http://127.0.0.1:{9000 + i}")
                  for i in range(hosts)}  # fmt: skip
        t0 = time.perf_counter()
        ids = []
        for i in range(sessions):
            host = f"h{i % hosts}"
            row, _ = index.ensure_session(scope="bench", agent="mock", cwd="/p", name=f"s{i}",
                                          host_id=host, host_epoch=epochs[host])  # fmt: skip
            ids.append(row.session_id)
        ensure_s = time.perf_counter() - t0
        rng = random.Random(24)
        lookups, beats = [], []
        cap = Capacity(sessions=200, memory_total=24 << 30, memory_available=20 << 30)
        for i in range(n_ops):
            sid = rng.choice(ids)
            t = time.perf_counter()
            index.session(sid)
            lookups.append(time.perf_counter() - t)
            host = f"h{i % hosts}"
            t = time.perf_counter()
            index.heartbeat(host, epochs[host], cap)
            beats.append(time.perf_counter() - t)
    return {
        "hosts": hosts, "sessions": sessions,
        "ensure_per_s": round(sessions / ensure_s),
        "lookup": {**summary(lookups), "per_s": round(len(lookups) / sum(lookups))},
        "heartbeat": {**summary(beats), "per_s": round(len(beats) / sum(beats))},
    }  # fmt: skip


# --- routed vs direct ------------------------------------------------------------------


Leg = tuple[str, dict[str, str], str]  # (URL, headers, session id) of one warm prompt


async def alternating(a: Leg, b: Leg, runs: int, cpu_pid: int) -> tuple[Any, Any, float]:
    """Warm prompts on two legs, alternating which goes first; (a's summary, b's summary,
    seconds of ``cpu_pid``'s CPU per prompt of leg ``a``)."""
    for _ in range(5):  # warm both paths (a router's pooled host connection included)
        for url, headers, sid in (a, b):
            await rawhttp.tether_prompt(url, headers, sid)
    times: tuple[list[float], list[float]] = ([], [])
    cpu = 0.0
    for i in range(runs):
        legs = [(0, a), (1, b)]
        for which, (url, headers, sid) in legs if i % 2 == 0 else legs[::-1]:
            c0 = cpu_s(cpu_pid)
            t0 = time.perf_counter()
            await rawhttp.tether_prompt(url, headers, sid)
            times[which].append(time.perf_counter() - t0)
            if which == 0:
                cpu += cpu_s(cpu_pid) - c0
    return summary(times[0]), summary(times[1]), cpu / runs


async def routed_vs_direct(router: Server, host: Server, sid: str, runs: int) -> dict[str, Any]:
    r, d, cpu = await alternating(
        (router.url, USER, sid), (host.url, FLEET, sid), runs, router.proc.pid
    )
    return {
        "routed": r, "direct": d,
        "p50_added_ms": round(r["p50_ms"] - d["p50_ms"], 2),
        "p99_added_ms": round(r["p99_ms"] - d["p99_ms"], 2),
        "p50_ratio": round(r["p50_ms"] / d["p50_ms"], 3),
        "router_cpu_ms_per_prompt": round(cpu * 1000, 2),
    }  # fmt: skip


async def routed_tls_vs_plain(
    tls_router: Server, tls_sid: str, router: Server, sid: str, runs: int
) -> dict[str, Any]:
    """The same routed warm prompt to a host over TLS (a router with --fleet-ca) and to
    one over plain HTTP, alternating; the users reach both routers over plain HTTP."""
    t, p, cpu = await alternating(
        (tls_router.url, USER, tls_sid), (router.url, USER, sid), runs, tls_router.proc.pid
    )
    return {
        "tls": t, "plain": p,
        "p50_added_ms": round(t["p50_ms"] - p["p50_ms"], 2),
        "p99_added_ms": round(t["p99_ms"] - p["p99_ms"], 2),
        "tls_router_cpu_ms_per_prompt": round(cpu * 1000, 2),
    }  # fmt: skip


def tls_stage(fleet: Fleet, plain_sid: str, runs: int) -> dict[str, Any]:
    """A 4th host serving TLS (a throwaway CA, as the tests make it) and a router that
    trusts it; both are retired after, so the later stages see the plain fleet."""
    import ssl

    from tests._certs import CertificateAuthority

    pki = fleet.base / "pki"
    pki.mkdir()
    ca = CertificateAuthority(pki)
    leaf = ca.issue("htls")
    verify = ssl.create_default_context(cafile=str(ca.path))
    tls_flags = ("--tls-cert", str(leaf.cert), "--tls-key", str(leaf.key))
    host = fleet.host("htls", "tls=yes", extra=tls_flags, verify=verify)
    router = fleet.router("--fleet-ca", str(ca.path))
    try:
        fleet.wait_available("htls")
        body = {"agent": "mock", "cwd": str(fleet.project), "name": "warm-tls",
                "labels": {"tls": "yes"}}  # fmt: skip
        created = router.http.post("/v1/sessions", json=body)
        created.raise_for_status()
        sid = created.json()["id"]
        return asyncio.run(routed_tls_vs_plain(router, sid, fleet.routers[0], plain_sid, runs))
    finally:
        fleet.retire(router)
        fleet.retire(host)


# --- many sessions ---------------------------------------------------------------------


async def bounded(jobs: list[Any], concurrency: int) -> tuple[list[float], list[str], float]:
    """Run the jobs (coroutine factories), at most ``concurrency`` at once; (each one's
    seconds, errors, wall seconds)."""
    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []
    errors: list[str] = []

    async def one(job: Any) -> None:
        async with sem:
            t0 = time.perf_counter()
            try:
                async with asyncio.timeout(OP_TIMEOUT_S):
                    await job()
                lat.append(time.perf_counter() - t0)
            except (OSError, RuntimeError, TimeoutError, ValueError) as e:
                errors.append(f"{type(e).__name__}: {e}"[:200])

    t0 = time.perf_counter()
    await asyncio.gather(*(one(j) for j in jobs))
    return lat, errors, time.perf_counter() - t0


async def many_sessions(fleet: Fleet, n: int, concurrency: int, floor_kib: int) -> dict[str, Any]:
    """Each session created through one router and prompted at once through the other
    (the prompt starts its agent); the memory floor is checked before each, so it sees
    every agent started so far. Then one warm prompt each, then every session closed."""
    routers = fleet.routers
    sids: list[str] = []
    created: list[float] = []
    cold: list[float] = []
    stopped_early = None
    mem0 = fleet_procs.mem_available_kib()

    def start(i: int) -> Any:
        async def job() -> None:
            nonlocal stopped_early
            if stopped_early is not None:
                return
            if fleet_procs.mem_available_kib() < floor_kib:
                stopped_early = f"MemAvailable fell below the floor at {len(sids)} sessions"
                return
            body = {"agent": "mock", "cwd": str(fleet.project), "name": f"s{i}"}
            t0 = time.perf_counter()
            status, doc = await rawhttp.request(
                routers[i % 2].url, "POST", "/v1/sessions", USER, body
            )
            if status not in (200, 201):
                raise RuntimeError(f"create answered {status}: {doc}")
            created.append(time.perf_counter() - t0)
            sids.append(str(doc["id"]))
            t0 = time.perf_counter()
            await rawhttp.tether_prompt(routers[(i + 1) % 2].url, USER, sids[-1])
            cold.append(time.perf_counter() - t0)

        return job

    out: dict[str, Any] = {"requested": n, "concurrency": concurrency}
    _lat, errors, wall = await bounded([start(i) for i in range(n)], concurrency)
    out["created"] = len(sids)
    out["stopped_early"] = stopped_early
    out["started_per_s"] = round(len(cold) / wall, 1)
    out["create"] = {**summary(created), "errors": errors[:5], "n_errors": len(errors)}
    out["prompt_cold"] = summary(cold)
    jobs = [
        (lambda i=i, sid=sid: rawhttp.tether_prompt(routers[i % 2].url, USER, sid))
        for i, sid in enumerate(sids)
    ]
    lat, errors, wall = await bounded(jobs, concurrency)
    out["prompt_warm"] = {**summary(lat), "per_s": round(len(lat) / wall, 1),
                          "errors": errors[:5], "n_errors": len(errors)}  # fmt: skip
    pids = fleet_procs.descendant_pids()
    out["processes"] = len(pids)
    out["pss_all_mib"] = round(fleet_procs.pss_kib(pids) / 1024)
    out["mem_available_drop_mib"] = round((mem0 - fleet_procs.mem_available_kib()) / 1024)
    if sids:
        out["pss_per_session_mib"] = round(out["pss_all_mib"] / len(sids), 1)
    by_host: dict[str, int] = {}
    for s in routers[0].http.get("/v1/sessions").json()["sessions"]:
        by_host[s["hostId"]] = by_host.get(s["hostId"], 0) + 1
    out["sessions_by_host"] = by_host
    jobs = [
        (
            lambda i=i, sid=sid: rawhttp.request(
                routers[i % 2].url, "DELETE", f"/v1/sessions/{sid}", USER
            )
        )
        for i, sid in enumerate(sids)
    ]
    lat, errors, wall = await bounded(jobs, concurrency)
    out["close"] = {**summary(lat), "wall_s": round(wall, 1), "n_errors": len(errors)}
    return out


# --- the run ---------------------------------------------------------------------------


def run(args: argparse.Namespace, fleet: Fleet, report: dict[str, Any]) -> None:
    def stage(name: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {name}", file=sys.stderr, flush=True)

    stage("PostgreSQL")
    fleet.start_index()
    stage("index throughput")
    report["index"] = index_figures(fleet, args.index_ops)
    stage("3 hosts, 2 routers")
    for i in range(3):
        fleet.host(f"h{i + 1}")
    fleet.router()
    fleet.router()
    fleet.wait_available("h1", "h2", "h3")
    stage("routed vs direct warm prompt")
    r0 = fleet.routers[0]
    created = r0.http.post("/v1/sessions", json={"agent": "mock", "cwd": str(fleet.project),
                                                 "name": "warm"})  # fmt: skip
    created.raise_for_status()
    sid = created.json()["id"]
    listed = {s["id"]: s["hostId"] for s in r0.http.get("/v1/sessions").json()["sessions"]}
    host = fleet.hosts[listed[sid]]
    report["warm_prompt"] = asyncio.run(routed_vs_direct(r0, host, sid, args.runs))
    stage("routed warm prompt, host over TLS vs plain")
    report["warm_prompt_tls"] = tls_stage(fleet, sid, args.runs)
    r0.http.delete(f"/v1/sessions/{sid}")
    stage(f"{args.sessions} sessions through 2 routers")
    floor = int(args.mem_floor_gib * 1024 * 1024)
    report["many"] = asyncio.run(many_sessions(fleet, args.sessions, args.concurrency, floor))
    for kind in ("kill", "stop"):
        stage(f"host loss: {kind}")
        report[f"host_loss_{kind}"] = asyncio.run(
            fleet_loss.host_loss(fleet, kind, args.probe_ms / 1000)
        )


def _pq(o: dict[str, Any]) -> str:
    return f"{o.get('p50_ms')} / {o.get('p99_ms')}"


def table(report: dict[str, Any]) -> str:
    w, ix, m = report.get("warm_prompt", {}), report.get("index", {}), report.get("many", {})
    rows = [("figure", "value", "goal")]
    if w:
        rows += [
            ("warm prompt routed p50 / p99 (ms)", _pq(w["routed"]), ""),
            ("warm prompt direct p50 / p99 (ms)", _pq(w["direct"]), ""),
            ("router adds p50 / p99 (ms)", f"{w['p50_added_ms']} / {w['p99_added_ms']}", "+1 / +3"),
            ("routed:direct p50", str(w["p50_ratio"]), ""),
            ("router CPU per routed prompt (ms)", str(w["router_cpu_ms_per_prompt"]), ""),
        ]
    t = report.get("warm_prompt_tls", {})
    if t:
        rows += [
            ("routed to a TLS host p50 / p99 (ms)", _pq(t["tls"]), ""),
            ("routed to a plain host p50 / p99 (ms)", _pq(t["plain"]), ""),
            ("TLS adds p50 / p99 (ms)", f"{t['p50_added_ms']} / {t['p99_added_ms']}", ""),
            ("TLS router CPU per prompt (ms)", str(t["tls_router_cpu_ms_per_prompt"]), ""),
        ]
    for kind, goal in (("kill", "<= 0.1 s"), ("stop", f"<= {ROUTER_TTL_S + 1} s (TTL + 1 s)")):
        h = report.get(f"host_loss_{kind}")
        if h:
            rows.append((f"host {h['signal']}: process gone (s)", str(h["host_exited_s"]), ""))
            rows.append((f"host {h['signal']}: to first 503 (s)", str(h["first_503_s"]), goal))
            lost = h["host_lost_s"] if h["host_lost_s"] is not None else f"none in {h['bound_s']} s"
            rows.append((f"host {h['signal']}: to host_lost on the stream (s)", str(lost), goal))
    if ix:
        for op in ("lookup", "heartbeat"):
            o = ix[op]
            rows.append((f"index {op}: per s (p50 / p99 ms)", f"{o['per_s']} ({_pq(o)})", ""))
    if m:
        rows.append(("sessions created / asked", f"{m['created']} / {m['requested']}", "1,000"))
        rows.append(("sessions created and first-prompted per s", str(m["started_per_s"]), ""))
        for k in ("create", "prompt_cold", "prompt_warm", "close"):
            o = m[k]
            rows.append((f"{k}: per s, p50 / p99 (ms)", f"{o.get('per_s', '-')}, {_pq(o)}", ""))
        per = str(m.get("pss_per_session_mib"))
        rows.append(("PSS per session (MiB, all processes / sessions)", per, ""))
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{a:<{width}}  {b:<28}  {c}" for a, b, c in rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer runs, 30 sessions")
    ap.add_argument("--runs", type=int, help="warm prompts per side (300; --quick 50)")
    ap.add_argument("--sessions", type=int, help="sessions over the 3 hosts (300; --quick 30)")
    ap.add_argument("--concurrency", type=int, default=8, help="operations in flight")
    ap.add_argument("--index-ops", type=int, help="lookups, heartbeats (10,000; --quick 2,000)")
    ap.add_argument("--probe-ms", type=float, default=20.0, help="503 probe interval")
    ap.add_argument("--mem-floor-gib", type=float, default=8.0,
                    help="stop creating sessions below this MemAvailable")  # fmt: skip
    ap.add_argument("--out", type=Path, default=RESULTS / "fleet.json")
    args = ap.parse_args()
    for name, full, quick in (
        ("runs", 300, 50),
        ("sessions", 300, 30),
        ("index_ops", 10_000, 2000),
    ):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))

    def interrupted(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["bench/fleet.py", *sys.argv[1:]]),
        "python": platform.python_version(), "cores": os.cpu_count(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "router_ttl_s": ROUTER_TTL_S,
    }  # fmt: skip
    fleet = Fleet()
    failed = None
    try:
        run(args, fleet, report)
    except (Exception, KeyboardInterrupt) as e:
        failed = f"{type(e).__name__}: {e}"
        report["failed"] = failed
    finally:
        report["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        report["cleanup"] = fleet.end()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    print(
        json.dumps({k: report.get(k) for k in ("date", "load_avg_at_start", "failed", "cleanup")})
    )
    print(f"written to {args.out}", file=sys.stderr)
    left = report["cleanup"]["survivors_after_kill"]
    return 1 if failed or left else 0


if __name__ == "__main__":
    sys.exit(main())
