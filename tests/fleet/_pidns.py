"""Fleet hosts in pid namespaces of their own, where the machine allows it.

Each host runs as ``unshare --pid --fork --mount-proc --kill-child=SIGKILL tether serve
…``: the host process is pid 1 of a new pid namespace with its own ``/proc``, and every
owner, keeper and agent it starts lives in that namespace. A host then cannot even name
another host's processes, let alone signal them -- the strongest form of "no host ever
signals a process of another host" one machine can give. The network stays loopback
(all hosts share it on distinct ports): giving each host its own network namespace would
need an address outside the namespaces to reach it from the test, which the project's
rules keep to loopback.

What changes when a host dies: the kernel ends every process of a pid namespace when its
pid 1 dies, so a SIGKILLed host takes its owners, keepers and agents with it -- what a
lost machine or a killed pod does. A host that comes back on its storage finds leases
whose pids belong to a namespace that no longer exists; its proof (pid, start time,
boot) refuses to signal whatever has that pid now.

:class:`NamespacedHost` stands where a ``subprocess.Popen`` of the host would: ``pid`` is
the host process as this (the test's) namespace sees it, and signals go to it through
a pidfd opened while it was provably our grandchild.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from functools import cache
from typing import IO

from tests import _proctree

STARTUP_TIMEOUT_S = 30.0


@cache
def available() -> str | None:
    """``None`` when hosts can run in pid namespaces of their own here, else why not."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "no unshare(1) on this machine"
    try:
        r = subprocess.run(
            [unshare, "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL", "true"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare failed: {e}"
    if r.returncode != 0:
        return f"unshare --pid --mount-proc refused: {r.stderr.strip() or r.returncode}"
    return None


def wrap(argv: list[str]) -> list[str]:
    unshare = shutil.which("unshare")
    assert unshare is not None
    return [unshare, "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL", *argv]


class NamespacedHost:
    """The host process inside its namespace, seen and signalled from outside it."""

    def __init__(self, outer: subprocess.Popen[str]) -> None:
        self.outer = outer  # unshare: waits for the host and exits with its status
        self.killed = False  # SIGKILLed by us (it may not have finished dying)
        self.stdout: IO[str] | None = outer.stdout
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        children: list[int] = []
        while not children:
            children = _proctree._children(outer.pid)
            if outer.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"unshare {outer.pid} started no host")
            time.sleep(0.005)
        (self.pid,) = children
        self.pidfd = os.pidfd_open(self.pid)
        # Proven ours: opened while it was unshare's only child, and unshare is our child.
        if _proctree._children(outer.pid) != [self.pid]:
            os.close(self.pidfd)
            raise AssertionError("the host changed before it could be pinned")

    @property
    def namespace(self) -> int:
        """The pid namespace's inode (what ``/proc/PID/ns/pid`` names)."""
        return os.stat(f"/proc/{self.pid}/ns/pid").st_ino

    def outside(self, inner: int) -> int | None:
        """The pid, as seen from here, of this namespace's process ``inner`` (a pid the
        host reports, e.g. an owner's), or None when it no longer runs."""
        ns = self.namespace
        for pid in _proctree.live_descendants():
            try:
                if os.stat(f"/proc/{pid}/ns/pid").st_ino != ns:
                    continue
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("NSpid:") and int(line.split()[-1]) == inner:
                            return pid
            except (OSError, ValueError):
                continue
        return None

    def send_signal(self, sig: int) -> None:
        if self.outer.poll() is None:
            try:
                signal.pidfd_send_signal(self.pidfd, sig)
            except ProcessLookupError:
                pass  # gone meanwhile

    def kill(self) -> None:
        # Dying takes a while: the namespace's pid 1 ends only once every process in it
        # has, while its sockets close at once. Someone who saw it stop answering must
        # not take "unshare has not exited yet" for "it was never killed".
        self.killed = True
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def poll(self) -> int | None:
        return self.outer.poll()

    def wait(self, timeout: float | None = None) -> int:
        code = self.outer.wait(timeout)
        self._close()
        return code

    def _close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
