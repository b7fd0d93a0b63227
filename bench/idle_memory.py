"""What an idle warm session costs a host in Tether's own processes (issue 23, item 3).

For N sessions of the mock agent, each prompted once and then left idle, it reads every
owner's and keeper's ``/proc/<pid>/smaps_rollup`` (PSS -- shared pages divided among
the processes sharing them -- and RSS) and thread count, and reports medians per
session. With ``--breakdown`` it adds where a fresh owner's anonymous memory goes
(the interpreter, then each import on the owner's path). With ``--fork-probe`` it
measures what a design change would give: N idle "owners" forked from one process that
imported the owner's modules first (each with an event loop, a unix server, a SQLite
connection in WAL and one extra thread, as an idle owner has) -- the figure behind the
proposal in ``docs/benchmarks.md``, since built as the gateway's owner fork server.

With ``--gateway`` the same N sessions are also created and prompted through ``tether
serve`` (``bench/scale_sides.py``), twice: with its owner fork server
(``tether.forkserver``, the default) and with ``serve.ownerForkServer = false`` (owners
exec'd, as the CLI starts them). The fork server's own PSS is shared by the owners it
forked: it is reported, and its share (÷ N) added to Tether's own per session.

Every session is closed at the end (``tether sessions close``, or ``DELETE`` through the
gateway, which is then stopped); the pids read from ``status`` are then checked gone by
(pid, start time).

    .venv/bin/python bench/idle_memory.py --sessions 20 --breakdown --gateway
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TETHER = str(Path(sys.executable).parent / "tether")


def smaps(pid: int) -> dict[str, int]:
    """KiB figures of one process, or {} when it is gone."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss", "Pss_Anon", "Pss_File"):
                    out[key] = int(rest.split()[0])
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    out["Threads"] = int(line.split()[1])
    except OSError:
        return {}
    return out


