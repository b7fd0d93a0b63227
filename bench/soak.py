"""Ownership soak: many escape trees through every end path; prove nothing survives.

Run: ``make soak`` (or ``.venv/bin/python bench/soak.py [--trees-per-path N]``).
Not part of ``make test``. Standard library + tether only.

Every tree (tests/fake_agents/escape_tree.py --root-ignore-term) is a Python root that
ignores SIGTERM, with a same-group child, a ``setsid`` child, a double-forked ``setsid``
daemon, a TERM-ignoring child, a TERM-ignoring ``bash`` loop forking ``sleep`` every
0.1 s, and a ``bash -> bash -> sleep`` wrapper: about 10 processes. Each is driven
through one of four end paths:

``manual-cancel``      ``aclose(MANUAL_CANCEL)`` once the tree is built
``overall-timeout``    ``SpawnSpec(overall_timeout=...)``; nobody calls aclose
``no-output-timeout``  one line, then silence; the watchdog ends it
``supervisor-crash``   the tree runs under a separate supervisor process, which is
                       SIGKILLed; its keeper alone ends the tree, and a reconcile
                       closes the lease afterwards

all of it twice: with a per-run cgroup (``cgroup.kill``) and with
``TETHER_NO_CGROUP=1`` (keeper subreaper walk only). Latency is cancel-to-extinction:
from the moment the end was decided (aclose called, deadline due, SIGKILL sent) to
the proof (the finalizer's report; for a crash, the keeper's exit, which it makes only
after ``waitpid(-1)`` said ECHILD).

Survivors are counted by three witnesses: the runner's report (a /proc marker scan),
our own /proc scan for each lease's ``TETHER_LEASE_ID`` marker, and ``cgroup.events``
of each lease's cgroup. Signals to unowned processes are checked with decoys (sleepers
without a marker and with a foreign lease's marker, which must all be alive at the
end), every ``signal_verified`` call in this process (each refusal is classified), and
the number of ``lost`` leases.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ESCAPE_TREE = [sys.executable, str(ROOT / "tests/fake_agents/escape_tree.py"), "--root-ignore-term"]
SUPERVISOR = [sys.executable, str(ROOT / "tests/fake_agents/supervisor.py")]
PATHS = ("manual-cancel", "overall-timeout", "no-output-timeout", "supervisor-crash")


# --- /proc witnesses -------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[19])


def marker_scan(lease_ids: set[str]) -> dict[str, list[int]]:
    """Live (non-zombie) processes carrying TETHER_LEASE_ID=<one of lease_ids>."""
    found: dict[str, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        for entry in env:
            if entry.startswith(b"TETHER_LEASE_ID="):
                lid = entry[16:].decode(errors="replace")
                st = _stat(int(name))
                if lid in lease_ids and st is not None and st[0] != "Z":
                    found.setdefault(lid, []).append(int(name))
                break
    return found


def cgroup_populated(path: str | None) -> bool:
    if not path:
        return False
    try:
        return "populated 1" in Path(path, "cgroup.events").read_text()
    except OSError:
        return False  # gone: nothing in it


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


# --- signal accounting ---------------------------------------------------------------------


class SignalLedger:
    """Wraps signal_verified in runner and reconcile: counts and classifies every call."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def install(self) -> None:
        from tether.supervise import reconcile_reap, runner, verify

        real = verify.signal_verified

        def recording(table: Any, ident: Any, sig: int, **kw: Any) -> bool:
            ok = real(table, ident, sig, **kw)
            if ok:
                self.counts["delivered"] += 1
                return ok
            st = _stat(ident.pid)
            if st is None or st[0] == "Z":
                self.counts["refused: already gone"] += 1
            elif st[2] != ident.starttime:
                self.counts["refused: pid reused (foreign)"] += 1
            else:
                # Same identity, still alive, and we did not signal it: an owned process
                # we failed to reach (a marker mismatch would be a foreign one).
                self.counts["refused: same identity alive"] += 1
            return ok

        runner.signal_verified = recording  # type: ignore[assignment]
        reconcile_reap.signal_verified = recording  # type: ignore[assignment]


# --- in-process paths ----------------------------------------------------------------------


