"""Tether vs acpx 0.19.1: the benchmark behind ``make bench`` (never part of ``make test``).

Usage::

    .venv/bin/python bench/run.py                 # everything (several minutes)
    .venv/bin/python bench/run.py --quick         # fewer runs, smaller load: for iteration
    .venv/bin/python bench/run.py --only warm     # one figure (repeatable flag)
    .venv/bin/python bench/run.py --no-acpx       # Tether figures only

Both tools drive the SAME agent command, the bundled mock agent
(``<this python> -m tether.testing.mock_agent``), through their CLIs, each with its own
temporary HOME (and TETHER_HOME / TMPDIR), in alternating A/B order. acpx is installed,
pinned, into ``bench/.acpx/`` (git-ignored); without Node or npm its columns say why and
the Tether figures are still produced.

Everything the benchmark starts carries ``TETHER_BENCH_RUN=<run id>`` in its environment
(owners and agents inherit it). At the end a /proc scan for that marker proves nothing is
left; whatever is found is reported and, only after its pid + starttime are re-checked,
killed through a pidfd. Processes are never matched by name or command line.

Standard library only (plus tether itself, for nothing but the agent command).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
ACPX_DIR = BENCH / ".acpx"
ACPX_VERSION = "0.19.1"
ACPX_CLI = ACPX_DIR / "node_modules" / "acpx" / "dist" / "cli.js"
RESULTS = BENCH / "results"
PY = sys.executable
TETHER_BIN = Path(PY).parent / "tether"
AGENT = f"{PY} -m tether.testing.mock_agent"
RUN_ID = uuid.uuid4().hex[:16]
MARK = "TETHER_BENCH_RUN"
CASE = "TETHER_BENCH_CASE"
CMD_TIMEOUT = 120.0

FIGURES = ("version", "new", "cold", "warm", "cancel", "close", "stream", "rss", "load")
SPAWNED_RE = re.compile(r"spawned pid=(\d+)")


# --- /proc helpers: identity by pid + starttime, never by name ------------------------


def starttime(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    if fields[0] == b"Z":
        return None  # a zombie has exited; it only waits to be reaped
    return int(fields[19])


def alive(pid: int, start: int | None) -> bool:
    return start is not None and starttime(pid) == start


def environ_has(pid: int, needle: bytes) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return needle in env.split(b"\0")


def marker_scan(key: str, value: str) -> dict[int, int]:
    """Live processes whose environment holds ``key=value``: pid -> starttime."""
    needle = f"{key}={value}".encode()
    found: dict[int, int] = {}
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        if environ_has(pid, needle):
            st = starttime(pid)
            if st is not None:
                found[pid] = st
    return found


def describe(pid: int) -> str:
    """For the report only (never used to pick a process): ppid, state and argv."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
    except OSError:
        return "gone"
    fields = stat[stat.rindex(b")") + 2 :].split()
    text = argv.decode(errors="replace")[:160]
    return f"ppid {int(fields[1])} state {fields[0].decode()} argv {text}"


