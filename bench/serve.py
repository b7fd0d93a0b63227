"""``tether serve``: the HTTP gateway's speed and cost (issue 13). Never in `make test`.

Usage::

    .venv/bin/python bench/serve.py            # every figure (a few minutes)
    .venv/bin/python bench/serve.py --quick    # fewer runs, 20 sessions, 200 idle streams

Figures, in one run, against one gateway on a temporary TETHER_HOME with the bundled
mock agent:

* warm prompt round trip over HTTP: POST the prompt, then read the SSE stream from the
  returned ``fromSeq`` until the turn ends (a new stream per prompt), and the same with
  one stream kept open (httpx), and with ``bench/rawhttp.py`` (as the peer's
  ``http_rtt_raw_client``); next to the CLI's warm prompt on the same session; and
  ``POST …/prompt?wait=true`` (one request, answered at the turn's end: sandbox-agent's
  shape) with ``bench/rawhttp.py``, and the gateway's CPU per such prompt;
* SSE relay throughput: a 100,000-chunk turn read live by one stream client (updates/s
  from the first event to the turn's end; bounded by how fast the owner produces, so
  next to the prompting CLI's own rate, and the gateway's CPU seconds for it), and the
  same 100,000 entries replayed from the journal (the gateway's own relay capacity);
* N sessions (100; --quick 20) with one prompt each at once (``--bursts K``: K times,
  the median burst's figures, both servers): POST to turn end, p50/p99
  (and the same with ``?wait=true``, and the same N prompts sent by the bench straight
  to the owners, without HTTP or the gateway: ``owners_alone``, the owners' share),
  next to the same N prompts at once through the CLI (N processes). Sessions created and
  warmed first; both servers with ``bench/rawhttp.py`` (httpx's own CPU was most of it);
* gateway RSS: idle, after the concurrent prompts (peak, VmHWM), with the idle streams;
* idle SSE connections held (1,000; --quick 200): all connected, counted by the gateway.
* ``--session-hosts N``: the gateway runs its owners N to a session host
  (``serve.sessionHosts``; tether.sessionhost) instead of one process each;
  ``--only turns``: only the warm round trips and the bursts (for A/B runs of that);
* ``--memory``: only the gateway's RSS around one 2,000-chunk turn relayed to 300 and to
  1,000 idle streams (clients that never read): with the streams open, the peak (VmHWM),
  and after the streams closed (issue 21: no copy of the turn per stream, memory back).

With ``--sandbox-agent BIN`` the same figures for sandbox-agent 0.4.2 on the same mock
agent follow in the same run (``bench/serve_peer.py`` says how it runs and what differs).

Every process started carries TETHER_BENCH_RUN=<id>; at the end a /proc scan for that
marker proves nothing is left (found processes are reported, never killed by name).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import rawhttp

ROOT = Path(__file__).resolve().parent.parent
TETHER = str(Path(sys.executable).parent / "tether")
RUN_ID = uuid.uuid4().hex[:16]
MARK = "TETHER_BENCH_RUN"


def env_for(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"TETHER_HOME": str(home), MARK: RUN_ID, "PYTHONUNBUFFERED": "1"})
    return env


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Gw:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.proc = subprocess.Popen(
            [TETHER, "serve", "--port", "0", "--format", "json"],
            stdout=subprocess.PIPE,
            text=True,
            env=env_for(home),
        )
        assert self.proc.stdout is not None
        self.url = json.loads(self.proc.stdout.readline())["url"]
        self.token = (home / "serve-token").read_text().strip()
        self.headers = {"Authorization": f"Bearer {self.token}"}
        self.http = httpx.Client(base_url=self.url, headers=self.headers, timeout=120)

    def ensure(self, cwd: Path, name: str = "") -> str:
        r = self.http.post("/v1/sessions", json={"agent": "mock", "cwd": str(cwd), "name": name})
        r.raise_for_status()
        return str(r.json()["id"])

    def stop(self) -> None:
        for item in self.http.get("/v1/sessions").json()["sessions"]:
            self.http.delete(f"/v1/sessions/{item['id']}")
        self.http.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def read_until_end(lines: Any, rid: str) -> int:
    """Consume SSE lines until turn_ended of ``rid``; returns events seen."""
    n = 0
    for line in lines:
        if line.startswith("data: "):
            n += 1
            if '"kind":"turn_ended"' in line and rid in line:
                return n
    raise RuntimeError("stream ended before the turn")


def round_trips(gw: Gw, sid: str, runs: int) -> tuple[list[float], list[float]]:
    fresh, kept = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = gw.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "echo hi"}).json()
        with gw.http.stream("GET", f"/v1/sessions/{sid}/events?from={r['fromSeq']}") as s:
            read_until_end(s.iter_lines(), r["requestId"])
        fresh.append(time.perf_counter() - t0)
    with gw.http.stream("GET", f"/v1/sessions/{sid}/events?tail=0") as s:
        lines = s.iter_lines()
        for _ in range(runs):
            t0 = time.perf_counter()
            r = gw.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "echo hi"}).json()
            read_until_end(lines, r["requestId"])
            kept.append(time.perf_counter() - t0)
    return fresh, kept


def cli_warm(home: Path, cwd: Path, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(
            [TETHER, "--cwd", str(cwd), "mock", "prompt", "echo hi"],
            env=env_for(home),
            check=True,
            capture_output=True,
        )
        out.append(time.perf_counter() - t0)
    return out


def replay(gw: Gw, sid: str, first: int, count: int) -> float:
    """Stored entries relayed per second: a stream from ``first`` over ``count`` entries."""
    host, port = gw.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    t0 = time.perf_counter()
    sock.sendall(
        f"GET /v1/sessions/{sid}/events?from={first} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {gw.token}\r\n\r\n".encode()
    )
    seen = 0
    while seen < count:
        data = sock.recv(1 << 20)
        if not data:
            break
        seen += data.count(b"\nid: ") + data.startswith(b"id: ")
    elapsed = time.perf_counter() - t0
    sock.close()
    return seen / elapsed


def relay(gw: Gw, sid: str, home: Path, cwd: Path, chunks: int) -> tuple[float, float]:
    """(SSE updates/s at a stream client, updates/s at the prompting CLI)."""
    host, port = gw.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        f"GET /v1/sessions/{sid}/events?tail=0 HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {gw.token}\r\n\r\n".encode()
    )
    sock.recv(65536)  # headers and the first bytes
    cli = subprocess.Popen(
        [TETHER, "--cwd", str(cwd), "--format", "quiet", "mock", "prompt", f"stream {chunks} x"],
        env=env_for(home),
        stdout=subprocess.DEVNULL,
    )
    t_cli = time.perf_counter()
    first = None
    seen = 0
    tail = b""
    while True:
        data = sock.recv(1 << 20)
        if not data:
            break
        if first is None:
            first = time.perf_counter()
        seen += data.count(b"\nid: ") + data.startswith(b"id: ")
        tail = (tail + data)[-4096:]
        if b'"kind":"turn_ended"' in tail:
            break
    end = time.perf_counter()
    cli.wait()
    cli_s = time.perf_counter() - t_cli
    sock.close()
    assert first is not None
    return chunks / (end - first), chunks / cli_s


async def concurrent(gw: Gw, sids: list[str]) -> list[float]:
    """One prompt on each session at once, POST to turn end (``rawhttp``, as the peer's)."""
    return await rawhttp.timed(rawhttp.tether_prompt(gw.url, gw.headers, s) for s in sids)


async def owners_alone(home: Path, keys: list[str]) -> list[float]:
    """The same N prompts at once sent from this process straight to the sessions' owners,
    on the gateway's own path for a waited prompt (:class:`tether.serve.submit.Prompter`:
    connect, hello, the prompt, its frames to the turn's end), with no HTTP and no
    gateway: what the owners (and their agents) cost alone, next to the same prompts
    through the gateway."""
    from tether import operations
    from tether.serve.prompt_wait import TurnSummary
    from tether.serve.submit import Prompter

    os.environ["TETHER_HOME"] = str(home)  # where the owners' sockets are
    blocks = [{"type": "text", "text": "echo hi"}]
    payload = operations.prompt_payload(blocks, client="http", wait=False)
    prompter = Prompter(None)  # type: ignore[arg-type]  # no hub: the hello has the cursor
    t0 = time.perf_counter()

    async def one(key: str) -> float:
        turn = TurnSummary(key)
        ack = await prompter.prompt(key, payload, None, 1 << 24, turn)
        if ack is None or (turn.terminal or {}).get("type") != "result":
            raise RuntimeError(f"the owner of {key} did not answer the turn: {turn.terminal}")
        return time.perf_counter() - t0

    try:
        return list(await asyncio.gather(*(one(k) for k in keys)))
    finally:
        prompter.close_all()


def bursts(run: Any, count: int) -> dict[str, Any]:
    """``count`` bursts of N prompts at once (``run()`` is one, returning each prompt's
    seconds), 0.3 s apart: the median burst's p50 and p99, and each burst's. One burst of
    a hundred at once swings by a fifth between runs of the same code."""
    per: list[tuple[float, float]] = []
    for i in range(count):
        if i:
            time.sleep(0.3)
        lat = run()
        per.append((round(pct(lat, 0.5) * 1000, 1), round(pct(lat, 0.99) * 1000, 1)))
    return {
        "p50_ms": round(statistics.median(b[0] for b in per), 1),
        "p99_ms": round(statistics.median(b[1] for b in per), 1),
        "bursts": per,
    }


def report_bursts(report: dict[str, Any], name: str, figures: dict[str, Any]) -> None:
    report[f"{name}_p50_ms"] = figures["p50_ms"]
    report[f"{name}_p99_ms"] = figures["p99_ms"]
    if len(figures["bursts"]) > 1:
        report[f"{name}_bursts_p50_p99_ms"] = figures["bursts"]


def cli_concurrent(home: Path, cwd: Path, n: int) -> list[float]:
    """The same N warm prompts at once through the CLI (one process each)."""
    procs = []
    for i in range(n):
        t0 = time.perf_counter()
        cmd = [TETHER, "--cwd", str(cwd), "mock", "prompt", "-s", f"s{i}", "echo hi"]
        proc = subprocess.Popen(cmd, env=env_for(home), stdout=subprocess.DEVNULL)
        procs.append((t0, proc))
    out = []
    for t0, proc in procs:
        proc.wait()
        out.append(time.perf_counter() - t0)
    return out


def idle_streams(gw: Gw, sids: list[str], count: int) -> tuple[int, int]:
    """Open ``count`` idle SSE connections; (connections the gateway counts, RSS KiB)."""
    host, port = gw.url.removeprefix("http://").split(":")
    socks = []
    for i in range(count):
        sock = socket.create_connection((host, int(port)))
        sid = sids[i % len(sids)]
        sock.sendall(
            f"GET /v1/sessions/{sid}/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {gw.token}\r\n\r\n".encode()
        )
        socks.append(sock)
    deadline = time.monotonic() + 120
    held = 0
    while time.monotonic() < deadline:
        held = gw.http.get("/v1/health").json()["sseClients"]
        if held >= count:
            break
        time.sleep(0.5)
    rss = rss_kib(gw.proc.pid)
    for sock in socks:
        sock.close()
    return held, rss


def turn_to_idle_streams(gw: Gw, sid: str, count: int) -> dict[str, int]:
    """RSS (KiB) around one 2,000-chunk turn relayed to ``count`` streams that never read."""
    host, port = gw.url.removeprefix("http://").split(":")
    socks = []
    for _ in range(count):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(
            f"GET /v1/sessions/{sid}/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {gw.token}\r\n\r\n".encode()
        )
        socks.append(sock)
    deadline = time.monotonic() + 120
    while gw.http.get("/v1/health").json()["sseClients"] < count:
        if time.monotonic() > deadline:
            raise RuntimeError("the idle streams were not all held")
        time.sleep(0.2)
    out = {"rss_with_streams_kib": rss_kib(gw.proc.pid)}
    r = gw.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "stream 2000 x"}).json()
    with gw.http.stream("GET", f"/v1/sessions/{sid}/events?from={r['fromSeq']}") as s:
        read_until_end(s.iter_lines(), r["requestId"])
    time.sleep(1)
    out["rss_after_turn_kib"] = rss_kib(gw.proc.pid)
    out["rss_peak_kib"] = rss_kib(gw.proc.pid, "VmHWM")
    for sock in socks:
        sock.close()
    while gw.http.get("/v1/health").json()["sseClients"] > 0:
        if time.monotonic() > deadline + 60:
            raise RuntimeError("the closed streams were still counted")
        time.sleep(0.2)
    time.sleep(3)  # the gateway trims its memory once the relay is quiet
    out["rss_after_close_kib"] = rss_kib(gw.proc.pid)
    return out