class Tree:
    def __init__(self, proc: Any) -> None:
        self.ready = asyncio.get_running_loop().create_future()
        self.ready_at: float | None = None
        self.buf = bytearray()
        proc.set_stdout_handler(self._data, lambda: None)

    def _data(self, data: bytes) -> None:
        self.buf += data
        if b"\n" in self.buf and not self.ready.done():
            self.ready_at = time.monotonic()
            self.ready.set_result(json.loads(bytes(self.buf).split(b"\n", 1)[0]))


async def one_in_process(path: str, args: argparse.Namespace, registry: Any) -> dict[str, Any]:
    from tether.supervise.run_state import TerminationReason
    from tether.supervise.runner import SpawnSpec, spawn_agent

    kw: dict[str, Any] = {}
    if path == "overall-timeout":
        kw["overall_timeout"] = args.overall_timeout
    elif path == "no-output-timeout":
        kw["no_output_timeout"] = args.no_output_timeout
    spec = SpawnSpec(argv=ESCAPE_TREE, cwd=str(ROOT), grace=args.grace, **kw)
    proc = await spawn_agent(spec, registry)
    tree = Tree(proc)
    if path == "manual-cancel":
        await asyncio.wait_for(asyncio.shield(tree.ready), 30)
        t0 = time.monotonic()
        report = await proc.aclose(TerminationReason.MANUAL_CANCEL)
        t1 = time.monotonic()
    else:
        report = await asyncio.wait_for(proc.wait_ended(), 60)
        t1 = time.monotonic()
        life = proc.lifecycle
        if path == "overall-timeout":
            t0 = life.started_at + args.overall_timeout
        else:
            last = life.last_output_at if life.last_output_at is not None else life.started_at
            t0 = last + args.no_output_timeout
    built = tree.ready_at is not None and tree.ready_at <= t0
    # Without a cgroup the run's boundary is its process group and session, which the
    # tree's setsid members leave: seed 003 then wants the run failed ownership-escape.
    want = path if proc.cgroup else "ownership-escape"
    return {
        "lease_id": proc.lease_id,
        "cgroup": proc.cgroup,
        "reason": report.reason,
        "want": want,
        "latency_ms": (t1 - t0) * 1000,
        "survivors": list(report.survivors),
        "escalated": report.escalated,
        "built": built,
        "mode": report.mode,
        "keeper_ms": report.keeper_ms,
    }


async def run_in_process(path: str, n: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    from tether.state.registry import Registry

    sem = asyncio.Semaphore(args.concurrency)
    with Registry() as registry:

        async def guarded() -> dict[str, Any]:
            async with sem:
                return await one_in_process(path, args, registry)

        return await asyncio.gather(*(guarded() for _ in range(n)))


# --- the supervisor-crash path ------------------------------------------------------------


class CrashBatch:
    """One supervisor subprocess with K trees; SIGKILLed once all trees are built."""

    def __init__(self, k: int, args: argparse.Namespace) -> None:
        self.session_key = f"soak-{uuid.uuid4().hex[:8]}"
        argv = [*SUPERVISOR, "--trees", str(k), "--grace", str(args.grace)]
        argv += ["--session-key", self.session_key, "--", *ESCAPE_TREE]
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
        self.pidfd = os.pidfd_open(self.popen.pid)  # our unreaped child: exact
        self.runs: list[dict[str, Any]] = []
        self.keeper_fds: dict[int, dict[str, Any]] = {}
        self._buf = b""
        self.done = False

    def feed(self) -> None:
        assert self.popen.stdout is not None
        chunk = os.read(self.popen.stdout.fileno(), 65536)
        if not chunk:
            raise RuntimeError("supervisor exited before reporting its trees")
        self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            msg = json.loads(line)
            if msg.get("all_ready"):
                self.done = True
            else:
                self.runs.append(msg)

    def pin_keepers(self) -> None:
        """pidfd each keeper, proven to be our supervisor's child with the reported start."""
        for run in self.runs:
            k = run["keeper"]
            fd = os.pidfd_open(k["pid"])
            st = _stat(k["pid"])
            if st is None or st[1] != self.popen.pid or st[2] != k["starttime"]:
                os.close(fd)
                raise RuntimeError(f"keeper {k} is not who the supervisor said")
            self.keeper_fds[fd] = run

    def crash(self) -> float:
        t0 = time.monotonic()
        signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        return t0

    def finish(self, t0: float, deadline_s: float) -> list[dict[str, Any]]:
        """Wait for each keeper's exit (its proof of extinction), reap it, witness."""
        out: list[dict[str, Any]] = []
        pending = dict(self.keeper_fds)
        deadline = time.monotonic() + deadline_s
        while pending and time.monotonic() < deadline:
            ready, _, _ = select.select(list(pending), [], [], deadline - time.monotonic())
            now = time.monotonic()
            for fd in ready:
                run = pending.pop(fd)
                # The keeper was reparented to us (we are a subreaper) when the
                # supervisor died: reap it through its pidfd.
                with contextlib.suppress(ChildProcessError):
                    os.waitid(os.P_PIDFD, fd, os.WEXITED)
                os.close(fd)
                out.append({"run": run, "latency_ms": (now - t0) * 1000})
        for fd, run in pending.items():
            os.close(fd)
            out.append({"run": run, "latency_ms": float("inf")})
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PIDFD, self.pidfd, os.WEXITED)
        self.popen.returncode = -signal.SIGKILL
        os.close(self.pidfd)
        assert self.popen.stdout is not None
        self.popen.stdout.close()
        return out