def vm_rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def kill_verified(pid: int, start: int) -> bool:
    """SIGKILL exactly this process (pid + starttime) through a pidfd; True if it is gone."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return True
    try:
        if starttime(pid) != start:  # checked after the pidfd pins the process
            return True
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        select.select([fd], [], [], 5.0)  # readable once it has exited
    except OSError:
        pass
    finally:
        os.close(fd)
    return starttime(pid) != start


def wait_gone(pid: int, start: int | None, timeout: float) -> bool:
    """Wait (event-driven, pidfd) until pid+start has exited."""
    if not alive(pid, start):
        return True
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return True
    try:
        if starttime(pid) == start:
            select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    return not alive(pid, start)


# --- the two tools ------------------------------------------------------------------


class Tool:
    name = ""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.available = True
        self.reason = ""
        self._n = 0

    def home(self) -> Path:
        self._n += 1
        home = self.root / f"{self.name}-home-{self._n}"
        (home / "tmp").mkdir(parents=True)
        return home

    def env(self, home: Path, case: str = "") -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TETHER_", "ACPX_")) and k not in ("HOME", "TMPDIR")
        }
        env.update({"HOME": str(home), "TMPDIR": str(home / "tmp"), MARK: RUN_ID})
        if case:
            env[CASE] = case
        return env

    def base(self) -> list[str]:
        raise NotImplementedError

    def argv(self, cwd: Path, *args: str) -> list[str]:
        return [*self.base(), "--agent", AGENT, "--approve-all", "--cwd", str(cwd), *args]

    def owner_pid(self, home: Path, cwd: Path, name: str | None, case: str = "") -> int | None:
        raise NotImplementedError

    def named(self, name: str | None) -> list[str]:
        return ["-s", name] if name else []

    def close_args(self, name: str | None) -> list[str]:
        return ["sessions", "close", *([name] if name else [])]


class Tether(Tool):
    name = "tether"

    def env(self, home: Path, case: str = "") -> dict[str, str]:
        env = super().env(home, case)
        env["TETHER_HOME"] = str(home)
        return env

    def base(self) -> list[str]:
        return [str(TETHER_BIN)]

    def status(self, home: Path, cwd: Path, name: str | None, case: str = "") -> dict[str, Any]:
        r = run(self, home, cwd, "--format", "json", "status", *self.named(name), case=case)
        try:
            return json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {}

    def owner_pid(self, home: Path, cwd: Path, name: str | None, case: str = "") -> int | None:
        pid = self.status(home, cwd, name, case).get("ownerPid")
        return pid if isinstance(pid, int) else None


class Acpx(Tool):
    name = "acpx"

    def base(self) -> list[str]:
        return ["node", str(ACPX_CLI)]

    def owner_pid(self, home: Path, cwd: Path, name: str | None, case: str = "") -> int | None:
        r = run(self, home, cwd, "status", *self.named(name), case=case)
        m = re.search(r"^pid: (\d+)$", r.stdout, re.M)
        return int(m.group(1)) if m else None


def install_acpx(tool: Acpx) -> None:
    """npm install acpx@0.19.1 into bench/.acpx (pinned), unless it is already there."""
    npm_install(tool, ACPX_DIR, "acpx", ACPX_VERSION, ACPX_CLI)


def npm_install(tool: Tool, directory: Path, package: str, version: str, entry: Path) -> None:
    """npm install ``package@version`` into ``directory`` (pinned, cached: nothing is
    fetched when that version is there). Without Node or npm, or when the install
    fails, ``tool.available`` is False and ``tool.reason`` says why."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        tool.available = False
        tool.reason = f"{'node' if node is None else 'npm'} not found on PATH"
        return
    pkg = directory / "node_modules" / package / "package.json"
    try:
        if json.loads(pkg.read_text()).get("version") == version:
            return
    except (OSError, ValueError):
        pass
    directory.mkdir(parents=True, exist_ok=True)
    manifest = directory / "package.json"
    if not manifest.exists():
        manifest.write_text(f'{{"name": "tether-{package}", "private": true}}\n')
    print(f"installing {package}@{version} into {directory} ...", flush=True)
    r = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", f"{package}@{version}"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if r.returncode != 0 or not entry.exists():
        tool.available = False
        tool.reason = f"npm install {package}@{version} failed: {r.stderr.strip()[-300:]}"


# --- running commands -----------------------------------------------------------------


class Result:
    def __init__(self, rc: int, stdout: str, stderr: str, elapsed: float) -> None:
        self.returncode = rc
        self.stdout = stdout
        self.stderr = stderr
        self.elapsed = elapsed


def run(
    tool: Tool,
    home: Path,
    cwd: Path,
    *args: str,
    case: str = "",
    check: bool = False,
    raw: list[str] | None = None,
) -> Result:
    """Run one CLI command to completion; ``elapsed`` is spawn -> exit, in seconds."""
    argv = raw if raw is not None else tool.argv(cwd, *args)
    t0 = time.perf_counter()
    p = subprocess.run(
        argv,
        cwd=cwd,
        env=tool.env(home, case),
        capture_output=True,
        text=True,
        timeout=CMD_TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    if check and p.returncode != 0:
        raise RuntimeError(
            f"{tool.name} {' '.join(args)} exited {p.returncode}: {p.stderr.strip()[-500:]}"
        )
    return Result(p.returncode, p.stdout, p.stderr, elapsed)


def project(tool: Tool) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"proj-{tool.name}-", dir=tool.root))


def new_session(tool: Tool, home: Path, cwd: Path, name: str | None = None, **kw: Any) -> Result:
    flag = ["-s", name] if name else []
    return run(tool, home, cwd, "sessions", "new", *flag, check=True, **kw)


def close_session(tool: Tool, home: Path, cwd: Path, name: str | None = None, **kw: Any) -> Result:
    return run(tool, home, cwd, *tool.close_args(name), **kw)


@contextlib.contextmanager
def warm_session(tool: Tool, name: str | None = None) -> Iterator[tuple[Path, Path]]:
    home, cwd = tool.home(), project(tool)
    new_session(tool, home, cwd, name)
    try:
        for _ in range(2):
            run(tool, home, cwd, "prompt", *tool.named(name), "echo warmup", check=True)
        yield home, cwd
    finally:
        close_session(tool, home, cwd, name)


def ab(tools: list[Tool], runs: int) -> Iterator[tuple[int, Tool]]:
    """Alternate A/B, B/A, ... so drift in machine load hits both tools alike."""
    for i in range(runs):
        order = tools if i % 2 == 0 else list(reversed(tools))
        for tool in order:
            yield i, tool


