"""What the CLI against a remote Tether costs: a warm ``tether prompt`` locally vs
through a gateway (``--server``), over TCP loopback and over a Unix socket.

Usage::

    .venv/bin/python bench/remote_cli.py [--runs N]

One temporary ``TETHER_HOME`` and one ``tether serve`` on it (TCP on a free loopback
port; a second one on a Unix socket). Three warm sessions of the bundled mock agent, in
three directories, one per path: local (the CLI talks IPC to the owner), remote over
TCP, remote over the Unix socket (the CLI talks HTTP to the gateway, which talks IPC to
the same kind of owner). Each sample is the wall time of one ``tether prompt "echo hi"``
process, from spawn to exit (the end of its turn), in alternating order; medians and
ranges are printed. Also ``python -X importtime`` of the remote path's modules.
Never part of ``make test``.

Cleanup: every session is closed through the CLI, then the gateways we started are
SIGTERMed and reaped (by the pid we hold: nothing is matched by name).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

PROMPT = "echo hi"


def tether(*args: str, env: dict[str, str], check: bool = True) -> float:
    """Run ``tether ARGS``; its wall time in seconds."""
    start = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "tether", *args], capture_output=True, text=True, env=env
    )
    elapsed = time.perf_counter() - start
    if check and r.returncode != 0:
        raise SystemExit(f"tether {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return elapsed


def serve(env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--format", "json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=10)
        raise SystemExit("tether serve did not start")
    return proc, str(json.loads(line)["url"])


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def importtime(env: dict[str, str], cwd: str) -> dict[str, float]:
    """Cumulative import times (ms) of the remote path's modules, one remote status."""
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tether", "--cwd", cwd, "mock", "status"],
        capture_output=True,
        text=True,
        env=env,
    )
    wanted = ("http.client", "tether.remote.client", "tether.cli", "ssl")
    out = {}
    for line in r.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() in wanted:
            out[parts[2].strip()] = int(parts[1]) / 1000
    return out


def report(name: str, samples: list[float], base: float | None = None) -> float:
    ms = sorted(s * 1000 for s in samples)
    median = statistics.median(ms)
    extra = "" if base is None else f"   (+{median - base:.1f} ms over local)"
    print(f"{name:34s} min {ms[0]:6.1f}  median {median:6.1f}  max {ms[-1]:6.1f} ms{extra}")
    return median


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory(prefix="tb-", dir="/tmp") as root:
        home = os.path.join(root, "home")
        dirs = {name: os.path.join(root, name) for name in ("local", "tcp", "unix")}
        for d in (home, *dirs.values()):
            os.mkdir(d)
        env = {**os.environ, "TETHER_HOME": home}
        env.pop("TETHER_SERVER", None)
        # Compiled modules are cached, as in any installation (else each run compiles
        # every module changed since the last cache, a cost no user pays twice).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        tcp, tcp_url = serve(env, "--port", "0")
        unix, unix_url = serve(env, "--unix", os.path.join(root, "gw.sock"))
        envs = {
            "local": env,
            "tcp": {**env, "TETHER_SERVER": tcp_url},
            "unix": {**env, "TETHER_SERVER": unix_url},
        }
        try:
            for name, d in dirs.items():
                tether("--cwd", d, "mock", "sessions", "new", env=envs[name])
                for _ in range(3):  # warm: the agent is up, the gateway's follower too
                    tether("--cwd", d, "mock", "prompt", PROMPT, env=envs[name])
            samples: dict[str, list[float]] = {name: [] for name in dirs}
            for i in range(runs):
                order = list(dirs) if i % 2 == 0 else list(reversed(dirs))
                for name in order:
                    samples[name].append(
                        tether("--cwd", dirs[name], "mock", "prompt", PROMPT, env=envs[name])
                    )
            print(f"warm `tether prompt {PROMPT!r}`, CLI start to end of turn, {runs} runs each")
            base = report("local (IPC to the owner)", samples["local"])
            report("remote, TCP loopback (--server)", samples["tcp"], base)
            report("remote, Unix socket (--server)", samples["unix"], base)
            times = importtime(envs["tcp"], dirs["tcp"])
            print("imports on the remote path (cumulative, ms):", json.dumps(times))
        finally:
            for name, d in dirs.items():
                tether("--cwd", d, "mock", "sessions", "close", env=envs[name], check=False)
            stop(tcp)
            stop(unix)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
