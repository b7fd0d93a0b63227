"""The owner's admission queue: FIFO, depth limit, deadlines with `now` passed in, cancel."""

from __future__ import annotations

from dataclasses import dataclass

from tether.owner.queue import AdmissionQueue, Admitted, Overloaded


@dataclass(eq=False)
class Req:
    request_id: str


def state(q: AdmissionQueue[Req]) -> tuple[list[str], float | None]:
    return q.request_ids(), q.next_deadline()


def test_walkthrough_admit_pop_expire_cancel() -> None:
    """Admission, order, expiry and cancel, with the whole queue checked after each step."""
    q: AdmissionQueue[Req] = AdmissionQueue(max_depth=3)
    a, b, c, d = Req("a"), Req("b"), Req("c"), Req("d")
    assert state(q) == ([], None)
    first = q.admit(a, deadline=None)
    assert isinstance(first, Admitted)
    assert first.position == 1
    assert state(q) == (["a"], None)
    second = q.admit(b, deadline=5.0)
    assert isinstance(second, Admitted)
    assert second.position == 2
    assert state(q) == (["a", "b"], 5.0)
    assert isinstance(q.admit(c, deadline=3.0), Admitted)
    assert state(q) == (["a", "b", "c"], 3.0)
    full = q.admit(d, deadline=None)
    assert isinstance(full, Overloaded)
    assert full.depth == 3
    assert state(q) == (["a", "b", "c"], 3.0)
    assert q.expire(2.9) == []
    assert q.expire(3.0) == [c]
    assert state(q) == (["a", "b"], 5.0)
    assert q.cancel("zz") is None
    assert q.cancel("a") is a
    assert state(q) == (["b"], 5.0)
    popped = q.pop(4.0)
    assert popped.item is b
    assert popped.expired == []
    assert state(q) == ([], None)


def test_pop_skips_and_returns_expired_items() -> None:
    """Items whose deadline passed while waiting are handed back to be answered, never run."""
    q: AdmissionQueue[Req] = AdmissionQueue(max_depth=4)
    a, b, c = Req("a"), Req("b"), Req("c")
    q.admit(a, deadline=1.0)
    q.admit(b, deadline=2.0)
    q.admit(c, deadline=None)
    popped = q.pop(2.0)
    assert popped.item is c
    assert popped.expired == [a, b]
    assert state(q) == ([], None)
    empty = q.pop(3.0)
    assert empty.item is None
    assert empty.expired == []


def test_remove_and_drain() -> None:
    """A waiting item can be removed by identity; drain empties the queue in order."""
    q: AdmissionQueue[Req] = AdmissionQueue(max_depth=4)
    a, b, c = Req("a"), Req("b"), Req("c")
    for r in (a, b, c):
        q.admit(r, deadline=None)
    assert q.remove(b) is True
    assert q.remove(b) is False
    assert q.drain() == [a, c]
    assert state(q) == ([], None)
    assert len(q) == 0