def starttime(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def tether(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_HOME": str(home)}
    env.pop("IS_SANDBOX", None)
    return subprocess.run(
        [TETHER, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def sessions_figure(n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tether-idle-mem-") as tmp:
        home, cwd = Path(tmp) / "home", Path(tmp) / "proj"
        cwd.mkdir()
        pids: list[tuple[int, int | None]] = []
        rows: list[dict[str, dict[str, int]]] = []
        try:
            for i in range(n):
                r = tether(home, cwd, "mock", "sessions", "new", "-s", f"s{i}")
                if r.returncode != 0:
                    raise SystemExit(f"sessions new {i} failed: {r.stderr.strip()}")
                r = tether(home, cwd, "mock", "-s", f"s{i}", "prompt", "hello")
                if r.returncode != 0:
                    raise SystemExit(f"prompt {i} failed: {r.stderr.strip()}")
            time.sleep(3.0)  # idle: the owners' post-turn trims have run
            for i in range(n):
                r = tether(home, cwd, "--format", "json", "mock", "status", "-s", f"s{i}")
                rows.append(read_row(json.loads(r.stdout), pids))
        finally:
            for i in range(n):
                tether(home, cwd, "mock", "sessions", "close", "-s", f"s{i}")
        check_gone(pids)
    return summarize(n, rows)


def read_row(status: dict[str, Any], pids: list[tuple[int, int | None]]) -> dict[str, Any]:
    """A session's processes' figures by role, from its status; their (pid, start time)
    appended to ``pids`` (checked gone at the end)."""
    row = {}
    for role in ("ownerPid", "keeperPid", "agentPid"):
        pid = status.get(role)
        if isinstance(pid, int):
            pids.append((pid, starttime(pid)))
            row[role] = smaps(pid)
    return row


def check_gone(pids: list[tuple[int, int | None]]) -> None:
    """Every (pid, start time) read is gone within 20 s, or we stop with the survivors."""
    deadline = time.monotonic() + 20
    left = [p for p, st in pids if st is not None and starttime(p) == st]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p, st in pids if st is not None and starttime(p) == st]
    if left:
        raise SystemExit(f"processes still alive after close: {left}")


def summarize(n: int, rows: list[dict[str, dict[str, int]]]) -> dict[str, Any]:
    """Medians per session of each role's figures; Tether's own = owner + keeper."""

    def fig(role: str, key: str) -> float:
        return median([r[role][key] / 1024 for r in rows if r.get(role, {}).get(key)])

    out: dict[str, Any] = {"sessions": n}
    for role in ("ownerPid", "keeperPid", "agentPid"):
        name = role.removesuffix("Pid")
        for key in ("Pss", "Rss", "Pss_Anon", "Threads"):
            out[f"{name}.{key}"] = fig(role, key) if key != "Threads" else fig(role, key) * 1024
    out["tether.Pss"] = out["owner.Pss"] + out["keeper.Pss"]
    out["tether.Rss"] = out["owner.Rss"] + out["keeper.Rss"]
    return out


def gateway_figure(n: int, *, fork_server: bool, per_host: int = 0) -> dict[str, Any]:
    """The same N idle sessions, created and prompted once through ``tether serve``
    (``per_host``: its owners that many to a session host, each host's figures shared
    out among the sessions it holds)."""
    import asyncio

    from scale_sides import TetherSide  # bench/ is this script's directory

    config = "" if fork_server else "[serve]\nownerForkServer = false\n"
    if per_host:
        config = f"[serve]\nsessionHosts = {per_host}\n"
    env = {k: v for k, v in os.environ.items() if k != "IS_SANDBOX"}
    with tempfile.TemporaryDirectory(prefix="tether-idle-mem-gw-") as tmp:
        side = TetherSide(Path(tmp), env, config)
        pids: list[tuple[int, int | None]] = []
        rows: list[dict[str, dict[str, int]]] = []
        server: dict[str, int] = {}
        try:
            for i in range(n):
                side.create(i)
                asyncio.run(side.prompt(i))
            time.sleep(3.0)  # idle: the owners' post-turn trims have run
            statuses = [side.http.get(f"/v1/sessions/{s}").json()["status"] for s in side.sessions]
            rows.extend(read_row(status, pids) for status in statuses)
            share_hosts(statuses, rows)
            forker = side.http.get("/v1/health").json().get("forkServer") or {}
            if forker.get("pid"):
                server = smaps(int(forker["pid"]))
                pids.append((int(forker["pid"]), starttime(int(forker["pid"]))))
        finally:
            errors = side.stop()
        if errors:
            raise SystemExit(f"closing sessions: {errors[:3]}")
        check_gone(pids)
    out = summarize(n, rows)
    out["forkserver.Pss"] = server.get("Pss", 0) / 1024
    out["forkserver.Rss"] = server.get("Rss", 0) / 1024
    out["tether.Pss"] += out["forkserver.Pss"] / n  # its pages are the owners' shared ones
    return out


def share_hosts(statuses: list[dict[str, Any]], rows: list[dict[str, dict[str, int]]]) -> None:
    """A session host is the owner of several sessions: each gets its share of it."""
    count: dict[Any, int] = {}
    for status in statuses:
        count[status.get("ownerPid")] = count.get(status.get("ownerPid"), 0) + 1
    for status, row in zip(statuses, rows, strict=True):
        shared = count[status.get("ownerPid")]
        if shared > 1 and "ownerPid" in row:
            row["ownerPid"] = {k: v // shared for k, v in row["ownerPid"].items()}


BREAKDOWN = (
    "asyncio",
    "sqlite3",
    "tether.state.registry",
    "tether.state.journal.writer",
    "tether.acp.connection",
    "tether.supervise.runner",
    "tether.owner.compose",
    "tether.owner.daemon",
)

_BREAKDOWN_CHILD = """
import importlib, sys
def anon():
    for line in open('/proc/self/smaps_rollup'):
        if line.startswith('Pss_Anon:'):
            return int(line.split()[1])
    return 0
print('interpreter', anon())
for name in sys.argv[1:]:
    importlib.import_module(name)
    print(name, anon())
"""


def breakdown() -> list[tuple[str, float]]:
    r = subprocess.run(
        [sys.executable, "-c", _BREAKDOWN_CHILD, *BREAKDOWN],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows, prev = [], 0
    for line in r.stdout.splitlines():
        name, kib = line.rsplit(" ", 1)
        rows.append((name, (int(kib) - prev) / 1024))
        prev = int(kib)
    return rows


_FORK_CHILD = """
import asyncio, gc, os, sqlite3, sys, threading, time
import tether.owner.daemon, tether.owner.compose  # what an owner imports
n, tmp = int(sys.argv[1]), sys.argv[2]
gc.collect(); gc.freeze()  # keep the imported objects out of the collector's passes
kids = []
for i in range(n):
    pid = os.fork()
    if pid == 0:
        db = sqlite3.connect(f'{tmp}/s{i}.db'); db.execute('pragma journal_mode=wal')
        db.execute('create table if not exists t(x)'); db.commit()
        threading.Thread(target=threading.Event().wait, daemon=True).start()
        async def idle():
            await asyncio.start_unix_server(lambda r, w: None, path=f'{tmp}/s{i}.sock')
            await asyncio.sleep(6)
        asyncio.run(idle()); os._exit(0)
    kids.append(pid)
time.sleep(4)
for pid in kids:
    f = {}
    for line in open(f'/proc/{pid}/smaps_rollup'):
        k, _, v = line.partition(':')
        if k in ('Pss', 'Rss'): f[k] = int(v.split()[0])
    print(f['Pss'], f['Rss'])
for pid in kids:
    os.waitpid(pid, 0)
"""


def fork_probe(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tether-fork-probe-") as tmp:
        r = subprocess.run(
            [sys.executable, "-c", _FORK_CHILD, str(n), tmp],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    pairs = [tuple(int(x) for x in line.split()) for line in r.stdout.splitlines()]
    return {
        "forked.Pss": median([p for p, _ in pairs]) / 1024,
        "forked.Rss": median([r for _, r in pairs]) / 1024,
    }


def print_side_by_side(figures: list[tuple[str, dict[str, Any]]]) -> None:
    """PSS / RSS MiB per session, each way of starting owners in a column."""
    print("\n| per idle session, PSS / RSS MiB | " + " | ".join(n for n, _ in figures) + " |")
    print("|---" * (len(figures) + 1) + "|")
    rows = (
        ("owner", "owner"),
        ("keeper", "keeper"),
        ("the fork server (shared by all)", "forkserver"),
        ("**Tether's own (owner + keeper + fork server ÷ N)**", "tether"),
        ("(the mock agent)", "agent"),
    )
    for label, key in rows:
        cells = []
        for _, fig in figures:
            pss, rss = fig.get(key + ".Pss"), fig.get(key + ".Rss")
            cells.append("—" if not pss else f"{pss:.1f} / {rss:.1f}")
        print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--fork-probe", action="store_true")
    ap.add_argument("--gateway", action="store_true", help="also through tether serve")
    ap.add_argument(
        "--session-hosts",
        type=int,
        default=0,
        metavar="N",
        help="with --gateway: also with the owners N to a session host",
    )
    args = ap.parse_args()
    if not 1 <= args.sessions <= 300:
        raise SystemExit("--sessions: 1..300")
    print(f"# idle warm sessions, mock agent, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    fig = sessions_figure(args.sessions)
    print(f"sessions: {fig['sessions']}")
    print("| process | PSS MiB | RSS MiB | anon PSS MiB | threads |")
    print("|---|---|---|---|---|")
    for name in ("owner", "keeper", "agent"):
        print(
            f"| {name} | {fig[name + '.Pss']:.1f} | {fig[name + '.Rss']:.1f} |"
            f" {fig[name + '.Pss_Anon']:.1f} | {fig[name + '.Threads']:.0f} |"
        )
    own = f"{fig['tether.Pss']:.1f} | {fig['tether.Rss']:.1f}"
    print(f"| Tether's own (owner + keeper) | {own} | | |")
    if args.gateway:
        print_side_by_side(
            [
                ("CLI (exec)", fig),
                ("gateway, exec", gateway_figure(args.sessions, fork_server=False)),
                ("gateway, fork server", gateway_figure(args.sessions, fork_server=True)),
            ]
            + (
                [
                    (
                        f"gateway, session hosts of {args.session_hosts}",
                        gateway_figure(
                            args.sessions, fork_server=True, per_host=args.session_hosts
                        ),
                    )
                ]
                if args.session_hosts
                else []
            )
        )
    if args.breakdown:
        print("\n| an owner's anonymous memory, step by step | MiB |\n|---|---|")
        for name, mib in breakdown():
            print(f"| {name} | {mib:+.1f} |")
    if args.fork_probe:
        probe = fork_probe(args.sessions)
        print(
            f"\nforked from one process that imported the owner's modules: {args.sessions}"
            f" idle owners, PSS {probe['forked.Pss']:.1f} MiB,"
            f" RSS {probe['forked.Rss']:.1f} MiB each"
        )


if __name__ == "__main__":
    main()
