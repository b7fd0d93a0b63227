"""``tether serve --drain``: drain the fleet host that serves this ``TETHER_HOME``.

A fleet host records itself in its home while it serves (``run/fleet-host.json``: its
pid, start time, boot id, host id, URL and grace). ``--drain`` reads that record, proves
the process is still the one recorded (boot id and start time, checked again once a
pidfd pins it -- :func:`tether.owner_fence.signal_owner`), sends it SIGTERM through the
pidfd -- the very drain Kubernetes starts -- and waits for it to exit, bounded by its
grace plus the time its owners take to retire. A record whose process cannot be proven
is never signalled.

Why a signal and not a request to the host's HTTP API: the operator's right to drain
is the right to the home (the same user, ``kubectl exec`` into the pod), no credential
is needed, and there is one drain path whatever started it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from typing import Any

from tether import _os, paths
from tether.errors import StopTimeout, TetherError, UsageError
from tether.fleet.drain import RETIRE_WAIT_S

__all__ = ["RECORD", "forget_host_record", "record_host", "run_drain"]

RECORD = "fleet-host.json"
EXIT_MARGIN_S = 30.0  # beyond grace + retirement: the last ship, deregistration, exit


def _record_path() -> str:
    return os.path.join(paths.run_dir(), RECORD)


def record_host(host_id: str, url: str, grace_s: float) -> dict[str, Any]:
    """Record this process as the home's serving fleet host (0600, written atomically)."""
    table = _os.current()
    st = table.stat(os.getpid())
    record = {
        "pid": os.getpid(),
        "starttime": st.starttime if st is not None else None,
        "bootId": table.boot_id(),
        "hostId": host_id,
        "url": url,
        "graceS": grace_s,
    }
    path = _record_path()
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(tmp, path)
    return record


def forget_host_record() -> None:
    """Remove the record if it is still this process's."""
    path = _record_path()
    with contextlib.suppress(OSError, ValueError):
        with open(path, encoding="utf-8") as f:
            if json.load(f).get("pid") != os.getpid():
                return
        os.unlink(path)


def _read_record() -> dict[str, Any]:
    path = _record_path()
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        raise UsageError(
            f"no fleet host serves this TETHER_HOME ({paths.home()}): nothing to drain"
        ) from None
    except (OSError, ValueError) as e:
        raise TetherError(f"cannot read {path}: {e}") from None
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
        raise TetherError(f"{path} is not a fleet host's record")
    return record


def run_drain(ctx: Any) -> int:
    """Drain the home's fleet host and wait for it to exit; the exit code."""
    from tether.owner_fence import signal_owner, wait_exit

    record = _read_record()
    pid = int(record["pid"])
    starttime = record.get("starttime")
    fd = signal_owner(
        pid, starttime if isinstance(starttime, int) else None, str(record.get("bootId")),
        signal.SIGTERM,
    )  # fmt: skip
    if fd is None:
        raise UsageError(
            f"the fleet host recorded in this TETHER_HOME (pid {pid}) no longer runs:"
            " nothing to drain (nothing was signalled)"
        )
    grace = record.get("graceS")
    bound = (float(grace) if isinstance(grace, int | float) else 30.0) + RETIRE_WAIT_S
    bound += EXIT_MARGIN_S
    if not wait_exit(fd, bound):
        raise StopTimeout(
            f"host {record.get('hostId')} (pid {pid}) was told to drain but did not exit"
            f" within {bound:g} s",
            pid=pid,
        )
    ctx.output.control(
        {"action": "drained", "hostId": record.get("hostId"), "pid": pid, "exited": True},
        text=f"host {record.get('hostId')} (pid {pid}) drained and exited",
    )
    return 0