# --- figures ----------------------------------------------------------------------------

Samples = dict[str, list[float]]


def fig_version(tools: list[Tool], runs: int) -> Samples:
    out: Samples = {t.name: [] for t in tools}
    for t in tools:  # one untimed warm-up each (page cache)
        run(t, t.root, t.root, raw=[*t.base(), "--version"], check=True)
    for _, t in ab(tools, runs):
        r = run(t, t.root, t.root, raw=[*t.base(), "--version"], check=True)
        out[t.name].append(r.elapsed * 1000)
    return out


def fig_new(tools: list[Tool], runs: int) -> Samples:
    out: Samples = {t.name: [] for t in tools}
    homes = {t.name: t.home() for t in tools}
    for _, t in ab(tools, runs):
        cwd = project(t)
        r = new_session(t, homes[t.name], cwd)
        out[t.name].append(r.elapsed * 1000)
        close_session(t, homes[t.name], cwd)
    return out


def fig_cold(tools: list[Tool], runs: int) -> Samples:
    """First prompt of a session with no owner and no agent running (both get started)."""
    out: Samples = {t.name: [] for t in tools}
    homes = {t.name: t.home() for t in tools}
    for _, t in ab(tools, runs):
        home, cwd = homes[t.name], project(t)
        if isinstance(t, Tether):
            # `sessions new` leaves a warm owner; let it idle out so the prompt is cold.
            run(t, home, cwd, "--ttl", "0.2", "sessions", "new", check=True)
            pid = t.owner_pid(home, cwd, None)
            if pid is not None and not wait_gone(pid, starttime(pid), 10.0):
                raise RuntimeError("tether owner did not idle out")
            args = ("--ttl", "300", "prompt", "echo cold")
        else:
            new_session(t, home, cwd)  # acpx's `sessions new` leaves no owner running
            args = ("prompt", "echo cold")
        r = run(t, home, cwd, *args, check=True)
        out[t.name].append(r.elapsed * 1000)
        close_session(t, home, cwd)
    return out


def fig_warm(tools: list[Tool], runs: int) -> Samples:
    out: Samples = {t.name: [] for t in tools}
    with contextlib.ExitStack() as stack:
        where = {t.name: stack.enter_context(warm_session(t)) for t in tools}
        for _, t in ab(tools, runs):
            home, cwd = where[t.name]
            r = run(t, home, cwd, "prompt", "echo warm", check=True)
            if "warm" not in r.stdout:
                raise RuntimeError(f"{t.name}: unexpected warm output {r.stdout!r}")
            out[t.name].append(r.elapsed * 1000)
    return out


def _read_until(proc: subprocess.Popen[bytes], needle: bytes, timeout: float) -> bytes:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while needle not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise RuntimeError(f"timed out waiting for {needle!r}; got {buf[-300:]!r}")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise RuntimeError(f"EOF before {needle!r}; got {buf[-300:]!r}")
        buf += chunk
    return buf


