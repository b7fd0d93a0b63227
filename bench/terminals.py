"""Agents' terminals: what a supervised terminal costs.

Usage::

    .venv/bin/python bench/terminals.py            # 20 rounds
    .venv/bin/python bench/terminals.py --n 50

Three figures, through :class:`tether.process_terminals.ProcessTerminals` (what ``terminal/*``
runs on), with no agent and no ACP in between:

* **create**: ``start`` of ``true`` -- keeper, lease, spawn, identity committed;
* **create → exit → release**: the whole life of a command that exits at once, up to
  the proof that nothing of it is left;
* **kill**: ending a running ``sleep`` (TERM through the keeper, then the proof).

Everything runs under a temporary TETHER_HOME; at the end every terminal's lease must
have no live process carrying its marker. This measures, it never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time


def _summary(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1000:6.1f} ms   min {min(xs) * 1000:6.1f} ms"


async def _run(n: int) -> None:
    from tether import _os
    from tether.acp.terminals import TerminalCommand
    from tether.process_terminals import ProcessTerminals, TerminalSettings
    from tether.state.registry import Registry
    from tether.supervise.verify import marked_survivors, marker_for

    registry = Registry()
    host = ProcessTerminals(registry, "bench", None, TerminalSettings())
    cwd = os.getcwd()
    create: list[float] = []
    whole: list[float] = []
    kill: list[float] = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            run = await host.start(TerminalCommand(["true"], cwd, {}, "s"), lambda _b: None)
            t1 = time.perf_counter()
            await run.wait_exited()
            await run.end()
            whole.append(time.perf_counter() - t0)
            create.append(t1 - t0)
            run = await host.start(TerminalCommand(["sleep", "100"], cwd, {}, "s"), lambda _b: None)
            t2 = time.perf_counter()
            await run.end()
            kill.append(time.perf_counter() - t2)
    finally:
        await host.aclose()
    left = [
        lease
        for lease in host.runs
        if marked_survivors(_os.current(), marker_for(lease), exclude=[os.getpid()])
    ]
    registry.close()
    print(f"create                    {_summary(create)}")
    print(f"create -> exit -> release {_summary(whole)}")
    print(f"kill (with proof)         {_summary(kill)}")
    print(f"terminals with a live marked process afterwards: {len(left)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="rounds (default 20)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as home:
        os.environ["TETHER_HOME"] = home
        asyncio.run(_run(args.n))


if __name__ == "__main__":
    main()
