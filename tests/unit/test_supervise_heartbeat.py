"""The lease heartbeat: a thread renews a supervisor's leases, whatever its loop is doing."""

from __future__ import annotations

import asyncio
import threading
import time

from tether.state.registry import Registry
from tether.supervise.lease_renewal import SUPERVISOR_ID, LeaseHeartbeat


class FakeRenewer:
    """Records renewals; leases in ``stolen`` are refused, as a CAS on the holder would."""

    def __init__(self) -> None:
        self.renewed: list[list[str]] = []
        self.stolen: set[str] = set()
        self.beat = threading.Event()
        self.closed = False

    def renew_leases(
        self, lease_ids: list[str], *, owner: str, now: float, ttl: float
    ) -> list[str]:
        assert owner == SUPERVISOR_ID
        self.renewed.append(list(lease_ids))
        self.beat.set()
        return [lid for lid in lease_ids if lid in self.stolen]

    def close(self) -> None:
        self.closed = True


def _wait(event: threading.Event) -> None:
    assert event.wait(30), "no heartbeat"
    event.clear()


def test_renews_on_its_own_thread_while_the_loop_is_blocked() -> None:
    """A loop stuck in blocking work does not stop renewals (issue 9: heartbeats from a
    timer that no blocking work can starve)."""
    fake = FakeRenewer()
    beat = LeaseHeartbeat(lambda: fake, interval=0.01, ttl=1.0)

    async def blocked_loop() -> int:
        beat.add("L1")
        _wait(fake.beat)
        before = len(fake.renewed)
        # Block the event loop (the owner's reconcile used to do this) until the
        # heartbeat has renewed twice more: it can only do so from another thread.
        while len(fake.renewed) < before + 2:
            time.sleep(0.01)  # noqa: ASYNC251 -- the point: the loop is blocked
        return len(fake.renewed)

    assert asyncio.run(blocked_loop()) >= 3
    beat.remove("L1")


def test_a_stolen_lease_is_reported_lost_and_no_longer_renewed() -> None:
    """A renewal refused (the lease was stolen) marks it lost; later beats skip it."""
    fake = FakeRenewer()
    beat = LeaseHeartbeat(lambda: fake, interval=0.01, ttl=1.0)
    beat.add("L1")
    beat.add("L2")
    _wait(fake.beat)
    fake.stolen.add("L1")
    while not beat.lost("L1"):
        _wait(fake.beat)
    mark = len(fake.renewed)
    _wait(fake.beat)
    _wait(fake.beat)
    assert all(batch == ["L2"] for batch in fake.renewed[mark + 1 :])
    assert not beat.lost("L2")
    beat.remove("L1")
    beat.remove("L2")


def test_the_thread_ends_with_its_last_lease() -> None:
    """Removing the last lease lets the thread close its connection and end."""
    fake = FakeRenewer()
    beat = LeaseHeartbeat(lambda: fake, interval=0.01, ttl=1.0)
    beat.add("L1")
    _wait(fake.beat)
    thread = beat._thread
    assert thread is not None
    beat.remove("L1")
    thread.join(30)
    assert not thread.is_alive()
    assert fake.closed


def test_registry_renewal_is_a_cas_on_the_holder() -> None:
    """renew_leases() pushes the expiry of our open leases only, and names the others."""
    with Registry() as reg:
        common = {"boot_id": "b", "command_hash": "h", "cwd": "/"}
        reg.create_lease(lease_id="ours", owner_instance_id="S1", lease_expires_at=1.0, **common)
        reg.create_lease(lease_id="theirs", owner_instance_id="S2", lease_expires_at=1.0, **common)
        lost = reg.renew_leases(["ours", "theirs", "missing"], owner="S1", now=100.0, ttl=30.0)
        assert lost == ["theirs", "missing"]
        ours, theirs = reg.lease("ours"), reg.lease("theirs")
        assert ours is not None
        assert theirs is not None
        assert (ours.lease_expires_at, ours.heartbeat_at) == (130.0, 100.0)
        assert theirs.lease_expires_at == 1.0
