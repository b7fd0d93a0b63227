"""Run from an agent's terminal: wait for the session's open question, answer it ``allow``.

``self_answer.py OUT [TETHER_ARGS...]``: polls ``tether ... status`` (at most 20 s) for
an open interaction, then runs ``tether ... answer ID allow`` and writes its exit code
and output to OUT (``none`` when no question came). Standard library only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time


def tether(args: list[str], *more: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tether", "--format", "json", *args, *more]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def main() -> int:
    out, args = sys.argv[1], sys.argv[2:]
    print("polling", flush=True)  # the mock's `terminal --keep` returns at the first output
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        r = tether(args, "status")
        lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
        status = json.loads(lines[-1]) if lines else {}
        open_ids = [q["id"] for q in status.get("interactions") or () if q.get("id")]
        if open_ids:
            a = tether(args, "answer", open_ids[0], "allow")
            with open(out, "w") as f:
                f.write(f"{a.returncode}\n{a.stdout}{a.stderr}")
            return 0
        time.sleep(0.05)
    with open(out, "w") as f:
        f.write("none\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
