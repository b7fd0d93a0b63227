"""A hostile member of an agent's tree: it escapes every boundary Tether draws.

``escaper.py OUT [--cgroup-root MOUNT] [--ask-first CWD | --wait-recorded] [--kill-owner]
[--then ARG...]``

Run from the agent's shell (the mock agent's ``run`` verb). It double-forks, calls
``setsid``, and ``execve``-s a daemon of itself with only ``PATH`` and ``TETHER_HOME`` in
its environment. The daemon waits until it has been re-parented to the run's keeper,
then, in order:

* ``--ask-first CWD``: runs ``tether --cwd CWD mock sessions list`` from inside the run
  (so Tether sees it there);
* ``--wait-recorded``: asks nothing, but waits (at most 30 s) until Tether has recorded
  it as a member (its mark under ``$TETHER_HOME/run/members``: the owner's scan);
* ``--cgroup-root MOUNT``: writes its pid into ``MOUNT/cgroup.procs`` (leaves the run's
  cgroup; allowed to root, denied to a regular user);
* writes ``PID STARTTIME KEEPER OWNER MOVED`` to OUT (MOVED: ``moved``, ``denied``, ``-``);
* ``--kill-owner``: SIGKILLs the keeper's parent (the session's owner) ...
* SIGKILLs its parent, the run's keeper;
* ``--then ARG...``: runs ``tether ARG...`` and appends ``rc=N`` and its output to OUT;
* then idles, ignoring SIGTERM, for at most 120 s.

The first process waits (at most 10 s) for OUT's first line, prints it and exits 0.
Standard library only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def _stat(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    return raw[raw.rindex(b")") + 2 :].split()


def _is_keeper(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"tether.supervise.keeper" in f.read()
    except OSError:
        return False


def _tether(args: list[str]) -> tuple[int, str]:
    r = subprocess.run(
        [sys.executable, "-m", "tether", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return r.returncode, r.stdout + r.stderr


def daemon(out: str, opts: dict[str, str], then: list[str]) -> int:
    deadline = time.monotonic() + 10.0
    while not _is_keeper(os.getppid()) and time.monotonic() < deadline:
        time.sleep(0.01)  # the intermediate is exiting: we go to the subreaper above it
    keeper = os.getppid()
    owner = int(_stat(keeper)[1])
    if "ask-first" in opts:
        _tether(["--cwd", opts["ask-first"], "mock", "sessions", "list"])
    if "wait-recorded" in opts:
        # Ask nothing: wait (at most 30 s) until the owner's scan has recorded us.
        me = f"{os.getpid()}.{int(_stat(os.getpid())[19])}"
        mark = os.path.join(os.environ.get("TETHER_HOME", ""), "run", "members", me)
        end = time.monotonic() + 30.0
        while not os.path.exists(mark) and time.monotonic() < end:
            time.sleep(0.05)
    moved = "-"
    if "cgroup-root" in opts:
        try:
            with open(os.path.join(opts["cgroup-root"], "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            moved = "moved"
        except OSError:
            moved = "denied"  # a regular user cannot leave its delegated subtree
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(out + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {int(_stat(os.getpid())[19])} {keeper} {owner} {moved}\n")
    os.rename(out + ".tmp", out)
    if "kill-owner" in opts:
        os.kill(owner, signal.SIGKILL)
    os.kill(keeper, signal.SIGKILL)
    if then:
        time.sleep(0.2)  # let the kernel re-parent us
        code, text = _tether(then)
        with open(out, "a") as f:
            f.write(f"rc={code}\n{text}")
    end = time.monotonic() + 120.0
    while time.monotonic() < end:
        time.sleep(0.5)
    return 0


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--daemon":
        args = args[1:]
    out, rest = args[0], args[1:]
    opts: dict[str, str] = {}
    then: list[str] = []
    while rest:
        flag = rest.pop(0)
        if flag == "--then":
            then, rest = rest, []
        elif flag in ("--cgroup-root", "--ask-first"):
            opts[flag[2:]] = rest.pop(0)
        else:
            opts[flag[2:]] = "1"
    if sys.argv[1] == "--daemon":
        return daemon(out, opts, then)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if "TETHER_HOME" in os.environ:
            env["TETHER_HOME"] = os.environ["TETHER_HOME"]
        os.execve(sys.executable, [sys.executable, __file__, "--daemon", *sys.argv[1:]], env)
    os.waitpid(pid, 0)
    deadline = time.monotonic() + 10.0
    while not os.path.exists(out) and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(out) as f:
        print(f.readline().strip(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
