"""The owner's shape, enforced (issue 22): ``Owner`` is composed of collaborators, each the
one owner of its fields; and what those collaborators do, without processes."""

from __future__ import annotations

import ast
import asyncio
import time
from pathlib import Path

import pytest
from tests.unit.test_supervise_shape import composition, foreign_writes

import tether.owner
from tether import _aio
from tether.errors import OwnerShuttingDown
from tether.ipc import protocol
from tether.owner import job_wait
from tether.owner.job import Job, Outbox
from tether.owner.job_wait import JobWait
from tether.owner.journaling import Journaling
from tether.owner.lifecycle import OwnerInput, OwnerLifecycle, StopReason
from tether.owner.retirement import Retirement

OWNER = Path(tether.owner.__file__).parent
# The Owner's collaborators split out of compose.py: each assigns only its own fields.
PARTS = ("journaling", "retirement", "job_wait", "dispatch")
# The one write to another object's field: the writer it has just made is told whom to
# call when its storage condition changes (a full disk, and after).
FOREIGN_WRITES_ALLOWED = {("journaling", "writer.on_condition")}


def _tree(module: str) -> ast.Module:
    path = OWNER / f"{module}.py"
    return ast.parse(path.read_text(), str(path))


def test_owner_collaborators_write_only_their_own_fields() -> None:
    """The journal, the retirement timer, the FIFO's wait and the dispatch write no field
    of another object: one owner per field."""
    found = [
        (module, write)
        for module in PARTS
        for write in foreign_writes(_tree(module))
        if (module, write) not in FOREIGN_WRITES_ALLOWED
    ]
    assert found == []


def test_owner_is_composed_of_its_parts() -> None:
    """Owner has no base class and holds each collaborator as a field."""
    bases, built = composition(_tree("compose"), "Owner")
    assert bases == []
    assert {"Journaling", "Retirement", "JobWait", "Admission", "AgentSlot"} <= built


def _idle(idle_ttl: float, *, idle_for: float = 0.0) -> OwnerLifecycle:
    lifecycle = OwnerLifecycle(now=time.monotonic() - idle_for, idle_ttl=idle_ttl)
    lifecycle.feed(OwnerInput.STARTED, time.monotonic() - idle_for)
    return lifecycle


def test_retirement_retires_an_idle_owner_past_its_ttl_unless_held() -> None:
    """Past the idle TTL an owner nobody holds retires (IDLE_TTL); a held one does not,
    and a connection closing while another holds it asks nothing."""
    retired: list[StopReason] = []
    held = [True]
    lifecycle = _idle(10.0, idle_for=20.0)
    retirement = Retirement(
        lifecycle, busy=lambda: False, held=lambda: held[0], retire=retired.append
    )
    retirement.check()
    retirement.connection_closed()
    assert retired == []
    held[0] = False
    retirement.connection_closed()
    assert retired == [StopReason.IDLE_TTL]


def test_retirement_timer_fires_the_check_and_cancel_disarms_it() -> None:
    """The scheduled check runs when the TTL is due; a cancelled timer never runs."""

    async def scenario() -> list[StopReason]:
        retired: list[StopReason] = []
        fired = asyncio.Event()

        def retire(reason: StopReason) -> None:
            retired.append(reason)
            fired.set()

        quiet = Retirement(_idle(0.01), busy=lambda: False, held=lambda: False, retire=retire)
        quiet.schedule()
        quiet.cancel()
        due = Retirement(_idle(0.01), busy=lambda: False, held=lambda: False, retire=retire)
        due.schedule()
        async with asyncio.timeout(10):
            await fired.wait()
        await asyncio.sleep(0.05)  # the cancelled one had its chance too
        return retired

    assert asyncio.run(scenario()) == [StopReason.IDLE_TTL]


def test_job_wait_returns_the_jobs_outcome() -> None:
    """Without a shutdown the wait is the job's: its result, or its exception."""

    async def ok() -> None:
        await asyncio.sleep(0)

    async def fails() -> None:
        raise ValueError("boom")

    async def scenario() -> None:
        wait = JobWait(_idle(0.0))
        await wait.wait(_aio.spawn(ok()))
        with pytest.raises(ValueError, match="boom"):
            await wait.wait(_aio.spawn(fails()))

    asyncio.run(scenario())


def test_job_wait_abandons_a_job_that_outlives_the_settle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once shutdown is requested a hung job gets CANCEL_SETTLE_S, is then cancelled, and
    the wait raises OwnerShuttingDown naming the stop reason; a job that ends within the
    settle ends normally."""
    monkeypatch.setattr(job_wait, "CANCEL_SETTLE_S", 0.01)

    async def quick() -> None:
        await asyncio.sleep(0)

    async def hang() -> None:
        await asyncio.Event().wait()

    async def scenario() -> asyncio.Task[None]:
        lifecycle = _idle(0.0)
        wait = JobWait(lifecycle)
        hung = _aio.spawn(hang())

        def stop() -> None:
            lifecycle.request_stop(StopReason.CLOSE, time.monotonic())
            wait.stop()

        asyncio.get_running_loop().call_soon(stop)
        async with asyncio.timeout(10):
            with pytest.raises(OwnerShuttingDown, match="shutting down"):
                await wait.wait(hung)
            await wait.wait(_aio.spawn(quick()))  # stopping already: it still ends
        return hung

    assert asyncio.run(scenario()).cancelled()


def test_journaling_before_it_is_open() -> None:
    """Before the journal is open a record is dropped (seq 0), closing is a no-op and a
    watch is told the owner is shutting down."""

    async def scenario() -> Job:
        journaling = Journaling("/nonexistent/state.db", "k")
        assert journaling.record("x", {}) == 0
        journaling.shrink()
        assert journaling.watching() == set()
        await journaling.close(session_ended=True, stop_reason="close")
        job = Job(protocol.Envelope("r1", "watch", {}), Outbox(None), admitted_at=0.0)
        # Not open: the watch ends before it would offer questions (none to offer).
        await journaling.watch(job, questions=None)  # type: ignore[arg-type]
        return job

    assert asyncio.run(scenario()).done
