"""A fleet host's drain, carried out: the shell around :mod:`tether.fleet.drain_state`.

``tether serve --fleet-index`` drains on SIGTERM and on ``tether serve --drain``
(:mod:`tether.fleet.drain_command`). :class:`HostDrainer` runs the machine in a thread
of its own, one step at a time:

1. **DRAINING.** The index is told the host drains (routers place new sessions
   elsewhere at once; a new row on a draining host is refused by the index itself), and
   the gateway answers new sessions and new prompts ``503 HOST_DRAINING``, retryable
   (the gateway's :class:`tether.serve.drain_gate.DrainGate`). Requests admitted before
   the gate closed reach their owners first; then the owners are asked (IPC ``status``)
   until no turn runs or waits, or until the grace has passed.
2. **RETIRING.** Every owner of this home is sent SIGTERM through a pidfd, only when
   its identity (pid, start time, boot id, generation, as it recorded them) is proven --
   :func:`tether.owner_fence.signal_owner`; an owner that cannot be proven is left alone
   and counted. An owner's SIGTERM is its ordinary retirement: it cancels a turn still
   running (the grace passed), ends its agent's tree by its own proof, stores its
   journal and leaves its session open -- resumable by the next prompt.
3. **LEAVING.** The last committed entries are shipped (so the index's durable seq
   covers everything the owners journaled) and the host deregisters.
4. **DRAINED.** One log line says what was done; the server exits 0.

The probes (``/livez``, ``/readyz``) are answered by that gate too, without the fleet
credential: they carry no session data, and a kubelet's ``httpGet`` cannot send a
header from a Secret.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from tether.errors import FleetError, TetherError
from tether.fleet.drain_state import DrainInput, DrainMachine, readiness

if TYPE_CHECKING:
    from tether.fleet.host import FleetHost

__all__ = ["POLL_S", "RETIRE_WAIT_S", "HostDrainer"]

POLL_S = 0.1  # how often a draining host asks its owners whether a turn still runs
RETIRE_WAIT_S = 30.0  # an owner's SIGTERM: cancel settle, the tree's stop, last frames
STATUS_HELLO_S = 1.0


class HostDrainer:
    """One host's drain (see the module docstring).

    Args:
        host: the fleet host (membership, shipping).
        grace_s: how long admitted turns may run on.
        on_drained: called once, from the drain's thread, when the host may exit.
        log: where the one line goes.
    """

    def __init__(
        self,
        host: FleetHost,
        grace_s: float,
        *,
        on_drained: Callable[[], None] = lambda: None,
        log: Callable[[str], None] = lambda _m: None,
    ) -> None:
        self.host = host
        self.machine = DrainMachine(grace_s)
        self._on_drained = on_drained
        self._log = log
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.inflight = 0  # admitting requests past the gate, not yet answered
        self.left = False
        self.server: Any = None  # the uvicorn server to stop once drained (set by serve)
        self.summary: dict[str, Any] = {}

    # --- the front door ------------------------------------------------------------

    def request(self) -> bool:
        """Begin the drain (from any thread); False if it had begun already."""
        with self._lock:
            if not self.machine.request(time.monotonic()):
                return False
            self._thread = threading.Thread(target=self._run, name="fleet-drain", daemon=True)
            self._thread.start()
            return True

    def readiness(self) -> dict[str, Any]:
        status = self.host.membership.status()
        verdict = readiness(
            registered=status.epoch > 0 and not self.left,
            index_reached=status.epoch > 0,
            superseded=status.superseded,
            draining=not self.machine.admits,
        )
        return {
            "ready": verdict.ready,
            "why": verdict.why,
            "hostId": self.host.host_id,
            "state": self.machine.state.value,
            "indexUp": status.index_up,
        }

    # --- the drain -----------------------------------------------------------------

    def _feed(self, event: DrainInput) -> None:
        with self._lock:
            self.machine.feed(event, time.monotonic())

    def _run(self) -> None:
        try:
            self._drain()
        except Exception as e:
            # The thread's boundary: a broken home or a bug must not leave the host
            # serving forever after its SIGTERM. Say it, leave, and let the server exit.
            self._log(f"host {self.host.host_id}: the drain failed ({type(e).__name__}: {e})")
            if not self.left:
                self.left = True
                with contextlib.suppress(Exception):
                    self.host.leave("drain failed")
        finally:
            self._on_drained()

    def _drain(self) -> None:
        started = time.monotonic()
        try:
            self.host.membership.drain(True)
        except FleetError as e:
            # Routers still see it: the host deregisters at the end, and meanwhile its
            # gateway refuses what is new.
            self._log(f"host {self.host.host_id}: could not mark itself draining: {e}")
        cut = self._wait_for_turns()
        ended, unproven = _retire_owners(_live_owner_keys())
        self._feed(DrainInput.OWNERS_ENDED)
        self.host.leave("drained")
        self.left = True
        self._feed(DrainInput.LEFT)
        open_left = _open_session_count()
        self.summary = {
            "hostId": self.host.host_id,
            "sessionsLeftOpen": open_left,
            "ownersEnded": ended,
            "ownersUnproven": unproven,
            "turnsCut": cut,
            "graceS": self.machine.grace_s,
            "seconds": round(time.monotonic() - started, 3),
        }
        self._log(
            f"host {self.host.host_id} drained in {self.summary['seconds']} s:"
            f" {open_left} session(s) left open for resume, {ended} owner(s) ended with"
            f" proof, {cut} turn(s) cut at the {self.machine.grace_s:g} s grace"
            + (f", {unproven} owner(s) not proven gone" if unproven else "")
            + "; deregistered"
        )

    def _wait_for_turns(self) -> int:
        """Wait (bounded by the grace) until no turn runs or waits; the turns cut."""
        deadline = self.machine.deadline or time.monotonic()
        while self.inflight > 0 and time.monotonic() < deadline:
            time.sleep(POLL_S / 4)  # admitted requests reach their owners first
        # Nothing new is admitted: an owner found idle stays idle, so after the first
        # pass only the busy ones are asked again.
        busy = _busy_owners(_live_owner_keys())
        while True:
            step = self.machine.waiting(time.monotonic(), busy=len(busy))
            if step is not None:
                self._feed(step)
                return len(busy) if step is DrainInput.GRACE_OVER else 0
            time.sleep(POLL_S)
            busy = _busy_owners(busy)


def _live_owner_keys() -> list[str]:
    """The open sessions of this home whose owner the registry says runs."""
    from tether.state.registry import Registry

    with Registry() as registry:
        return [s.key for s in registry.sessions(include_closed=False) if s.owner_pid is not None]


def _open_session_count() -> int:
    from tether.state.registry import Registry

    with Registry() as registry:
        return len(registry.sessions(include_closed=False))


def _busy_owners(keys: list[str]) -> list[str]:
    """The owners of ``keys`` that run a turn or hold queued requests (asked over IPC)."""
    from tether import sessions
    from tether.ipc.client import OwnerConnection

    busy = []
    for key in keys:
        try:
            with OwnerConnection.connect(sessions.socket_path(key), timeout=STATUS_HELLO_S) as conn:
                snap = conn.request("status", {})
        except TetherError:
            continue  # gone meanwhile, or hung: the retirement decides
        if snap.get("status") == "running" or (snap.get("queueDepth") or 0) > 0:
            busy.append(key)
    return busy


def _retire_owners(keys: list[str]) -> tuple[int, int]:
    """SIGTERM every owner whose identity is proven, and wait for each to be gone;
    ``(ended, unproven)``."""
    if not keys:
        return 0, 0
    with ThreadPoolExecutor(max_workers=min(16, len(keys)), thread_name_prefix="retire") as pool:
        verdicts = list(pool.map(_retire_one, keys))
    return verdicts.count("ended"), sum(v in ("unproven", "stuck") for v in verdicts)


def _retire_one(key: str) -> str:
    """``ended`` (proven, signalled, gone), ``none`` (no owner ran after all),
    ``unproven`` (never signalled) or ``stuck`` (signalled, not gone in time)."""
    import signal

    from tether.owner_fence import signal_owner, wait_exit
    from tether.state.registry import Registry

    with Registry() as registry:
        session = registry.session(key)
        ident = registry.owner_identity(key)
    if session is None or session.owner_pid is None:
        return "none"
    if (
        ident is None
        or ident["pid"] != session.owner_pid
        or ident["generation"] != session.owner_generation
    ):
        return "unproven"
    try:
        fd = signal_owner(ident["pid"], ident["starttime"], ident["boot_id"], signal.SIGTERM)
    except OSError:
        return "none"  # it exited between the pin and the signal
    if fd is None:
        with Registry() as registry:
            after = registry.session(key)
        return "none" if after is None or after.owner_pid is None else "unproven"
    return "ended" if wait_exit(fd, RETIRE_WAIT_S) else "stuck"


# --- the gateway's side: probes, and the gate on new work ----------------------------
