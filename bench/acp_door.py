"""The ACP front door's cost per warm turn (never part of ``make test``).

Usage::

    .venv/bin/python bench/acp_door.py             # 40 turns per case, acpx included
    .venv/bin/python bench/acp_door.py --runs 10 --no-acpx

Figures (milliseconds, median and p90 over ``--runs`` turns after warm-up turns):

* ``door turn``: a warm turn through ``tether acp`` -> owner -> mock agent, timed by an
  ACP client from writing ``session/prompt`` to reading its answer (the door process
  and the owner already run: what an editor or acpx pays per turn);
* ``library turn``: the same turn through ``tether.Client`` (IPC straight to the owner)
  -- the door's own overhead is the difference;
* ``tether prompt``: a direct ``tether prompt`` process, spawn to exit (what the issue
  compares against: a CLI turn pays the interpreter start-up);
* ``acpx -> tether acp`` vs ``acpx -> mock``: ``acpx prompt`` with ``tether acp --agent
  mock`` as its agent, and with the mock agent directly (acpx's own per-turn cost).

Everything started carries ``TETHER_BENCH_RUN=<id>``; at the end a /proc scan proves
nothing is left (the shared helpers of ``bench/run.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as shared  # bench/run.py: marker scan, verified kill, acpx installer

PY = sys.executable
MOCK = f"{PY} -m tether.testing.mock_agent"
WARMUP = 3


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "median": round(statistics.median(xs), 2),
        "p90": round(xs[min(len(xs) - 1, int(len(xs) * 0.9))], 2),
        "n": len(xs),
    }


def door_turns(env: dict[str, str], cwd: Path, runs: int) -> list[float]:
    """Warm turns through one ``tether acp`` process, timed by a raw ACP client."""
    proc = subprocess.Popen(
        [PY, "-m", "tether", "--cwd", str(cwd), "acp", "--agent", MOCK],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    next_id = 0

    def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
        nonlocal next_id
        next_id += 1
        frame = {"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}
        stdin.write((json.dumps(frame) + "\n").encode())
        stdin.flush()
        while True:
            answer = json.loads(stdout.readline())
            if answer.get("id") == next_id and "method" not in answer:
                return answer

    try:
        request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        sid = request("session/new", {"cwd": str(cwd), "mcpServers": []})["result"]["sessionId"]
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "echo warm turn"}]}
        times = []
        for i in range(WARMUP + runs):
            t0 = time.perf_counter()
            answer = request("session/prompt", prompt)
            elapsed = (time.perf_counter() - t0) * 1000
            assert answer["result"]["stopReason"] == "end_turn", answer
            if i >= WARMUP:
                times.append(elapsed)
        request("session/close", {"sessionId": sid})
    finally:
        stdin.close()
        proc.wait(timeout=30)
    return times


def library_turns(cwd: Path, runs: int) -> list[float]:
    import tether

    async def main() -> list[float]:
        times = []
        async with tether.Client() as client:
            session = await client.ensure_session(MOCK.split(), cwd=cwd, name="lib")
            for i in range(WARMUP + runs):
                t0 = time.perf_counter()
                await session.run("echo warm turn")
                if i >= WARMUP:
                    times.append((time.perf_counter() - t0) * 1000)
            await session.close()
        return times

    return asyncio.run(main())


def cli_turns(env: dict[str, str], cwd: Path, runs: int) -> list[float]:
    base = [str(Path(PY).parent / "tether"), "--cwd", str(cwd), "--agent", MOCK]
    quiet = {"env": env, "capture_output": True, "check": True}
    subprocess.run([*base, "sessions", "new", "-s", "cli"], **quiet)  # type: ignore[call-overload]
    times = []
    try:
        for i in range(WARMUP + runs):
            t0 = time.perf_counter()
            subprocess.run([*base, "prompt", "-s", "cli", "echo warm turn"], **quiet)  # type: ignore[call-overload]
            if i >= WARMUP:
                times.append((time.perf_counter() - t0) * 1000)
    finally:
        subprocess.run([*base, "sessions", "close", "-s", "cli"], **quiet)  # type: ignore[call-overload]
    return times


def acpx_turns(env: dict[str, str], cwd: Path, agent: str, runs: int) -> list[float]:
    base = ["node", str(shared.ACPX_CLI), "--agent", agent, "--approve-all", "--cwd", str(cwd)]
    quiet = {"env": env, "capture_output": True, "check": True, "cwd": cwd}
    subprocess.run([*base, "sessions", "new"], **quiet)  # type: ignore[call-overload]
    times = []
    try:
        for i in range(WARMUP + runs):
            t0 = time.perf_counter()
            subprocess.run([*base, "prompt", "echo warm turn"], **quiet)  # type: ignore[call-overload]
            if i >= WARMUP:
                times.append((time.perf_counter() - t0) * 1000)
    finally:
        subprocess.run([*base, "sessions", "close"], **{**quiet, "check": False})  # type: ignore[call-overload]
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--no-acpx", action="store_true")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="tether-bench-acp-door-"))
    home = root / "home"
    (home / "tmp").mkdir(parents=True)
    cwd = root / "project"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "ACPX_"))}
    env.update(
        {
            "HOME": str(home),
            "TMPDIR": str(home / "tmp"),
            "TETHER_HOME": str(home / "tether"),
            shared.MARK: shared.RUN_ID,
        }
    )
    os.environ.update({"TETHER_HOME": env["TETHER_HOME"], shared.MARK: shared.RUN_ID})
    results: dict[str, Any] = {}
    results["door turn"] = _stats(door_turns(env, cwd, args.runs))
    results["library turn"] = _stats(library_turns(cwd, args.runs))
    results["tether prompt"] = _stats(cli_turns(env, cwd, max(10, args.runs // 2)))
    if not args.no_acpx:
        tool = shared.Acpx(root)
        shared.install_acpx(tool)
        if tool.available:
            n = max(5, args.runs // 4)
            door = f"{PY} -m tether acp --agent mock"
            results["acpx -> tether acp"] = _stats(acpx_turns(env, cwd, door, n))
            results["acpx -> mock"] = _stats(acpx_turns(env, cwd, MOCK, n))
        else:
            results["acpx"] = {"skipped": tool.reason}
    door_ms = results["door turn"]["median"]
    results["door overhead vs library (ms)"] = round(door_ms - results["library turn"]["median"], 2)
    results["door vs tether prompt (ms)"] = round(door_ms - results["tether prompt"]["median"], 2)
    deadline = time.monotonic() + 15.0
    while (left := shared.marker_scan(shared.MARK, shared.RUN_ID)) and time.monotonic() < deadline:
        time.sleep(0.1)  # owners finish shutting down after their close
    for pid, start in left.items():
        shared.kill_verified(pid, start)
    results["survivors"] = len(left)
    print(json.dumps(results, indent=2))
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