def memory_only(home: Path, cwd: Path) -> dict[str, Any]:
    """``--memory``: a fresh gateway per stream count, so each peak is its own."""
    report: dict[str, Any] = {}
    for count in (300, 1000):
        gw = Gw(home)
        try:
            time.sleep(0.5)
            sid = gw.ensure(cwd)
            gw.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "echo warm"})
            time.sleep(1)
            report[f"streams_{count}"] = {
                "rss_idle_kib": rss_kib(gw.proc.pid),
                **turn_to_idle_streams(gw, sid, count),
            }
        finally:
            gw.stop()
    return report


def peer_figures(
    binary: str,
    tmp: Path,
    cwd: Path,
    runs: int,
    n_sessions: int,
    n_streams: int,
    n_bursts: int = 1,
    only: str = "all",
) -> dict[str, Any]:
    """The same figures for sandbox-agent (see bench/serve_peer.py for what differs).

    Each stage is reported on its own: a stage that fails or hangs (60 s per request)
    is recorded as its error, and the next one still runs.
    """
    sys.path.insert(0, str(Path(__file__).parent))
    import serve_peer

    out: dict[str, Any] = {}
    peer = serve_peer.Peer(binary, tmp, env_for(tmp / "home"), sys.executable)

    def stage(name: str, fn: Any) -> Any:
        print(f"sandbox-agent: {name}", file=sys.stderr, flush=True)
        try:
            return fn()
        except Exception as exc:
            out[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
            return None

    try:
        time.sleep(0.5)
        out["rss_idle_kib"] = rss_kib(peer.proc.pid)
        session = peer.session("warm", cwd)
        serve_peer.rtt(peer, "warm", session, 3)
        lat = stage("rtt", lambda: serve_peer.rtt(peer, "warm", session, runs))
        if lat:
            out["http_rtt_ms_p50"] = round(statistics.median(lat) * 1000, 1)
        calls = (rawhttp.peer_prompt(peer.url, "warm", session, 900 + i) for i in range(runs))
        lat = stage("rtt_raw", lambda: asyncio.run(rawhttp.sequential(calls)))
        if lat:
            out["http_rtt_raw_client_ms_p50"] = round(statistics.median(lat) * 1000, 1)
        pairs = stage(
            "sessions", lambda: [(f"s{i}", peer.session(f"s{i}", cwd)) for i in range(n_sessions)]
        )
        if pairs:
            stage("concurrent_cold", lambda: asyncio.run(serve_peer.concurrent(peer, pairs)))
            figures = stage(
                "concurrent",
                lambda: bursts(lambda: asyncio.run(serve_peer.concurrent(peer, pairs)), n_bursts),
            )
            if figures:
                report_bursts(out, f"concurrent_{n_sessions}", figures)
            out["rss_after_load_kib"] = rss_kib(peer.proc.pid)
            if only == "turns":
                return out
            held = stage(
                "idle_streams",
                lambda: serve_peer.idle_streams(peer, [s for s, _ in pairs[:10]], n_streams),
            )
            out[f"idle_streams_{n_streams}_held"] = held
            out[f"rss_with_{n_streams}_streams_kib"] = rss_kib(peer.proc.pid)
        relayed = stage("relay", lambda: serve_peer.relay(peer, "warm", session, 100_000))
        if relayed:
            out["sse_live_updates_per_s"] = round(relayed[0])
            out["sse_live_updates_received_of_100000"] = relayed[1]
            out["sse_live_prompt_post_returned"] = relayed[2]
        out["rss_peak_kib"] = rss_kib(peer.proc.pid, "VmHWM")
    finally:
        peer.stop()
    return out


def leftovers() -> list[int]:
    found = []
    needle = f"{MARK}={RUN_ID}".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def relay_figures(report: dict[str, Any], gw: Gw, sid: str, home: Path, cwd: Path) -> None:
    """The SSE relay: a 100,000-chunk turn live, then the same entries replayed."""
    before = gw.http.get(f"/v1/sessions/{sid}").json()["status"]["journalSeq"]
    cpu0 = cpu_s(gw.proc.pid)
    sse_rate, cli_rate = relay(gw, sid, home, cwd, 100_000)
    report["gateway_cpu_s_per_100k_live"] = round(cpu_s(gw.proc.pid) - cpu0, 2)
    report["sse_live_updates_per_s"] = round(sse_rate)
    report["cli_prompt_updates_per_s"] = round(cli_rate)
    report["sse_replay_updates_per_s"] = round(replay(gw, sid, before + 1, 100_000))


def rest(
    report: dict[str, Any],
    gw: Gw,
    home: Path,
    cwd: Path,
    sids: list[str],
    n_sessions: int,
    n_streams: int,
) -> None:
    """The CLI at once, the gateway's memory, the idle streams."""
    cli_lat = cli_concurrent(home, cwd, n_sessions)
    report[f"cli_concurrent_{n_sessions}_p50_ms"] = round(pct(cli_lat, 0.5) * 1000, 1)
    report[f"cli_concurrent_{n_sessions}_p99_ms"] = round(pct(cli_lat, 0.99) * 1000, 1)
    report["rss_after_load_kib"] = rss_kib(gw.proc.pid)
    report["rss_peak_kib"] = rss_kib(gw.proc.pid, "VmHWM")
    held, rss = idle_streams(gw, sids[:10], n_streams)
    report[f"idle_streams_{n_streams}_held"] = held
    report[f"rss_with_{n_streams}_streams_kib"] = rss


def owner_pid(gw: Gw, sid: str) -> int:
    return int(gw.http.get(f"/v1/sessions/{sid}").json()["status"]["ownerPid"])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--sandbox-agent",
        metavar="BIN",
        help="also measure sandbox-agent 0.4.2 (its Linux binary) on the same mock agent",
    )
    parser.add_argument("--memory", action="store_true", help="only the memory figures")
    parser.add_argument(
        "--session-hosts",
        type=int,
        default=0,
        metavar="N",
        help="the gateway's owners N to a session host (serve.sessionHosts; 0: off)",
    )
    parser.add_argument(
        "--only",
        choices=("all", "turns"),
        default="all",
        help="turns: only the warm round trips and the bursts",
    )
    parser.add_argument(
        "--bursts",
        type=int,
        default=1,
        metavar="K",
        help="N prompts at once K times (0.3 s apart): the median burst's p50 and p99",
    )
    args = parser.parse_args()
    runs = 10 if args.quick else 30
    n_sessions = 20 if args.quick else 100
    n_streams = 200 if args.quick else 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tether-bench-serve-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        cwd = Path(tmp) / "project"
        cwd.mkdir()
        if args.session_hosts:
            (home / "config.toml").write_text(f"[serve]\nsessionHosts = {args.session_hosts}\n")
            os.chmod(home / "config.toml", 0o600)
            report["session_hosts"] = args.session_hosts
        if args.memory:
            report = memory_only(home, cwd)
            time.sleep(2)
            left = leftovers()
            report["leftover_processes"] = left
            print(json.dumps(report, indent=2))
            return 1 if left else 0
        gw = Gw(home)
        try:
            time.sleep(0.5)
            report["rss_idle_kib"] = rss_kib(gw.proc.pid)
            sid = gw.ensure(cwd)
            gw.http.post(f"/v1/sessions/{sid}/prompt", json={"prompt": "echo warm"})
            fresh, kept = round_trips(gw, sid, 3)  # warm-up
            cpu0 = cpu_s(gw.proc.pid)  # CPU time: the machine is shared, wall time is noisy
            fresh, kept = round_trips(gw, sid, runs)
            report["gateway_cpu_ms_per_rtt"] = round((cpu_s(gw.proc.pid) - cpu0) * 500 / runs, 2)
            cli = cli_warm(home, cwd, runs) if args.only == "all" else [0.0]
            report["http_rtt_ms_p50"] = round(statistics.median(fresh) * 1000, 1)
            report["http_rtt_kept_stream_ms_p50"] = round(statistics.median(kept) * 1000, 1)
            calls = (rawhttp.tether_prompt(gw.url, gw.headers, sid) for _ in range(runs))
            raw = asyncio.run(rawhttp.sequential(calls))  # httpx's own time left out
            report["http_rtt_raw_client_ms_p50"] = round(statistics.median(raw) * 1000, 1)
            calls = (rawhttp.tether_prompt_wait(gw.url, gw.headers, sid) for _ in range(runs))
            cpu0 = cpu_s(gw.proc.pid)
            waited = asyncio.run(rawhttp.sequential(calls))
            cpu_ms = (cpu_s(gw.proc.pid) - cpu0) * 1000 / runs
            report["http_rtt_wait_ms_p50"] = round(statistics.median(waited) * 1000, 1)
            report["gateway_cpu_ms_per_wait_prompt"] = round(cpu_ms, 2)
            if args.only == "all":
                report["cli_warm_prompt_ms_p50"] = round(statistics.median(cli) * 1000, 1)
                relay_figures(report, gw, sid, home, cwd)
            sids = [gw.ensure(cwd, name=f"s{i}") for i in range(n_sessions)]
            asyncio.run(concurrent(gw, sids))  # cold: owners start their agents
            cpu0 = cpu_s(gw.proc.pid)
            sse = bursts(lambda: asyncio.run(concurrent(gw, sids)), args.bursts)
            cpu_ms = (cpu_s(gw.proc.pid) - cpu0) * 1000 / n_sessions / args.bursts
            report["gateway_cpu_ms_per_concurrent_prompt"] = round(cpu_ms, 1)
            report_bursts(report, f"concurrent_{n_sessions}", sse)

            def waited() -> list[float]:
                calls = (rawhttp.tether_prompt_wait(gw.url, gw.headers, s) for s in sids)
                return asyncio.run(rawhttp.timed(calls))

            report_bursts(report, f"concurrent_{n_sessions}_wait", bursts(waited, args.bursts))
            alone = bursts(lambda: asyncio.run(owners_alone(home, sids)), args.bursts)
            report_bursts(report, f"concurrent_{n_sessions}_owners_alone", alone)
            report["owner_processes"] = len({owner_pid(gw, s) for s in sids})
            if args.only == "all":
                rest(report, gw, home, cwd, sids, n_sessions, n_streams)
        finally:
            gw.stop()
        if args.sandbox_agent:
            report["sandbox_agent"] = peer_figures(
                args.sandbox_agent,
                Path(tmp),
                cwd,
                runs,
                n_sessions,
                n_streams,
                args.bursts,
                args.only,
            )
        time.sleep(2)
    left = leftovers()
    report["leftover_processes"] = left
    print(json.dumps(report, indent=2))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