def run_crash(n: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    left = n
    while left > 0:
        batches = []
        for _ in range(args.crash_parallel):
            if left <= 0:
                break
            k = min(args.trees_per_supervisor, left)
            left -= k
            batches.append(CrashBatch(k, args))
        deadline = time.monotonic() + 60
        while not all(b.done for b in batches):
            fds = {b.popen.stdout.fileno(): b for b in batches if not b.done}  # type: ignore[union-attr]
            ready, _, _ = select.select(list(fds), [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise RuntimeError("supervisors did not report their trees in time")
            for fd in ready:
                fds[fd].feed()
        for b in batches:
            b.pin_keepers()
        starts = [(b, b.crash()) for b in batches]
        for b, t0 in starts:
            for item in b.finish(t0, args.grace + 10):
                run = item["run"]
                lid = run["lease_id"]
                left_alive = marker_scan({lid}).get(lid, [])
                results.append(
                    {
                        "lease_id": lid,
                        "cgroup": run["cgroup"],
                        "reason": "supervisor-crash",
                        "want": "supervisor-crash",
                        "latency_ms": item["latency_ms"],
                        "survivors": left_alive,
                        "escalated": True,
                        "built": True,
                        "session_key": b.session_key,
                    }
                )
    return results


# --- driver ---------------------------------------------------------------------------------


def run_mode(mode: str, args: argparse.Namespace, ledger: SignalLedger) -> dict[str, Any]:
    from tether.state.registry import Registry
    from tether.supervise.cgroups import CgroupProbe
    from tether.supervise.reconcile import reconcile

    if mode == "cgroup":
        os.environ.pop("TETHER_NO_CGROUP", None)
    else:
        os.environ["TETHER_NO_CGROUP"] = "1"
    CgroupProbe.reset()
    per_path: dict[str, list[dict[str, Any]]] = {}
    t_mode = time.monotonic()
    for path in PATHS:
        t = time.monotonic()
        if path == "supervisor-crash":
            per_path[path] = run_crash(args.trees_per_path, args)
        else:
            per_path[path] = asyncio.run(run_in_process(path, args.trees_per_path, args))
        print(f"  [{mode}] {path}: {len(per_path[path])} trees in {time.monotonic() - t:.1f}s")
    # Reconcile: the crashed supervisors' leases are still open; close them (and report
    # each run's end once). Nothing should need reaping: the keepers did it.
    with Registry() as reg:
        decisions = reconcile(reg, grace=args.grace)
        leases = {lease.lease_id: lease for lease in reg.leases()}
        events = Counter(
            e["sessionKey"]
            # A lost run's end is recorded as agent_run_ended (the session lives on).
            for e in reg.events(kind="agent_run_ended", limit=100000)
            if e.get("sessionKey")
        )
    lease_ids = {r["lease_id"] for rs in per_path.values() for r in rs}
    final_scan = marker_scan(lease_ids)
    populated = [lid for lid in lease_ids if cgroup_populated(leases[lid].cgroup_path)]
    crash_keys = {r["session_key"] for r in per_path["supervisor-crash"]}
    return {
        "mode": mode,
        "per_path": per_path,
        "decisions": Counter(d["kind"] for d in decisions),
        "lease_states": Counter(leases[lid].state for lid in lease_ids),
        # A crashed supervisor's tree is ended by its keeper before any cleanup of ours
        # reaches it: seed 000 marks such a lease lost (its end cannot be accounted for
        # by us), so crash leases are expected lost, the others closed.
        "crash_lease_states": Counter(
            leases[r["lease_id"]].state for r in per_path["supervisor-crash"]
        ),
        "final_marker_survivors": sum(len(v) for v in final_scan.values()),
        "populated_cgroups": len(populated),
        "leftover_cgroup_dirs": sum(
            1
            for lid in lease_ids
            if leases[lid].cgroup_path and os.path.isdir(leases[lid].cgroup_path)
        ),
        "crash_session_ended": sum(events[k] for k in crash_keys),
        "elapsed_s": time.monotonic() - t_mode,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--trees-per-path", type=int, default=50)
    ap.add_argument("--grace", type=float, default=0.5)
    ap.add_argument("--concurrency", type=int, default=6)
    # Long enough for a tree (~10 processes) to be built first on a loaded 2-core box;
    # the "built before end" column shows whether it was.
    ap.add_argument("--overall-timeout", type=float, default=1.5)
    ap.add_argument("--no-output-timeout", type=float, default=0.8)
    ap.add_argument("--trees-per-supervisor", type=int, default=5)
    ap.add_argument("--crash-parallel", type=int, default=2)
    ap.add_argument("--modes", default="cgroup,no-cgroup")
    args = ap.parse_args()
    if not sys.platform.startswith("linux"):
        print("soak: process ownership is Linux-only", file=sys.stderr)
        return 2

    home = tempfile.mkdtemp(prefix="tether-soak-")
    os.environ["TETHER_HOME"] = home
    become_subreaper()
    from tether import _os

    modes = [m for m in args.modes.split(",") if m]
    if "cgroup" in modes:
        mount = _os.find_cgroup2_mount()
        ok, why = _os.cgroup_writable(mount) if mount else (False, "no cgroup2 mount")
        if not ok:
            print(f"soak: skipping the cgroup mode: {why}")
            modes.remove("cgroup")
    ledger = SignalLedger()
    ledger.install()
    # Decoys: processes that are not ours to signal. They must all be alive at the end.
    base_env = {k: v for k, v in os.environ.items() if k != "TETHER_LEASE_ID"}
    decoys = [
        subprocess.Popen(["sleep", "3600"], env=base_env, start_new_session=True) for _ in range(4)
    ] + [
        subprocess.Popen(
            ["sleep", "3600"],
            env={**base_env, "TETHER_LEASE_ID": uuid.uuid4().hex},
            start_new_session=True,
        )
        for _ in range(4)
    ]
    total_trees = args.trees_per_path * len(PATHS) * len(modes)
    print(
        f"soak: {total_trees} trees ({args.trees_per_path} per path x {len(PATHS)} paths x "
        f"{len(modes)} modes), grace {args.grace * 1000:.0f} ms, concurrency {args.concurrency}"
    )
    try:
        results = [run_mode(mode, args, ledger) for mode in modes]
    finally:
        decoys_alive = sum(1 for d in decoys if d.poll() is None)
        for d in decoys:
            d.kill()  # our own unreaped children
            d.wait()
        shutil.rmtree(home, ignore_errors=True)

    failures = report(results, args, decoys_alive, len(decoys), ledger)
    return 1 if failures else 0


def report(
    results: list[dict[str, Any]],
    args: argparse.Namespace,
    decoys_alive: int,
    decoys: int,
    ledger: SignalLedger,
) -> list[str]:
    failures: list[str] = []
    lines = [
        "command: " + " ".join([Path(sys.executable).name, "bench/soak.py", *sys.argv[1:]]),
        f"Ownership soak ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
        f"Linux {os.uname().release}, Python {sys.version.split()[0]}): "
        f"tree = root ignoring SIGTERM + same-group child + setsid child + double-forked "
        f"setsid daemon + TERM-ignoring child + TERM-ignoring bash loop + bash->bash->sleep; "
        f"grace {args.grace * 1000:.0f} ms; concurrency {args.concurrency}; overall timeout "
        f"{args.overall_timeout} s; no-output timeout {args.no_output_timeout} s. Latency = "
        "end decided (aclose called / deadline due / supervisor SIGKILLed) -> extinction "
        "proven and reported; keeper = the keeper's own TERM -> ECHILD proof.",
        "",
        "| mode | end path | trees | right reason | built before end | survivors "
        "| p50 ms | p99 ms | max ms | keeper p50 / p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    total_survivors = 0
    for res in results:
        for path in PATHS:
            rs = res["per_path"][path]
            lat = [r["latency_ms"] for r in rs]
            kms = [r["keeper_ms"] for r in rs if r.get("keeper_ms") is not None]
            keeper = f"{pct(kms, 50):.1f} / {pct(kms, 99):.1f}" if kms else "= end-to-end"
            right = sum(1 for r in rs if r["reason"] == r["want"])
            built = sum(1 for r in rs if r["built"])
            surv = sum(len(r["survivors"]) for r in rs)
            total_survivors += surv
            if right != len(rs):
                failures.append(f"{res['mode']} {path}: {len(rs) - right} wrong reasons")
            if surv:
                failures.append(f"{res['mode']} {path}: {surv} survivors")
            lines.append(
                f"| {res['mode']} | {path} | {len(rs)} | {right}/{len(rs)} | {built}/{len(rs)} "
                f"| {surv} | {pct(lat, 50):.1f} | {pct(lat, 99):.1f} | {max(lat):.1f} | {keeper} |"
            )
    lines.append("")
    for res in results:
        final = res["final_marker_survivors"] + res["populated_cgroups"]
        total_survivors += final
        if final:
            failures.append(f"{res['mode']}: {final} survivors in the final sweep")
        states = dict(res["lease_states"])
        crash_states = dict(res["crash_lease_states"])
        lost = states.get("lost", 0)
        n_crash_leases = sum(crash_states.values())
        closed_wanted = sum(states.values()) - n_crash_leases
        if states.get("closed", 0) != closed_wanted or set(crash_states) - {"lost", "closed"}:
            failures.append(
                f"{res['mode']}: leases {states}, crash leases {crash_states}: want the"
                " in-process ones closed and the crashed ones lost (or closed if reaped)"
            )
        n_crash = len(res["per_path"]["supervisor-crash"])
        if res["crash_session_ended"] != n_crash:
            failures.append(
                f"{res['mode']}: {res['crash_session_ended']} agent_run_ended for {n_crash} crashes"
            )
        lines.append(
            f"- {res['mode']}: final /proc marker scan {res['final_marker_survivors']} live, "
            f"populated cgroups {res['populated_cgroups']}, leftover cgroup dirs "
            f"{res['leftover_cgroup_dirs']}; leases {states} (lost {lost}); reconcile "
            f"decisions {dict(res['decisions'])}; agent_run_ended for crashed runs "
            f"{res['crash_session_ended']}/{n_crash}; {res['elapsed_s']:.0f} s"
        )
    # A refusal is the fail-closed outcome (nothing was sent); only a delivered signal
    # to a process that was not ours counts as unowned, and the decoys witness that.
    unowned = decoys - decoys_alive
    if decoys_alive != decoys:
        failures.append(f"{decoys - decoys_alive} decoys were killed")
    lines.append(
        f"- signals to unowned processes: {decoys - decoys_alive} "
        f"(decoys alive {decoys_alive}/{decoys}: 4 without a marker, 4 with a foreign "
        f"lease's marker); in-process signal_verified: {dict(ledger.counts) or 'none'}"
    )
    lines.append(f"- TOTAL survivors: {total_survivors}; signals to unowned: {unowned}")
    lines.append(f"- verdict: {'PASS' if not failures else 'FAIL: ' + '; '.join(failures)}")
    print("\n".join(lines))
    return failures


if __name__ == "__main__":
    raise SystemExit(main())
