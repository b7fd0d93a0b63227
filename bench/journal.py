"""The session journal's cost and speed (issue: a session anyone can watch). Never in `make test`.

Usage::

    .venv/bin/python bench/journal.py             # every figure (a few minutes)
    .venv/bin/python bench/journal.py --quick     # fewer runs, a 100,000-entry journal

Figures, side by side in one run -- "journal" is the default, "frames off" is the same
owner with ``journalFrames = false`` (control records only: today's figures before the
journal, as close as the code allows):

* streaming 10,000 chunks: updates/s at the prompting caller, with three
  ``sessions watch --format json`` followers attached (journal) and with none (frames off);
* warm prompt: median wall time of ``tether mock prompt "echo hi"``;
* replay: entries/s of ``sessions watch --from 1 --no-follow --format json`` over the
  journal the streams wrote;
* owner RSS with a 1,000,000-entry journal (``--quick``: 100,000), written by one turn:
  settled (idle 2.5 s after it) and the peak while streaming (VmHWM);
* journal bytes per streamed update (as stored: chunks of entry lines, compressed).

Everything runs under a temporary TETHER_HOME with the bundled mock agent. Every process
started carries TETHER_BENCH_RUN=<id>; at the end a /proc scan for that marker proves
nothing is left (found processes are reported, never killed by name).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TETHER = str(Path(sys.executable).parent / "tether")
RUN_ID = uuid.uuid4().hex[:16]
MARK = "TETHER_BENCH_RUN"


def env_for(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"TETHER_HOME": str(home), MARK: RUN_ID, "PYTHONUNBUFFERED": "1"})
    env.pop("IS_SANDBOX", None)
    return env


def tether(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [TETHER, "mock", *args], env=env_for(home), capture_output=True, timeout=600, check=check
    )


def session(home: Path, name: str, *, frames: bool) -> None:
    (home / "config.toml").write_text(f"journalFrames = {'true' if frames else 'false'}\n")
    tether(home, "sessions", "new", "-s", name)
    tether(home, "prompt", "-s", name, "echo warm-up")


def stream_rate(home: Path, name: str, n: int, watchers: int) -> float:
    """Updates per second seen by the prompting caller (first chunk to [done])."""
    followers = [
        subprocess.Popen(
            [TETHER, "mock", "--format", "json", "sessions", "watch", "-s", name],
            env=env_for(home),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(watchers)
    ]
    time.sleep(0.3)  # let them attach (setup, outside the measured span)
    proc = subprocess.Popen(
        [TETHER, "mock", "--format", "quiet", "prompt", "-s", name, f"stream {n} x"],
        env=env_for(home),
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    first = proc.stdout.read(1)
    t0 = time.perf_counter()
    rest = proc.stdout.read()
    t1 = time.perf_counter()
    proc.wait()
    for f in followers:
        f.terminate()
        f.wait()
    lines = (first + rest).count(b"\n")
    assert lines >= n, f"stream delivered {lines} of {n} chunks"
    return n / (t1 - t0)


def warm_ms(home: Path, name: str, runs: int) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        tether(home, "prompt", "-s", name, "echo hi")
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def replay_rate(home: Path, name: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = tether(
        home, "--format", "json", "sessions", "watch", "-s", name, "--from", "1", "--no-follow"
    )
    dt = time.perf_counter() - t0
    entries = out.stdout.count(b"\n")
    return entries / dt, entries


def owner_rss_mb(home: Path, name: str) -> tuple[float, float]:
    """The owner's resident set now and at its peak (VmHWM), MB."""
    import json

    status = json.loads(tether(home, "--format", "json", "status", "-s", name).stdout)
    pid = status["ownerPid"]
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            found[line[:5]] = int(line.split()[1]) / 1024
    return found.get("VmRSS", float("nan")), found.get("VmHWM", float("nan"))


def journal_size(home: Path) -> tuple[int, int]:
    db = sqlite3.connect(home / "state.db")
    entries, size = db.execute(
        "SELECT sum(entries), sum(length(data)) FROM journal_chunks"
    ).fetchone()
    db.close()
    return int(entries), int(size or 0)


def leftovers() -> list[int]:
    needle = f"{MARK}={RUN_ID}".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                env = Path(f"/proc/{name}/environ").read_bytes()
                state = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in env.split(b"\0") and state != b"Z":
                found.append(int(name))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    runs = 5 if args.quick else 15
    big = 100_000 if args.quick else 1_000_000
    with tempfile.TemporaryDirectory(prefix="tether-bench-journal-") as tmp:
        on, off = Path(tmp) / "on", Path(tmp) / "off"
        on.mkdir()
        off.mkdir()
        session(on, "j", frames=True)
        session(off, "j", frames=False)
        rates_on, rates_off, warm_on, warm_off = [], [], [], []
        for _ in range(3 if args.quick else 5):  # alternating A/B
            rates_on.append(stream_rate(on, "j", 10_000, watchers=3))
            rates_off.append(stream_rate(off, "j", 10_000, watchers=0))
        for _ in range(3):
            warm_on.append(warm_ms(on, "j", runs))
            warm_off.append(warm_ms(off, "j", runs))
        entries, size = journal_size(on)
        replay, replayed = replay_rate(on, "j")
        # The default retention (200,000 entries) would prune a 1,000,000-entry journal.
        (on / "config.toml").write_text(f"journalFrames = true\njournalMaxEntries = {2 * big}\n")
        tether(on, "sessions", "new", "-s", "big")
        tether(on, "--format", "quiet", "prompt", "-s", "big", f"stream {big} x")
        time.sleep(2.5)  # the owner gives a burst's memory back once idle for a second
        rss, peak = owner_rss_mb(on, "big")
        big_entries = journal_size(on)[0] - entries
        for home in (on, off):
            for name in ("j", "big"):
                tether(home, "sessions", "close", "-s", name, check=False)
    left = leftovers()
    print(
        "journal bench,",
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        f"{os.cpu_count()} cores",
    )
    print("| figure | journal | frames off | ratio |")
    print("|---|---|---|---|")
    s_on, s_off = statistics.median(rates_on), statistics.median(rates_off)
    print(
        "| stream 10k chunks, updates/s (3 watchers / none) |",
        f"{s_on:,.0f} | {s_off:,.0f} | {s_on / s_off:.2f} |",
    )
    w_on, w_off = statistics.median(warm_on), statistics.median(warm_off)
    print(f"| warm prompt, ms (median) | {w_on:.1f} | {w_off:.1f} | +{w_on - w_off:.1f} ms |")
    print(f"| replay to a watcher, entries/s ({replayed:,} entries) | {replay:,.0f} | - | - |")
    print(
        f"| owner RSS with a {big_entries:,}-entry journal, MB (settled; peak) |",
        f"{rss:.1f}; {peak:.1f} | - | - |",
    )
    print(f"| journal bytes per stored entry | {size / max(entries, 1):.0f} | - | - |")
    print(f"survivors: {len(left)} {left if left else ''}")
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
