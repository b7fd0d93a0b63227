"""Lease writes in the registry go through the lease table, as compare-and-sets."""

from __future__ import annotations

import pytest

from tether.errors import InvalidTransition
from tether.state.registry import Registry
from tether.supervise.lease_state import LeaseInput, LeaseState

S = LeaseState


def _lease(reg: Registry, lease_id: str = "L1", **fields: object) -> None:
    reg.create_lease(lease_id=lease_id, boot_id="b", command_hash="h", cwd="/", **fields)


def test_no_raw_state_writes() -> None:
    """Neither create nor update may set a state: only advance_lease() moves it."""
    with Registry() as reg:
        with pytest.raises(ValueError, match="advance_lease"):
            _lease(reg, state="closed")
        _lease(reg)
        with pytest.raises(ValueError, match="advance_lease"):
            reg.update_lease("L1", state="closed")
        row = reg.lease("L1")
        assert row is not None
        assert row.state == "open"


def test_an_illegal_step_raises_and_writes_nothing() -> None:
    """open -> closed is not in the table: the write raises and the row is unchanged."""
    with Registry() as reg:
        _lease(reg)
        with pytest.raises(InvalidTransition):
            reg.advance_lease("L1", LeaseInput.EXTINCTION_PROVEN, expect=S.OPEN, note="x")
        row = reg.lease("L1")
        assert row is not None
        assert (row.state, row.note) == ("open", None)


def test_advance_is_a_cas_on_state_and_holder() -> None:
    """A stale expectation or another holder makes the write a no-op that returns None."""
    with Registry() as reg:
        _lease(reg, owner_instance_id="S1")
        assert reg.advance_lease("L1", LeaseInput.CLOSE_STARTED, expect=S.OPEN, owner="S2") is None
        assert reg.advance_lease("L1", LeaseInput.CLOSE_STARTED, expect=S.CLOSING) is None
        assert (
            reg.advance_lease("L1", LeaseInput.CLOSE_STARTED, expect=S.OPEN, owner="S1")
            is S.CLOSING
        )
        record = ("sess", "session_ended", {"reason": "x"})
        new = reg.advance_lease(
            "L1", LeaseInput.EXTINCTION_PROVEN, expect=S.CLOSING, owner="S1", record=record
        )
        assert new is S.CLOSED
        # The loser of a race writes no event either.
        assert (
            reg.advance_lease("L1", LeaseInput.EXTINCTION_PROVEN, expect=S.CLOSING, record=record)
            is None
        )
        assert len(reg.events("sess", kind="session_ended")) == 1


def test_steal_needs_expiry_or_a_dead_holder_and_wins_once() -> None:
    """steal_lease(): refused while the lease is current and its holder lives; once
    expired, the first steal wins and a second (same expectations) loses."""
    with Registry() as reg:
        _lease(reg, owner_instance_id="S1", lease_expires_at=100.0)
        args = {"expect": S.OPEN, "holder": "S1", "new_owner": "S9", "ttl": 30.0}
        assert not reg.steal_lease("L1", now=99.0, holder_dead=False, **args)  # type: ignore[arg-type]
        assert reg.steal_lease("L1", now=100.0, holder_dead=False, **args)  # type: ignore[arg-type]
        assert not reg.steal_lease("L1", now=101.0, holder_dead=True, **args)  # type: ignore[arg-type]
        row = reg.lease("L1")
        assert row is not None
        assert (row.state, row.owner_instance_id, row.stolen_from) == ("closing", "S9", "S1")
        assert row.lease_expires_at == 130.0
        # A dead holder's lease can be stolen before its expiry.
        _lease(reg, "L2", owner_instance_id="S1", lease_expires_at=1e12)
        assert reg.steal_lease("L2", now=5.0, holder_dead=True, **args)  # type: ignore[arg-type]
