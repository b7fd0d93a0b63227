"""A fake agent that builds an escape tree, reports it, then idles, ticks or exits.

Members (each forked by the root; ``--members`` picks which, default all):

``same``     a child that stays in the root's process group (``sleep``)
``setsid``   a child that calls ``setsid()`` (``sleep``)
``daemon``   a double-forked ``setsid`` daemon: its parent exits, it is reparented
``ignore``   a child that ignores SIGTERM (``SIG_IGN`` survives exec) (``sleep``)
``loop``     a TERM-ignoring ``bash`` loop that forks a fresh ``sleep`` every 0.1 s
``shell``    a ``bash -c`` wrapper with a child and a grandchild (``bash -> bash -> sleep``)

Every member reports ``<kind> <pid>`` over a pipe before it execs, so when the root
prints its ``{"ready": ...}`` line the whole tree exists. The line carries each
member's pid and starttime, so tests can watch exactly those processes.

After that the root: ``--then idle`` sleeps (silent), ``--then tick`` prints a line
every ``--interval`` seconds for ``--duration`` seconds and exits 0, ``--then exit``
exits 0 at once (leaving its members behind). ``--root-ignore-term`` makes the root
ignore SIGTERM too. Standard library only; Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

KINDS = ("same", "setsid", "daemon", "ignore", "loop", "shell")
LONG = "600"


def _starttime(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    return int(raw[raw.rindex(b")") + 2 :].split()[19])


def _spawn(kind: str, report_w: int) -> None:
    pid = os.fork()
    if pid:
        if kind == "daemon":
            os.waitpid(pid, 0)  # the intermediate exits at once; reap it
        return
    try:
        if kind == "same":
            os.write(report_w, f"same {os.getpid()}\n".encode())
            os.execvp("sleep", ["sleep", LONG])
        elif kind == "setsid":
            os.setsid()
            os.write(report_w, f"setsid {os.getpid()}\n".encode())
            os.execvp("sleep", ["sleep", LONG])
        elif kind == "daemon":
            os.setsid()
            if os.fork():
                os._exit(0)
            os.write(report_w, f"daemon {os.getpid()}\n".encode())
            os.execvp("sleep", ["sleep", LONG])
        elif kind == "ignore":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.write(report_w, f"ignore {os.getpid()}\n".encode())
            os.execvp("sleep", ["sleep", LONG])
        elif kind == "loop":
            os.write(report_w, f"loop {os.getpid()}\n".encode())
            os.execvp("bash", ["bash", "-c", "trap '' TERM; while :; do sleep 0.1; done"])
        elif kind == "shell":
            os.write(report_w, f"shell {os.getpid()}\n".encode())
            # bash -> bash (child) -> sleep (grandchild); `wait` keeps each shell alive.
            script = f"bash -c 'sleep {LONG} & wait' & wait"
            os.execvp("bash", ["bash", "-c", script])
    except BaseException:
        os._exit(127)
    os._exit(127)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", default=",".join(KINDS))
    ap.add_argument("--then", choices=("idle", "tick", "exit"), default="idle")
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--duration", type=float, default=1.5)
    ap.add_argument("--root-ignore-term", action="store_true")
    args = ap.parse_args()
    if args.root_ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kinds = [k for k in args.members.split(",") if k]
    report_r, report_w = os.pipe()
    for kind in kinds:
        _spawn(kind, report_w)
    os.close(report_w)
    members: dict[str, dict[str, int]] = {}
    buf = b""
    # Every member writes one line before it execs (the pipe is close-on-exec); count
    # lines rather than wait for EOF, so a member that fails early cannot hang us.
    while len(members) < len(kinds):
        chunk = os.read(report_r, 4096)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            kind, pid = line.decode().split()
            members[kind] = {"pid": int(pid), "starttime": _starttime(int(pid))}
    os.close(report_r)
    root = {"pid": os.getpid(), "starttime": _starttime(os.getpid())}
    sys.stdout.write(json.dumps({"ready": True, "root": root, "members": members}) + "\n")
    sys.stdout.flush()
    if args.then == "exit":
        return 0
    if args.then == "tick":
        end = time.monotonic() + args.duration
        n = 0
        while time.monotonic() < end:
            time.sleep(args.interval)
            n += 1
            sys.stdout.write(f"tick {n}\n")
            sys.stdout.flush()
        return 0
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
