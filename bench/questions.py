"""Questions for a human: how fast a question reaches a controller, and its answer the agent.

Usage::

    .venv/bin/python bench/questions.py              # 500 questions
    .venv/bin/python bench/questions.py --n 100

Two figures, each over the IPC hop between the owner and a watching controller:

* **ask**: from the agent writing ``session/request_permission`` to a controller
  (a ``watch`` connection with ``control: true``) receiving the ``interaction`` frame;
* **answer**: from the controller sending its ``answer`` request to the agent reading
  the ``session/request_permission`` result.

The agent is this file run with ``--agent``: a minimal ACP agent whose one prompt asks N
permissions in a row, stamping each with ``time.monotonic()`` (``rawInput.sentAt``; on
Linux CLOCK_MONOTONIC is one clock for every process) and reporting when each answer
arrived (``_bench/answered`` notifications, which the owner journals and the watcher
receives). The target is at most 5 ms each; this measures, it never asserts.

Everything runs under a temporary TETHER_HOME. Every process started carries
TETHER_BENCH_RUN=<id>; a /proc scan for it at the end proves nothing is left.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

TETHER = str(Path(sys.executable).parent / "tether")
RUN_ID = uuid.uuid4().hex[:16]
MARK = "TETHER_BENCH_RUN"


# --- the agent (run with --agent) -------------------------------------------------------


def _send(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _read() -> dict[str, Any] | None:
    line = sys.stdin.readline()
    return json.loads(line) if line else None


def run_agent() -> int:
    """A minimal ACP agent: a prompt ``N`` asks N permissions, one after the other."""
    while (msg := _read()) is not None:
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            _send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1}})
        elif method == "session/new":
            _send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "bench"}})
        elif method == "session/prompt":
            text = msg["params"]["prompt"][0].get("text", "0")
            for i in range(int(text)):
                _send(
                    {
                        "jsonrpc": "2.0",
                        "id": f"perm-{i}",
                        "method": "session/request_permission",
                        "params": {
                            "sessionId": "bench",
                            "toolCall": {
                                "toolCallId": f"c{i}",
                                "title": f"step {i}",
                                "kind": "edit",
                                "rawInput": {"sentAt": time.monotonic()},
                            },
                            "options": [
                                {"optionId": "ok", "name": "Allow", "kind": "allow_once"},
                                {"optionId": "no", "name": "Reject", "kind": "reject_once"},
                            ],
                        },
                    }
                )
                while (answer := _read()) is not None and answer.get("id") != f"perm-{i}":
                    pass
                _send(
                    {
                        "jsonrpc": "2.0",
                        "method": "_bench/answered",
                        "params": {"sessionId": "bench", "i": i, "at": time.monotonic()},
                    }
                )
            _send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
        elif rid is not None:
            _send({"jsonrpc": "2.0", "id": rid, "result": {}})
    return 0


# --- the bench ---------------------------------------------------------------------------


def env_for(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"TETHER_HOME": str(home), MARK: RUN_ID, "PYTHONUNBUFFERED": "1"})
    return env


def tether(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    agent = f"{sys.executable} {Path(__file__).resolve()} --agent"
    return subprocess.run(
        [TETHER, "--cwd", str(cwd), "--agent", agent, *args],
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )


class Controller:
    """A raw watch connection with ``control: true``."""

    def __init__(self, socket_path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(socket_path)
        self.file = self.sock.makefile("rb")
        self.file.readline()  # hello
        self.send({"v": 2, "requestId": "w", "kind": "watch", "payload": {"control": True}})

    def send(self, obj: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def frame(self) -> dict[str, Any]:
        line = self.file.readline()
        if not line:
            raise SystemExit("the owner closed the controller's connection")
        frame: dict[str, Any] = json.loads(line)
        return frame

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def measure(n: int) -> tuple[list[float], list[float]]:
    from tether import paths, sessions

    with tempfile.TemporaryDirectory(prefix="tether-bench-q-") as tmp:
        home, cwd = Path(tmp) / "home", Path(tmp) / "project"
        home.mkdir()
        cwd.mkdir()
        (cwd / ".tether.toml").write_text("journalFrames = true\n")
        tether(home, cwd, "sessions", "new")
        status = json.loads(tether(home, cwd, "--format", "json", "status").stdout)
        token = paths.use_home(str(home))
        try:
            socket_path = str(sessions.socket_path(status["sessionKey"]))
        finally:
            paths.reset_home(token)
        ctl = Controller(socket_path)
        prompt = subprocess.Popen(
            [
                TETHER,
                "--cwd",
                str(cwd),
                "--agent",
                f"{sys.executable} {Path(__file__).resolve()} --agent",
                "prompt",
                str(n),
            ],
            env=env_for(home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        ask: list[float] = []
        answer: list[float] = []
        sent_at: dict[int, float] = {}
        try:
            while len(answer) < n:
                frame = ctl.frame()
                now = time.monotonic()
                kind = frame.get("type")
                if kind == "interaction":
                    q = frame["interaction"]
                    ask.append(now - q["toolCall"]["rawInput"]["sentAt"])
                    i = int(q["toolCall"]["toolCallId"][1:])
                    sent_at[i] = time.monotonic()
                    ctl.send(
                        {
                            "v": 2,
                            "requestId": f"a{i}",
                            "kind": "answer",
                            "payload": {"interactionId": q["id"], "answer": "allow"},
                        }
                    )
                elif kind == "entry":
                    acp = frame["entry"].get("frame") or {}
                    if acp.get("method") == "_bench/answered":
                        params = acp["params"]
                        answer.append(params["at"] - sent_at[params["i"]])
        finally:
            prompt.wait(timeout=120)
            ctl.close()
            tether(home, cwd, "sessions", "close")
    return ask, answer


def leftovers() -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"{MARK}={RUN_ID}".encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def report(name: str, samples: list[float]) -> None:
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[int(len(ms) * 0.95) - 1]
    print(
        f"{name:<8} n={len(ms)}  median {statistics.median(ms):.3f} ms"
        f"  p95 {p95:.3f} ms  max {ms[-1]:.3f} ms  (target <= 5 ms)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=500, help="questions to ask")
    args = parser.parse_args()
    if args.agent:
        return run_agent()
    ask, answer = measure(args.n)
    report("ask", ask)
    report("answer", answer)
    deadline = time.monotonic() + 5.0  # the owner exits just after answering `close`
    while (left := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"leftover processes: {len(left)} {left if left else ''}".rstrip())
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
