"""A stand-alone supervisor: spawn escape trees under keepers, report them, then idle.

Run as ``python supervisor.py --trees N --grace G [--session-key K] -- <agent argv>``.
It opens the Registry of ``$TETHER_HOME``, ``spawn_agent()``s N agents (each must
print one ``{"ready": ...}`` JSON line when its tree is built: see escape_tree.py),
prints one JSON line per run::

    {"lease_id": ..., "keeper": {"pid", "starttime"}, "supervisor": {...}, "tree": {...}}

then ``{"all_ready": true}``, and sleeps until it is killed. Tests and the soak
SIGKILL it to check that the keeper alone takes each tree down, and that reconcile
closes the leases afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from tether.state.registry import Registry
from tether.supervise.runner import AgentProcess, SpawnSpec, spawn_agent


def _starttime(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    return int(raw[raw.rindex(b")") + 2 :].split()[19])


async def _one(registry: Registry, args: argparse.Namespace, argv: list[str]) -> None:
    proc: AgentProcess = await spawn_agent(
        SpawnSpec(argv=argv, cwd=os.getcwd(), grace=args.grace, session_key=args.session_key),
        registry,
    )
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[dict[str, object]] = loop.create_future()
    buf = bytearray()

    def on_data(data: bytes) -> None:
        buf.extend(data)
        while b"\n" in buf:
            i = buf.index(b"\n")
            line = bytes(buf[:i])
            del buf[: i + 1]
            if line.startswith(b"{") and not ready.done():
                ready.set_result(json.loads(line))

    proc.set_stdout_handler(on_data, lambda: None)
    tree = await asyncio.wait_for(ready, 20)
    assert proc.keeper_pid is not None
    line = {
        "lease_id": proc.lease_id,
        "keeper": {"pid": proc.keeper_pid, "starttime": _starttime(proc.keeper_pid)},
        "supervisor": {"pid": os.getpid(), "starttime": _starttime(os.getpid())},
        "cgroup": proc.cgroup,
        "tree": tree,
    }
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", type=int, default=1)
    ap.add_argument("--grace", type=float, default=0.3)
    ap.add_argument("--session-key", default=None)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    registry = Registry()
    # Spawns run on the loop thread (pdeathsig follows the forking thread).
    await asyncio.gather(*(_one(registry, args, argv) for _ in range(args.trees)))
    sys.stdout.write(json.dumps({"all_ready": True}) + "\n")
    sys.stdout.flush()
    await asyncio.Event().wait()  # until SIGKILLed


if __name__ == "__main__":
    asyncio.run(main())
