"""Admission and the FIFO: the queue core carried out on the event loop.

:class:`Admission` owns the waiting requests (:class:`~tether.owner.queue.AdmissionQueue`,
no I/O) and the one running (``active``). It answers the callers the core's decisions
concern -- ``QUEUE_OVERLOADED`` when full, ``TIMEOUT`` when a deadline passes while
waiting, ``QUEUE_REQUEST_CANCELLED`` when a queued request is cancelled -- keeps one
timer for the earliest deadline, and hands the owner's loop the next request to run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from tether import _log, metrics
from tether.errors import (
    PromptTimeout,
    QueueOverloaded,
    RequestCancelled,
    TetherError,
)
from tether.owner.agent_slot import AgentSlot
from tether.owner.job import Job, Outbox
from tether.owner.queue import AdmissionQueue, Overloaded

__all__ = ["Admission", "rearm"]


def _timed_out() -> PromptTimeout:
    return PromptTimeout("the request's deadline passed while it was queued")


class Admission:
    """The waiting requests and the running one. See the module docstring."""

    def __init__(self, key: str, max_depth: int, slot: AgentSlot) -> None:
        self.key = key
        self.queue: AdmissionQueue[Job] = AdmissionQueue(max_depth)
        self.active: Job | None = None
        self._slot = slot
        self._wakeup = asyncio.Event()
        self._expiry_timer: asyncio.TimerHandle | None = None
        # `cancel` requests that wait for the running turn's end (payload wait: true),
        # with what they will be answered: told then whether the agent honoured it.
        self._cancel_waiters: list[tuple[Job, dict[str, Any]]] = []
        self.on_change: Callable[[], None] = lambda: None  # the queue changed outside the loop
        # Journal a record: (kind, payload, request id). The owner wires its journal in.
        self.record: Callable[[str, dict[str, Any], str | None], object] = lambda *_: None

    def __len__(self) -> int:
        return len(self.queue)

    def enqueue(self, job: Job) -> None:
        """Queue ``job`` (ack with its position) or refuse it (``QUEUE_OVERLOADED``)."""
        decision = self.queue.admit(job, deadline=job.deadline)
        if isinstance(decision, Overloaded):
            job.finish(
                error=QueueOverloaded(
                    f"the session queue is full ({self.queue.max_depth} waiting); retry later"
                )
            )
            return
        seq = 0
        if job.kind == "prompt":
            # Journaled first, so that the ack names the turn's first entry: a stream
            # cursor that needs no lookup (both frames leave at the end of this pass).
            recorded = self.record(
                "prompt_queued", queued_record(job, decision.position), job.request_id
            )
            seq = recorded if isinstance(recorded, int) else 0
        job.ack(decision.position, seq)
        self._schedule_expiry()
        self._wakeup.set()

    def _schedule_expiry(self) -> None:
        # Answer TIMEOUT when a deadline passes while still queued behind a long turn:
        # otherwise the caller's socket backstop fires first and reports an unknown
        # outcome (exit 1) for a request that provably never ran.
        self._expiry_timer = rearm(self._expiry_timer, self.queue.next_deadline(), self._expire)

    def _expire(self) -> None:
        self._expiry_timer = None
        expired = self.queue.expire(time.monotonic())
        for job in expired:
            job.finish(error=_timed_out())
        if expired:
            self.on_change()
        self._schedule_expiry()

    async def next_job(self, stopping: Callable[[], bool]) -> Job | None:
        """The next request to run; None once ``stopping()`` (woken by :meth:`wake`)."""
        while not stopping():
            popped = self.queue.pop(time.monotonic())
            for expired in popped.expired:
                expired.finish(error=_timed_out())
            if popped.item is not None:
                # Seed 001: request enqueue latency (admitted -> its turn starts).
                waited = time.monotonic() - popped.item.admitted_at
                metrics.observe("request_enqueue_seconds", waited, kind=popped.item.kind)
                return popped.item
            self._wakeup.clear()
            await self._wakeup.wait()
        return None

    def wake(self) -> None:
        self._wakeup.set()

    def cancel(self, target: str | None) -> dict[str, Any]:
        """Cancel the running turn, or remove a queued request (``target``)."""
        if target is not None and (self.active is None or self.active.request_id != target):
            job = self.queue.cancel(target)
            if job is None:
                return {
                    "action": "cancel_result",
                    "cancelled": False,
                    "reason": "no such request",
                    "requestId": target,
                }
            job.finish(error=RequestCancelled("the request was cancelled before it ran"))
            self.on_change()
            result = {
                "action": "cancel_result",
                "cancelled": True,
                "requestId": target,
                "queued": True,
            }
            self.record("cancel_result", result, target)
            return result
        active = self.active
        if active is None or active.kind != "prompt":
            return {"action": "cancel_result", "cancelled": False, "reason": "nothing to cancel"}
        sent = self._slot.cancel()
        # Not sent: the turn has not reached the agent yet (it is still starting), so
        # it is never sent. Sent: the flag tells the turn's end it was cancelled (for
        # cancel_total{outcome}).
        active.cancel_requested = True
        _log.event("cancel", requestId=active.request_id, sent=sent)
        result = {
            "action": "cancel_result",
            "cancelled": True,
            "requestId": active.request_id,
            **({} if sent else {"deferred": True}),
        }
        self.record("cancel_result", result, active.request_id)
        return result

    def cancel_job(self, job: Job) -> None:
        """Carry out an IPC ``cancel``: answered at once, or -- asked with ``wait: true``
        and a running turn was cancelled -- once that turn has ended, saying whether the
        agent honoured the cancel (:meth:`answer_cancels`)."""
        result = self.cancel(job.env.payload.get("targetRequestId"))
        sent = result.get("cancelled") and not result.get("queued") and "deferred" not in result
        if job.env.payload.get("wait") is True and sent and self.active is not None:
            self._cancel_waiters.append((job, result))
            return
        job.finish(result)

    def answer_cancels(self, ended: Job) -> None:
        """The running job ended: answer every ``cancel`` waiting for it with its outcome
        (``honoured``: the agent ended it ``cancelled``; False with ``agentRetired`` when
        it ignored the cancel past the grace and was retired; None: it ended otherwise)."""
        waiters, self._cancel_waiters = self._cancel_waiters, []
        outcome = ended.cancel_outcome or {"honoured": None}
        for job, result in waiters:
            job.finish({**result, **outcome})

    def stop(self, *, closing: bool, ask_agent: bool = True) -> Job | None:
        """Shutdown: the running turn is cancelled (or never sent); the loop is woken.

        When the session is closing, the running request's own outcome is superseded:
        it is answered ``SESSION_CLOSED`` after the session's end is recorded. Without
        ``ask_agent`` (terminate) no ``session/cancel`` is sent: the tree is ended instead.
        """
        self._wakeup.set()
        active = self.active
        if active is None:
            return None
        active.cancel_requested = True
        if ask_agent:
            self._slot.cancel()
        if not closing or active.done:
            return None
        active.supersede()
        return active

    def drain(self, error: TetherError) -> list[Job]:
        """Answer every waiting request ``error``; return them."""
        self._expiry_timer = rearm(self._expiry_timer, None, self._expire)
        jobs = self.queue.drain()
        for job in jobs:
            job.finish(error=error)
        return jobs

    def waits(self, outbox: Outbox) -> bool:
        """Whether the caller on ``outbox`` waits for a request that is running or queued."""
        active = self.active
        if active is not None and active.outbox is outbox and active.waiting and not active.done:
            return True
        if any(job.outbox is outbox for job, _ in self._cancel_waiters):
            return True
        return any(job.outbox is outbox and job.waiting for job in self.queue)

    def detach(self, outbox: Outbox) -> bool:
        """A caller left: its waiting prompts are cancelled, as Ctrl-C would.

        The running turn gets ``session/cancel`` (or is never sent, if the agent is still
        starting); a queued one is removed. ``--no-wait`` prompts are not affected.
        Returns whether the running turn was cancelled.
        """
        cancelled = False
        active = self.active
        if (
            active is not None
            and active.outbox is outbox
            and not active.done
            and active.kind == "prompt"
            and active.waiting
        ):
            _log.event("caller_left", session_key=self.key, requestId=active.request_id)
            self._slot.cancel()
            # Sent or not, the turn's end now knows it was cancelled: never sent (the
            # agent was starting), or counted in cancel_total{outcome} when it ends.
            active.cancel_requested = True
            cancelled = True
        for job in list(self.queue):
            if job.outbox is outbox and job.kind == "prompt" and job.waiting:
                self.queue.remove(job)
                job.finish(error=RequestCancelled("the caller left before the request ran"))
                self.on_change()
        return cancelled


def rearm(
    timer: asyncio.TimerHandle | None, at: float | None, callback: Callable[[], None]
) -> asyncio.TimerHandle | None:
    """Cancel ``timer``; call ``callback`` at monotonic time ``at`` instead (None: never)."""
    if timer is not None:
        timer.cancel()
    if at is None:
        return None
    return asyncio.get_running_loop().call_later(max(0.0, at - time.monotonic()), callback)


PROMPT_RECORD_CHARS = 4096  # the whole prompt is in the journal's session/prompt frame


def queued_record(job: Job, position: int) -> dict[str, Any]:
    """The ``prompt_queued`` journal record: a preview of the prompt, and who sent it."""
    blocks = job.env.payload.get("prompt") or []
    text = " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))
    by: dict[str, Any] = dict(job.outbox.peer) if job.outbox.peer else {}
    client = job.env.payload.get("client")
    if isinstance(client, str) and client:
        by["client"] = client[:40]
    return {"prompt": text[:PROMPT_RECORD_CHARS], "queuePosition": position, "by": by}