def fig_cancel(tools: list[Tool], runs: int) -> Samples:
    """`cancel` issued -> the waiting `prompt` caller has exited, having printed cancelled."""
    out: Samples = {t.name: [] for t in tools}
    with contextlib.ExitStack() as stack:
        where = {t.name: stack.enter_context(warm_session(t)) for t in tools}
        for _, t in ab(tools, runs):
            home, cwd = where[t.name]
            waiter = subprocess.Popen(
                t.argv(cwd, "prompt", "echo started ; sleep 30000"),
                cwd=cwd,
                env=t.env(home),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            try:
                seen = _read_until(waiter, b"started", 60.0)
                t0 = time.perf_counter()
                canceller = subprocess.Popen(
                    t.argv(cwd, "cancel"),
                    cwd=cwd,
                    env=t.env(home),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                assert waiter.stdout is not None
                rest = waiter.stdout.read()  # EOF when the caller exits
                waiter.wait(timeout=60)
                elapsed = time.perf_counter() - t0
                canceller.wait(timeout=60)
            finally:
                if waiter.poll() is None:
                    waiter.kill()
                    waiter.wait()
            text = (seen + rest).decode(errors="replace")
            if "cancelled" not in text:
                raise RuntimeError(f"{t.name}: caller exited without 'cancelled': {text[-300:]!r}")
            out[t.name].append(elapsed * 1000)
    return out


def survivors_of(case: str, grandchild: tuple[int, int], lease_id: str | None) -> dict[int, int]:
    found = marker_scan(CASE, case)
    if lease_id:
        found.update(marker_scan("TETHER_LEASE_ID", lease_id))
    gpid, gstart = grandchild
    if alive(gpid, gstart):
        found[gpid] = gstart
    return found


def fig_close(tools: list[Tool], runs: int, extra: dict[str, Any]) -> Samples:
    """`sessions close` on a session whose agent left a setsid grandchild; survivors after."""
    out: Samples = {t.name: [] for t in tools}
    survivors: dict[str, list[int]] = {t.name: [] for t in tools}
    grand_left: dict[str, int] = {t.name: 0 for t in tools}
    cleaned: dict[str, int] = {t.name: 0 for t in tools}
    homes = {t.name: t.home() for t in tools}
    for _, t in ab(tools, runs):
        home, cwd, case = homes[t.name], project(t), uuid.uuid4().hex
        new_session(t, home, cwd, case=case)
        r = run(t, home, cwd, "prompt", "spawn-setsid", case=case, check=True)
        m = SPAWNED_RE.search(r.stdout)
        if not m:
            raise RuntimeError(f"{t.name}: no 'spawned pid=' in {r.stdout!r}")
        gpid = int(m.group(1))
        gstart = starttime(gpid)
        if gstart is None:
            raise RuntimeError(f"{t.name}: grandchild {gpid} already gone")
        lease_id = None
        if isinstance(t, Tether):
            lease_id = t.status(home, cwd, None, case).get("leaseId")
        r = close_session(t, home, cwd, case=case)
        out[t.name].append(r.elapsed * 1000)
        time.sleep(1.0)  # settle: count what is still there 1 s after close returned
        left = survivors_of(case, (gpid, gstart), lease_id)
        survivors[t.name].append(len(left))
        if gpid in left:
            grand_left[t.name] += 1
        for pid, st in left.items():  # clean up what the tool leaked: exact pid+starttime
            if kill_verified(pid, st):
                cleaned[t.name] += 1
    extra["close"] = {
        "survivors_per_run": survivors,
        "grandchild_survived_runs": grand_left,
        "killed_by_bench": cleaned,
    }
    return out


def _stream_once(t: Tool, home: Path, cwd: Path, n: int) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        t.argv(cwd, "prompt", f"stream {n}"),
        cwd=cwd,
        env=t.env(home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    count = 0
    first = last = 0.0
    for line in proc.stdout:
        if line.startswith(b"chunk "):
            count += 1
            last = time.perf_counter()
            if count == 1:
                first = last
    proc.wait(timeout=CMD_TIMEOUT)
    end = time.perf_counter()
    return end - t0, (last - first) if count > 1 else 0.0, count


def fig_stream(tools: list[Tool], runs: int, extra: dict[str, Any], n: int = 10_000) -> Samples:
    """10,000 chunks through a warm session; updates/s at the caller, spawn -> exit."""
    out: Samples = {t.name: [] for t in tools}
    phase: Samples = {t.name: [] for t in tools}
    with contextlib.ExitStack() as stack:
        where = {t.name: stack.enter_context(warm_session(t)) for t in tools}
        for _, t in ab(tools, runs):
            wall, span, count = _stream_once(t, *where[t.name], n)
            if count != n:
                raise RuntimeError(f"{t.name}: {count} of {n} chunks arrived")
            out[t.name].append(n / wall)
            if span > 0:
                phase[t.name].append((n - 1) / span)
    extra["stream_first_to_last_chunk_per_s"] = {k: summary(v) for k, v in phase.items()}
    return out


def fig_rss(tools: list[Tool], runs: int, extra: dict[str, Any], acpx_runs: int) -> Samples:
    """Owner VmRSS after 100 prompts through one session."""
    out: Samples = {t.name: [] for t in tools}
    others: dict[str, list[str]] = {t.name: [] for t in tools}
    for i, t in ab(tools, runs):
        if isinstance(t, Acpx) and i >= acpx_runs:
            continue
        home, cwd = t.home(), project(t)
        new_session(t, home, cwd)
        try:
            for k in range(100):
                run(t, home, cwd, "prompt", f"echo m{k}", check=True)
            if isinstance(t, Tether):
                st = t.status(home, cwd, None)
                pid = st.get("ownerPid")
                for role in ("keeperPid", "agentPid"):
                    p = st.get(role)
                    if isinstance(p, int):
                        others[t.name].append(f"{role} {vm_rss_kib(p)} KiB")
            else:
                pid = t.owner_pid(home, cwd, None)
            rss = vm_rss_kib(pid) if isinstance(pid, int) else None
            if rss is None:
                raise RuntimeError(f"{t.name}: no owner RSS (pid {pid})")
            out[t.name].append(rss / 1024)
        finally:
            close_session(t, home, cwd)
    extra["rss_other_processes"] = others
    return out


def pool(fn: Callable[[str], Any], items: list[str], workers: int) -> None:
    """Run ``fn(item)`` for every item on ``workers`` threads; re-raise the first error."""
    todo = list(items)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo or errors:
                    return
                item = todo.pop(0)
            try:
                fn(item)
            except BaseException as exc:
                with lock:
                    errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def _load_tool(t: Tool, sessions: int, prompts: int, workers: int) -> tuple[list[float], dict]:
    cwd = project(t)
    names = [f"s{k}" for k in range(sessions)]
    # Tether: all sessions in one TETHER_HOME, as a user has them. acpx: one HOME per
    # session, because acpx keys its record by the agent's ACP session id and the mock
    # agent answers "mock-1" in every process: in one HOME the records overwrite
    # each other (exit 4, "No named session"). That also spares acpx its O(N) scan.
    shared = t.home()
    homes = {n: (t.home() if isinstance(t, Acpx) else shared) for n in names}
    lat: list[float] = []
    created: list[str] = []
    info: dict[str, Any] = {}

    def warmup(name: str) -> None:
        run(t, homes[name], cwd, "prompt", "-s", name, "echo warmup", check=True)

    # Each session's prompts are sequential (one caller per session at a time); the
    # sessions are interleaved, at most ``workers`` callers in flight.
    queue = [n for _ in range(prompts) for n in names]
    busy: set[str] = set()
    cond = threading.Condition()
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            with cond:
                while True:
                    if errors or not queue:
                        return
                    pick = next((n for n in queue if n not in busy), None)
                    if pick is not None:
                        queue.remove(pick)
                        busy.add(pick)
                        break
                    cond.wait()
            try:
                r = run(t, homes[pick], cwd, "prompt", "-s", pick, f"echo {pick}", check=True)
                with cond:
                    lat.append(r.elapsed * 1000)
            except BaseException as exc:
                with cond:
                    errors.append(exc)
            with cond:
                busy.discard(pick)
                cond.notify_all()

    try:
        # Sequential: concurrent `acpx sessions new` in one HOME lose each other's
        # records (exit 4 afterwards); Tether is created the same way for fairness.
        for name in names:
            new_session(t, homes[name], cwd, name)
            created.append(name)
        pool(warmup, names, workers)
        t0 = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(workers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
        if errors:
            raise errors[0]
        info = {
            "prompts": len(lat),
            "wall_s": round(wall, 2),
            "throughput_prompts_per_s": round(len(lat) / wall, 2),
            "p50_ms": round(percentile(lat, 50), 1),
            "p99_ms": round(percentile(lat, 99), 1),
        }
    finally:
        t_close = time.perf_counter()
        pool(lambda n: close_session(t, homes[n], cwd, n), created, workers)
        info["close_all_s"] = round(time.perf_counter() - t_close, 2)
    return lat, info


def fig_load(
    tools: list[Tool], sessions: int, prompts: int, workers: int, extra: dict[str, Any]
) -> Samples:
    """S warm sessions x P prompts: per-prompt latency samples; throughput in ``extra``."""
    out: Samples = {}
    info: dict[str, Any] = {"sessions": sessions, "prompts_per_session": prompts}
    info.update(workers=workers, cores=os.cpu_count(), loadavg_before=os.getloadavg())
    extra["load"] = info
    for t in tools:
        out[t.name], info[t.name] = _load_tool(t, sessions, prompts, workers)
        print(f"   load {t.name}: {info[t.name]}", flush=True)
    return out


# --- profile of the warm prompt path (Tether only) -------------------------------------


def _median_ms(fn: Callable[[], Any], n: int) -> float:
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t0) * 1000)
    return statistics.median(xs)


def profile_warm(tether: Tether, n: int) -> dict[str, Any]:
    """Where a warm `tether prompt` spends its milliseconds.

    1. process level: bare interpreter start, the console script, `python -m tether`;
    2. imports: ``-X importtime`` of a warm prompt (median over runs, per top module);
    3. the IPC round trip, in-process with the blocking client: connect + hello, ack,
       first update, result (owner + agent side);
    4. cProfile of the whole CLI ``main()`` for one warm prompt (top functions).
    """
    import pstats

    from tether import sessions
    from tether.ipc.client import OwnerConnection

    out: dict[str, Any] = {}
    with warm_session(tether) as (home, cwd):
        env = tether.env(home)
        quiet = {"capture_output": True, "env": env, "cwd": cwd, "check": False}
        argv = tether.argv(cwd, "prompt", "echo hi")
        out["process_ms"] = {
            "python -c pass": _median_ms(lambda: subprocess.run([PY, "-c", "pass"], **quiet), n),
            "python -c 'import re'": _median_ms(
                lambda: subprocess.run([PY, "-c", "import re"], **quiet), n
            ),
            "tether --version": _median_ms(
                lambda: subprocess.run([str(TETHER_BIN), "--version"], **quiet), n
            ),
            "python -m tether --version": _median_ms(
                lambda: subprocess.run([PY, "-m", "tether", "--version"], **quiet), n
            ),
            "tether prompt (warm)": _median_ms(lambda: subprocess.run(argv, **quiet), n),
            "python -m tether prompt (warm)": _median_ms(
                lambda: subprocess.run([PY, "-m", "tether", *argv[1:]], **quiet), n
            ),
        }
        # 2. importtime
        per: dict[str, list[float]] = {}
        totals = []
        for _ in range(n):
            r = subprocess.run([PY, "-X", "importtime", "-m", "tether", *argv[1:]], **quiet)
            total = 0.0
            for line in r.stderr.decode().splitlines():
                if not line.startswith("import time:") or "|" in line.split(":", 1)[1][:8]:
                    continue
                parts = line.split("|")
                if len(parts) != 3:
                    continue
                try:
                    self_us, cum_us = int(parts[0].split(":")[1]), int(parts[1])
                except ValueError:
                    continue
                name = parts[2][1:].rstrip()  # one space before a top-level name
                total += self_us
                if not name.startswith(" "):  # top-level imports: their cumulative cost
                    per.setdefault(name.strip(), []).append(cum_us / 1000)
            totals.append(total / 1000)
        out["imports_total_ms"] = statistics.median(totals)
        top = sorted(((statistics.median(v), k) for k, v in per.items()), reverse=True)[:12]
        out["imports_top_ms"] = [(k, round(v, 2)) for v, k in top]
        # 3. IPC round trip, in-process
        key = tether.status(home, cwd, None).get("sessionKey")
        os.environ["TETHER_HOME"] = str(home)
        try:
            path = sessions.socket_path(str(key))
        finally:
            del os.environ["TETHER_HOME"]
        phases: dict[str, list[float]] = {"connect+hello": [], "send->first update": []}
        phases.update({"first update->result": [], "total": []})
        payload = {"prompt": [{"type": "text", "text": "echo hi"}], "wait": True}
        for _ in range(max(50, n * 5)):
            marks: dict[str, float] = {}
            t0 = time.perf_counter()
            with OwnerConnection.connect(path) as conn:
                t1 = time.perf_counter()
                rid = conn.send("prompt", payload)

                def on_frame(frame: dict[str, Any], marks: dict[str, float] = marks) -> None:
                    marks.setdefault(str(frame.get("type")), time.perf_counter())

                conn.wait(rid, on_frame=on_frame)
                t4 = time.perf_counter()
            first = marks.get("update", t4)
            phases["connect+hello"].append((t1 - t0) * 1000)
            phases["send->first update"].append((first - t1) * 1000)
            phases["first update->result"].append((t4 - first) * 1000)
            phases["total"].append((t4 - t0) * 1000)
        out["ipc_ms"] = {k: round(statistics.median(v), 3) for k, v in phases.items()}
        # 4. cProfile of the CLI main, in a child (fresh imports)
        prof = home / "warm.prof"
        subprocess.run([PY, "-m", "cProfile", "-o", str(prof), "-m", "tether", *argv[1:]], **quiet)
        import io

        buf = io.StringIO()
        st = pstats.Stats(str(prof), stream=buf)
        st.sort_stats("cumulative").print_stats(25)
        out["cprofile_top"] = buf.getvalue()
    return out


# --- statistics and the report --------------------------------------------------------


def percentile(xs: list[float], p: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(xs: list[float]) -> dict[str, float] | None:
    if not xs:
        return None
    return {
        "n": len(xs),
        "min": min(xs),
        "median": statistics.median(xs),
        "max": max(xs),
    }


LABELS = {
    "version": ("CLI cold start `--version`", "ms", 30, "le"),
    "new": ("`sessions new`", "ms", None, "le"),
    "cold": ("cold first prompt (owner + agent start)", "ms", 350, "le"),
    "warm": ("warm prompt round trip", "ms", 60, "le"),
    "cancel": ("cancel issued -> waiting caller exited `cancelled`", "ms", 100, "le"),
    "close": ("`sessions close` (agent left a setsid grandchild)", "ms", 300, "le"),
    "stream": ("streaming 10,000 chunks, updates/s at the caller", "upd/s", 50_000, "ge"),
    "rss": ("owner VmRSS after 100 prompts", "MB", 30, "le"),
    "load": ("50 sessions x 20 prompts: per-prompt latency", "ms", None, "le"),
}


def fmt(v: float, unit: str) -> str:
    if unit == "upd/s":
        return f"{v:,.0f}"
    if unit == "MB":
        return f"{v:.1f}"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def cell(s: dict[str, float] | None, unit: str) -> str:
    if s is None:
        return "-"
    return f"{fmt(s['min'], unit)} / **{fmt(s['median'], unit)}** / {fmt(s['max'], unit)}"


def render(results: dict[str, Any], tools: list[Tool]) -> str:
    acpx = next((t for t in tools if isinstance(t, Acpx)), None)
    acpx_note = "" if acpx is None or acpx.available else f" ({acpx.reason})"
    lines = [
        f"| figure | unit | n (T/a) | Tether min / **median** / max | "
        f"acpx {ACPX_VERSION}{acpx_note} min / **median** / max | Tether:acpx (medians) "
        "| target | met? |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for fig in FIGURES:
        if fig not in results["figures"]:
            continue
        label, unit, target, sense = LABELS[fig]
        s = results["figures"][fig]
        st, sa = s.get("tether"), s.get("acpx")
        if fig == "load":
            label = (
                f"{results['extra']['load']['sessions']} sessions x "
                f"{results['extra']['load']['prompts_per_session']} prompts: per-prompt latency"
            )
        ratio = (
            f"{st['median'] / sa['median']:.3f}" if st and sa and sa["median"] else "n/a (no acpx)"
        )
        met = "-"
        if target is not None and st:
            ok = st["median"] <= target if sense == "le" else st["median"] >= target
            met = "yes" if ok else "**no**"
        if fig == "close" and st:
            surv = results["extra"].get("close", {}).get("survivors_per_run", {})
            total = sum(surv.get("tether", []))
            met = "yes" if (st["median"] <= 300 and total == 0) else "**no**"
        na = f"{st['n'] if st else 0}/{sa['n'] if sa else 0}"
        tgt = "-" if target is None else f"{'<=' if sense == 'le' else '>='} {target:,}"
        if fig == "close":
            tgt = "<= 300, 0 survivors"
        if fig == "load":
            tgt = "p99 <= 3 x p50"
        av = cell(sa, unit) if sa else ("-" if acpx is None else f"- ({acpx.reason or 'skipped'})")
        lines.append(
            f"| {label} | {unit} | {na} | {cell(st, unit)} | {av} | {ratio} | {tgt} | {met} |"
        )
    extra = results["extra"]
    if "close" in extra:
        c = extra["close"]
        lines.append("")
        lines.append(
            "Close survivors (1 s after `sessions close` returned; marker scan + grandchild "
            f"pid/starttime), per run: {json.dumps(c['survivors_per_run'])}; runs where the "
            f"setsid grandchild survived: {json.dumps(c['grandchild_survived_runs'])}; "
            f"killed afterwards by the bench (pidfd, verified): {json.dumps(c['killed_by_bench'])}."
        )
    if "load" in extra:
        ld = extra["load"]
        lines.append("")
        lines.append(
            f"Load: {ld['sessions']} warm sessions x {ld['prompts_per_session']} prompts, at most "
            f"{ld['workers']} callers in flight (one per session at a time), machine cores: "
            f"{ld['cores']}."
        )
        for name in ("tether", "acpx"):
            if name in ld:
                d = ld[name]
                ratio = d["p99_ms"] / d["p50_ms"] if d["p50_ms"] else float("nan")
                lines.append(
                    f"- {name}: p50 {d['p50_ms']} ms, p99 {d['p99_ms']} ms (p99/p50 = "
                    f"{ratio:.2f}), throughput {d['throughput_prompts_per_s']} prompts/s "
                    f"({d['prompts']} prompts in {d['wall_s']} s); closing all sessions took "
                    f"{d.get('close_all_s')} s"
                )
    if "stream_first_to_last_chunk_per_s" in extra:
        ph = extra["stream_first_to_last_chunk_per_s"]
        parts = [f"{k} median {v['median']:,.0f}/s" for k, v in ph.items() if v is not None]
        lines.append("")
        lines.append(
            "Streaming rate between the first and the last chunk (excludes CLI start and "
            f"the turn's set-up/tear-down): {'; '.join(parts)}."
        )
    if extra.get("rss_other_processes", {}).get("tether"):
        lines.append("")
        lines.append(
            "Other Tether processes after 100 prompts (last run): "
            + ", ".join(extra["rss_other_processes"]["tether"][-2:])
            + "."
        )
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    mem_kib = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    node = shutil.which("node")
    node_v = (
        subprocess.run(
            [node, "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if node
        else "not installed"
    )
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "node": node_v,
        "kernel": platform.release(),
        "loadavg_start": os.getloadavg(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 runs per figure, 10x5 load")
    ap.add_argument("--runs", type=int, default=None, help="runs per figure (default 10)")
    ap.add_argument("--only", action="append", choices=FIGURES, help="figure(s) to run")
    ap.add_argument("--no-acpx", action="store_true", help="Tether figures only")
    ap.add_argument(
        "--acpx-rss-runs", type=int, default=None, help="acpx RSS runs (default 2: 150 s each)"
    )
    ap.add_argument("--load-sessions", type=int, default=None)
    ap.add_argument("--load-prompts", type=int, default=None)
    ap.add_argument("--load-workers", type=int, default=None, help="default 4 x cores")
    ap.add_argument("--profile", action="store_true", help="profile the warm prompt path too")
    ap.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    a = ap.parse_args()
    # Measure Tether, not the bytecode compiler: with PYTHONDONTWRITEBYTECODE set (as on
    # our machines) and an editable install, stale or missing .pyc files would make every
    # CLI call recompile Tether's modules from source.
    import compileall

    compileall.compile_dir(str(ROOT / "src"), quiet=1)
    runs = a.runs or (3 if a.quick else 10)
    acpx_rss_runs = a.acpx_rss_runs or (1 if a.quick else 2)
    load_s = a.load_sessions or (10 if a.quick else 50)
    load_p = a.load_prompts or (5 if a.quick else 20)
    workers = a.load_workers or min(load_s, 4 * (os.cpu_count() or 1))
    figures = a.only or list(FIGURES)

    root = Path(tempfile.mkdtemp(prefix="tb-"))  # short: Unix socket paths live below it
    tether = Tether(root)
    acpx = Acpx(root)
    if a.no_acpx:
        acpx.available, acpx.reason = False, "--no-acpx"
    else:
        install_acpx(acpx)
    tools: list[Tool] = [tether] + ([acpx] if acpx.available else [])
    if not acpx.available:
        print(f"acpx columns skipped: {acpx.reason}", flush=True)

    info = machine()
    print(f"run {RUN_ID}: {json.dumps(info)}; runs/figure {runs}", flush=True)
    results: dict[str, Any] = {"machine": info, "runs": runs, "figures": {}, "extra": {}}
    extra = results["extra"]
    status = 0
    try:
        for fig in figures:
            print(f"== {fig}", flush=True)
            t0 = time.perf_counter()
            try:
                if fig == "version":
                    s = fig_version(tools, runs)
                elif fig == "new":
                    s = fig_new(tools, runs)
                elif fig == "cold":
                    s = fig_cold(tools, runs)
                elif fig == "warm":
                    s = fig_warm(tools, runs)
                elif fig == "cancel":
                    s = fig_cancel(tools, runs)
                elif fig == "close":
                    s = fig_close(tools, runs, extra)
                elif fig == "stream":
                    s = fig_stream(tools, runs, extra)
                elif fig == "rss":
                    s = fig_rss(tools, runs, extra, acpx_rss_runs)
                else:
                    s = fig_load(tools, load_s, load_p, workers, extra)
            except Exception as exc:  # report and go on with the other figures
                print(f"   {fig} FAILED: {exc!r}", flush=True)
                extra.setdefault("failures", {})[fig] = repr(exc)
                status = 1
                continue
            results["figures"][fig] = {k: summary(v) for k, v in s.items()}
            brief = {
                k: (round(v["median"], 1) if v else None)
                for k, v in results["figures"][fig].items()
            }
            print(f"   medians {brief}  ({time.perf_counter() - t0:.1f} s)", flush=True)
        if a.profile:
            print("== profile (warm prompt path)", flush=True)
            prof = profile_warm(tether, runs)
            extra["profile"] = prof
            (RESULTS / "profile-cprofile.txt").parent.mkdir(parents=True, exist_ok=True)
            (RESULTS / "profile-cprofile.txt").write_text(prof["cprofile_top"])
            for k in ("process_ms", "imports_total_ms", "imports_top_ms", "ipc_ms"):
                print(f"   {k}: {json.dumps(prof[k], default=str)}", flush=True)
    finally:
        # Everything this run started carries MARK=RUN_ID: prove it is all gone.
        # A process still on its way out (a closer returned before its owner finished
        # exiting) gets a few seconds; what is left after that is a survivor.
        deadline = time.monotonic() + 5.0
        for pid, st in marker_scan(MARK, RUN_ID).items():
            wait_gone(pid, st, max(0.0, deadline - time.monotonic()))
        left = marker_scan(MARK, RUN_ID)
        what = {pid: describe(pid) for pid in left}
        killed = [pid for pid, st in left.items() if kill_verified(pid, st)]
        extra["final_scan"] = {"survivors": what, "killed_by_bench": killed}
        for pid, d in what.items():
            print(f"   survivor {pid}: {d}", flush=True)
        print(
            f"final /proc scan for {MARK}={RUN_ID}: {len(left)} survivor(s) {sorted(left)}"
            + (f"; killed (pidfd, verified): {killed}" if killed else ""),
            flush=True,
        )
        info["loadavg_end"] = os.getloadavg()
        shutil.rmtree(root, ignore_errors=True)
    table = render(results, [tether, acpx])
    results["table_md"] = table
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=2, default=str))
    a.out.with_suffix(".md").write_text(table + "\n")
    print()
    print(table)
    print(f"\nwritten: {a.out} and {a.out.with_suffix('.md')}")
    return status


if __name__ == "__main__":
    sys.exit(main())
