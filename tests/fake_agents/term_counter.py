"""A fake agent whose every process counts the SIGTERMs it receives.

Run as ``python term_counter.py <log file>``. The root forks a child that stays in its
process group (``same``) and one that calls ``setsid()`` (``setsid``); each of the three
installs a SIGTERM handler that appends ``<pid>`` to the log file (one ``O_APPEND`` write
per signal) and carries on, so only SIGKILL ends them. Once all three have installed
their handler the root prints one JSON line ``{"root": pid, "same": pid, "setsid": pid}``
and idles. A test then counts each pid's lines: how many SIGTERMs that process got.

Standard library only; Linux only. The handlers are installed explicitly, so nothing
depends on the signal dispositions this process inherited.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def _count_terms(log: str) -> None:
    def on_term(_signum: int, _frame: object) -> None:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)

    signal.signal(signal.SIGTERM, on_term)


def _idle() -> None:
    for _ in range(6000):  # bounded: 10 minutes at most
        time.sleep(0.1)
    os._exit(0)


def main() -> None:
    log = sys.argv[1]
    _count_terms(log)
    r, w = os.pipe()
    pids: dict[str, int] = {"root": os.getpid()}
    for kind in ("same", "setsid"):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            if kind == "setsid":
                os.setsid()
            _count_terms(log)  # (inherited already; installed again to be explicit)
            os.write(w, f"{kind} {os.getpid()}\n".encode())
            os.close(w)
            _idle()
        pids[kind] = pid
    os.close(w)
    got = b""
    while got.count(b"\n") < 2:
        chunk = os.read(r, 256)
        if not chunk:
            break
        got += chunk
    os.close(r)
    sys.stdout.write(json.dumps(pids) + "\n")
    sys.stdout.flush()
    _idle()


if __name__ == "__main__":
    main()
