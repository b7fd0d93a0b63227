"""What an MCP bridge costs an agent's start: `tether mcp` vs the official SDK.

Usage::

    .venv/bin/python bench/mcp_start.py [--runs N]

Measures, for each server, the wall time from spawning it to reading its answer to
``initialize`` (the agent waits for this before its session is ready), and its peak RSS
(``ru_maxrss`` of the reaped child). The SDK server is the smallest one the SDK offers
(``MCPServer`` with one tool, stdio). Also prints ``python -X importtime`` totals for
``import mcp.server`` and ``import tether.mcp.server``. Never part of ``make test``.
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

from tether.testing.mock_delegation import INITIALIZE as INIT

SDK_SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("bench")
@server.tool()
def echo(text: str) -> str:
    return text
server.run()
"""


def one(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Seconds from spawn to the initialize answer; peak RSS (KiB) of the server."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(json.dumps(INIT).encode() + b"\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - start
    assert json.loads(line)["id"] == 1, line
    proc.stdin.close()
    _pid, _status, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped above; stop Popen from waiting on a recycled pid
    return elapsed, usage.ru_maxrss


def importtime(module: str) -> float:
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
    )
    last = [x for x in r.stderr.splitlines() if x.rstrip().endswith(f"| {module}")]
    return int(last[-1].split("|")[1]) / 1e6 if last else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "TETHER_HOME": home}
        servers = {
            "tether mcp": [sys.executable, "-m", "tether", "mcp"],
            "mcp SDK 2.3.0 (MCPServer)": [sys.executable, "-c", SDK_SERVER],
        }
        for name, argv in servers.items():
            samples = [one(argv, env) for _ in range(runs)]
            times = sorted(t for t, _ in samples)
            rss = max(r for _, r in samples)
            print(
                f"{name:28s} initialize answered: p50 {statistics.median(times) * 1000:6.0f} ms"
                f"  max {times[-1] * 1000:6.0f} ms   peak RSS {rss / 1024:5.0f} MiB"
            )
    for module in ("tether.mcp.server", "mcp.server"):
        print(f"import {module:20s} {importtime(module) * 1000:6.0f} ms (-X importtime)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
