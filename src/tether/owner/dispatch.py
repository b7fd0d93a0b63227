"""What the owner does with one valid request: answer it at once, queue it, or refuse it.

:func:`admit` is the IPC server's ``admit`` callback. In order: a request for another
owner generation is refused (``GenerationMismatch``); the peer gate decides whether this
peer may do this (``VisibilityDenied`` naming the rule: the request never runs);
``status``, ``cancel`` and the answers (``answer``, ``relay_answer``) are handled at
once, even while stopping; anything else is refused once the owner is stopping
(``OwnerShuttingDown``); ``watch``, ``close`` and ``terminate`` are handled at once;
the rest (``prompt``, ``set_mode``, ``set_config_option``, ``start_agent``) waits its
turn in the FIFO.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tether.errors import GenerationMismatch, OwnerShuttingDown, TetherError
from tether.owner.job import Job
from tether.owner.teardown import close, terminate

if TYPE_CHECKING:
    from tether.ipc import protocol
    from tether.owner.compose import Owner
    from tether.owner.job import Outbox

__all__ = ["admit"]


def admit(owner: Owner, env: protocol.Envelope, outbox: Outbox) -> None:
    """Decide what to do with one valid request: answer at once, queue, or refuse."""
    job = Job(env, outbox, time.monotonic())
    if env.owner_generation is not None and env.owner_generation != owner.generation:
        job.finish(
            error=GenerationMismatch(
                f"request for owner generation {env.owner_generation}, this is {owner.generation}"
            )
        )
        return
    try:
        owner.gate.check(env, outbox.peer)
    except TetherError as exc:
        job.finish(error=exc)  # VisibilityDenied naming the rule: the request never runs
        return
    if env.kind == "status":
        job.ack()
        job.finish(owner.status_snapshot())
        return
    if env.kind == "cancel":
        job.ack()
        owner.admission.cancel_job(job)
        return
    if env.kind == "answer":
        owner.questions.admit_answer(job)
        return
    if env.kind == "relay_answer":
        owner.relays.admit_answer(job)
        return
    if owner.stopping:
        job.finish(error=OwnerShuttingDown(f"the owner is shutting down ({owner.stop_reason})"))
        return
    if env.kind == "watch":
        if not owner.questions.admit_watch(job):
            return  # --control from the agent's own tree: refused like its answers
        job.ack()
        owner.spawn(owner.journaling.watch(job, owner.questions))
        return
    if env.kind == "close":
        job.ack()
        close(owner, job)
        return
    if env.kind == "terminate":
        job.ack()
        terminate(owner, job)
        return
    owner.admission.enqueue(job)
