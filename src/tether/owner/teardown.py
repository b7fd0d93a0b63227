"""The owner's teardown: how it ends, and the one ordered shutdown.

:class:`Ending` is what a ``close`` or ``terminate`` request decided (how the session
fares -- :class:`SessionEnd` --, who asked, the immediate teardown under way, the
requests it superseded); :func:`shut_down` carries it out once the FIFO loop has stopped: the
queue drained, the agent run ended (or the terminate's teardown awaited), the
registry updated, the session's end recorded and told (:mod:`.ending`), the journal
stored, the last frames flushed, the lock released.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether import _aio, _log
from tether.errors import OwnerShuttingDown, SessionClosed, StateError
from tether.owner.ending import end_session
from tether.owner.lifecycle import OwnerInput, StopReason
from tether.supervise.run_state import TerminationReason

if TYPE_CHECKING:
    from tether.owner.agent_slot import RunEnd
    from tether.owner.compose import Owner
    from tether.owner.job import Job

__all__ = ["LAST_FRAMES_S", "Ending", "SessionEnd", "close", "shut_down", "terminate"]

LAST_FRAMES_S = 5.0  # on shutdown, how long callers get to take their last frames
logger = logging.getLogger("tether.owner")


class SessionEnd(enum.Enum):
    """How the session fares when its owner ends."""

    STAYS = "stays"  # the owner retires (idle, signal, lost state): the session resumes later
    CLOSED = "closed"  # close: session/close, the session ends
    DISCARDED = "discarded"  # close --discard: session/delete the agent's session too
    TERMINATED = "terminated"  # terminate (seed 004): the tree ended at once, the session ends


@dataclass
class Ending:
    """How the owner is ending, as the requests that end it decided."""

    session: SessionEnd = SessionEnd.STAYS
    closer: Job | None = None  # the close / terminate request, answered at the end
    # terminate: who asked, and the immediate teardown under way
    terminate_by: dict[str, Any] | None = None
    terminating: asyncio.Task[RunEnd | None] | None = None
    held: list[Job] = field(default_factory=list)  # superseded by a close: answered last
    done: bool = False  # the teardown ran (it runs once)

    @property
    def closes_session(self) -> bool:
        """The session ends (not just this owner)."""
        return self.session is not SessionEnd.STAYS


def close(owner: Owner, job: Job) -> None:
    """A ``close`` request: the session ends (``discard``: the agent's session too) once
    the active turn is cancelled and the agent run ended; ``job`` is answered last."""
    ending = owner.ending
    ending.closer = job
    discard = job.env.payload.get("discard") is True
    ending.session = SessionEnd.DISCARDED if discard else SessionEnd.CLOSED
    owner.request_shutdown(StopReason.CLOSE)


def terminate(owner: Owner, job: Job) -> None:
    """The operator's immediate end: no new turn, no waiting on the agent.

    Like ``close`` the session ends (recorded once, every caller told), but the tree
    is ended at once -- the keeper's TERM -> grace -> KILL, not ``session/close`` and
    a cancel grace -- while the queue is drained and the running turn superseded.
    """
    by: dict[str, Any] = dict(job.outbox.peer)
    asked = job.env.payload.get("by")
    if isinstance(asked, dict):
        by.update({str(k): v for k, v in list(asked.items())[:8]})
    ending = owner.ending
    ending.closer = job
    ending.session = SessionEnd.TERMINATED
    ending.terminate_by = by
    owner.request_shutdown(StopReason.TERMINATE)
    ending.terminating = _aio.spawn(owner.slot.terminate())


def _record_stop(owner: Owner, closing: bool) -> None:
    """The session's row says the owner stopped (and the session closed, if it did)."""
    if owner.stop_reason == StopReason.LOCK_LOST:
        # Another owner holds the session: its row is not ours to write. Say why we
        # stopped where every party may write (the registry's event log).
        owner.registry.add_event(
            owner.key,
            "owner_superseded",
            {"ownerPid": os.getpid(), "ownerGeneration": owner.generation,
             "reason": StopReason.LOCK_LOST.value},
        )  # fmt: skip
        return
    fields: dict[str, Any] = {
        "owner_status": "stopped",
        "owner_pid": None,
        "owner_socket": None,
        "queue_depth": 0,
        "current_request": None,
    }
    if closing:
        fields.update(state="closed", closed_at=time.time())
    if owner.runner.last_prompt_at is not None:
        fields["last_prompt_at"] = owner.runner.last_prompt_at
    owner.registry.update_session(owner.key, metric_ops=owner.heartbeat.take_kept(), **fields)


def _let_go(owner: Owner) -> None:
    """The owner's threads stop, its socket and lock go (idempotent)."""
    owner.heartbeat.stop()
    if owner.state_watch is not None:
        owner.state_watch.stop()
    owner.lock.release()


async def shut_down(owner: Owner) -> None:
    """Tear everything down; runs once, after the FIFO loop has stopped."""
    ending = owner.ending
    if ending.done:
        return
    ending.done = True
    owner.memory.cancel()
    owner.set_status("stopping")
    owner.lock.stop_listening()
    closing = ending.closes_session
    waiting = owner.admission.drain(
        SessionClosed("the session was closed before this request ran")
        if closing
        else OwnerShuttingDown(f"the owner is shutting down ({owner.stop_reason})")
    )
    reason = TerminationReason.CLOSE if closing else TerminationReason.SIGNAL
    if owner.lifecycle.stop_reason is not None and owner.lifecycle.stop_reason.is_retirement:
        reason = TerminationReason.CLOSE
    discard = ending.session is SessionEnd.DISCARDED
    if ending.terminating is not None:
        end = await ending.terminating  # started at once by the terminate request
    else:
        end = await owner.slot.end_current(reason=reason, close_session=closing, discard=discard)
    if discard and end is None:
        await owner.slot.discard_offline()
    # The status writer stops first, so nothing it writes can land after "stopped"; the
    # metrics it kept go into this last write.
    owner.heartbeat.stop()
    try:
        _record_stop(owner, closing)
    except StateError as exc:
        # A full or failing disk must not cost the callers their answers or leave
        # this process behind: the tree is already proven gone; say what was lost.
        logger.error("could not record the session's end: %s", exc)
        if ending.closer is not None:
            ending.closer.state_error = str(exc)
            ending.closer.state_error_code = exc.detail_code  # STATE_FULL, STATE_CORRUPT...
    if closing:
        end_session(
            owner.record,
            owner.server,
            owner.key,
            generation=owner.generation,
            end=end,
            superseded=[j for j in ending.held if not j.done],
            closer=ending.closer,
            terminated_by=ending.terminate_by,
            discarded=owner.slot.discarded if discard else None,
        )
    await owner.journaling.close(session_ended=ending.closes_session, stop_reason=owner.stop_reason)
    if owner.hosted:
        # Its process lives on: a closer waits for its connection to end, not for the
        # process (tether.ipc.peer.wait_owner_gone), so the session is let go first.
        _let_go(owner)
    # Last frames (a terminal, session_ended) must reach callers that read slowly
    # behind a stream; bounded, so a caller that never reads cannot hold us.
    await owner.server.close_all(LAST_FRAMES_S)
    _let_go(owner)
    owner.lifecycle.feed(OwnerInput.STOPPED, time.monotonic())
    _log.event(
        "owner_stopped", session_key=owner.key, reason=owner.stop_reason, answered=len(waiting)
    )
