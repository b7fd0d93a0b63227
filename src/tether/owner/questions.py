"""The owner's room for questions to a human: interactions offered to controllers.

Theory of operation
-------------------
The agent's connection calls :meth:`Questions.ask_permission` for every permission
request the policy leaves undecided (an ``ask``), and :meth:`Questions.ask_elicitation`
for every ``elicitation/create``. The decisions are the sans-IO table's
(:mod:`tether.owner.question_table`); this room carries them out:

1. *Remembered.* A tool call answered ``allow_always`` / ``reject_always`` earlier in
   the session is decided at once, as the agent offers it now.
2. *Nobody to ask.* With no controller attached the non-interactive policy decides at
   once: the request is rejected (an elicitation declined). The CLI's
   ``--non-interactive-permissions fail`` turns a rejection into exit 5, as before.
3. *Ask.* Otherwise the interaction is journaled (``interaction_opened``: id, tool call,
   options, deadline) and sent to every attached controller as an ``interaction``
   frame; a controller that attaches while it is open gets it on attaching. The first
   valid ``answer`` request wins (:meth:`answer`); every controller then gets an
   ``interaction_resolved`` frame naming the answer and who gave it (``SO_PEERCRED``),
   and the journal records ``interaction_resolved``. A late answer gets
   ``ALREADY_ANSWERED`` and never reaches the agent.
4. *Deadline.* ``permissionTimeout`` passes: the policy decides (reject / decline).
5. *Cancel.* The turn is cancelled or the session closes: the connection cancels the
   waiting hook (the agent is answered ``cancelled`` by the connection, the ACP rule);
   we resolve the interaction ``cancelled`` and tell the controllers.

An answer from inside the session's own agent tree is refused (``VISIBILITY_DENIED``):
an agent must not approve its own tool calls by running ``tether answer`` through its
shell. The owner knows the answering process from ``SO_PEERCRED``; it is the agent's
side when its parent chain reaches the owner itself or the run's keeper (subreapers:
processes that escape by ``setsid`` or a double fork are re-parented to them, so they
are still found). Below the owner are every terminal the agent created (each under a
keeper of its own) and whatever a killed keeper left behind: all the agent (issue 20).

A controller is a connection whose request asked for it (``control: true`` on a
``watch`` or a ``prompt``) and is still running; it stops being one when that request
ends or its connection goes. A process of the agent's own tree cannot be one (refused
like its answers). When the last controller's connection goes (a SIGKILLed watcher)
while questions are open, they go back to the policy at once (``how: policy``) instead
of waiting out ``permissionTimeout`` for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from tether.acp import policy
from tether.errors import TetherError, VisibilityDenied
from tether.owner.job import Job
from tether.owner.question_table import (
    RECENT_KEPT,
    Board,
    IInput,
    Interaction,
    Resolution,
)

__all__ = ["DEFAULT_TIMEOUT_S", "Questions"]

DEFAULT_TIMEOUT_S = 300.0  # config permissionTimeout: how long a question waits for a human

_CONTROL = "control its own session (answer its questions)"
Record = Callable[[str, dict[str, Any], str | None], object]


class Questions:
    """Open questions of one session and the controllers that may answer them.

    Args:
        timeout: seconds an interaction waits for an answer (``permissionTimeout``).
        record: journals one control record (kind, payload, request id).
        current_request: the request id of the running turn, if any.
    """

    def __init__(
        self,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        record: Record | None = None,
        current_request: Callable[[], str | None] = lambda: None,
        agent_tree: Callable[[], tuple[int, ...]] = tuple,
    ) -> None:
        self.timeout = timeout
        # The pids at the root of the live agent run (keeper, agent): answers from
        # below them are refused.
        self.agent_tree = agent_tree
        self.record: Record = record or (lambda *_: None)
        self.current_request = current_request
        self.board = Board()
        self._controllers: list[Job] = []
        self._waiters: dict[str, asyncio.Future[Resolution]] = {}
        # id -> what the policy answers an open question (its answer word): given when
        # the deadline passes, or at once when the last controller goes.
        self._fallbacks: dict[str, tuple[dict[str, Any], str]] = {}
        self._meta: dict[str, dict[str, Any]] = {}  # id -> its public record

    # --- controllers ----------------------------------------------------------------

    def controllers(self) -> list[Job]:
        """The live controllers (requests that asked for it, still running and connected)."""
        self._controllers = [j for j in self._controllers if not j.done and not j.outbox.detached]
        return list(self._controllers)

    def controls(self, outbox: object) -> bool:
        """Whether the connection ``outbox`` is a live controller's: it waits for
        questions, so it is not dropped for being silent."""
        return any(job.outbox is outbox for job in self.controllers())

    def refuse_agent(
        self,
        by: dict[str, int] | None,
        what: str = "answer the questions of its own session",
        **fields: Any,
    ) -> None:
        """Refuse a process inside the session's own agent tree: it may neither answer
        the session's questions nor attach as its controller.

        Raises:
            VisibilityDenied: ``by`` (``SO_PEERCRED``) is the agent's side (rule
                ``own-agent-tree``).
        """
        roots = self.agent_tree()
        if by and roots and inside_tree(by.get("pid", 0), roots):
            raise VisibilityDenied(
                f"an agent cannot {what}",
                rule="own-agent-tree",
                **fields,
            )

    def admit_watch(self, job: Job) -> bool:
        """A ``watch`` that asks ``control: true`` from the agent's own tree is refused
        (its one terminal frame, now); False then. Any other watch: True."""
        if job.env.payload.get("control") is not True:
            return True
        try:
            self.refuse_agent(job.outbox.peer, _CONTROL)
        except TetherError as exc:
            job.finish(error=exc)
            return False
        return True

    def attach(self, job: Job) -> None:
        """``job`` (a ``watch`` or ``prompt`` with ``control: true``) may answer from now on;
        it is offered every question open now.

        Raises:
            VisibilityDenied: the job's process is inside the session's own agent tree
                (:meth:`refuse_agent`): it is not attached.
        """
        self.refuse_agent(job.outbox.peer, _CONTROL)
        if job not in self._controllers:
            self._controllers.append(job)
        for item in self.board.open_items():
            job.send({"type": "interaction", "requestId": job.request_id, **self._frame(item)})

    def attach_prompter(self, job: Job) -> None:
        """A ``prompt`` with ``control: true`` answers its own turn's questions -- unless
        it comes from the agent's own tree: then it is no controller (the policy decides,
        as for anyone), and its turn runs all the same."""
        with contextlib.suppress(VisibilityDenied):
            self.attach(job)

    def _tell(self, frame_type: str, item: Interaction) -> None:
        body = self._frame(item)
        for job in self.controllers():
            job.send({"type": frame_type, "requestId": job.request_id, **body})

    def _forget(self) -> None:
        """Drop the records of interactions the board no longer holds (bounded memory)."""
        if len(self._meta) > 2 * RECENT_KEPT:
            self._meta = {k: v for k, v in self._meta.items() if k in self.board}

    def _frame(self, item: Interaction) -> dict[str, Any]:
        record = dict(self._meta.get(item.id) or {})
        if item.resolution is not None:
            record.update(item.resolution.to_json())
        return {"interaction": record}

    # --- asking ---------------------------------------------------------------------

    async def ask_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        """The connection's permission hook: the result to send the agent.

        Cancellation: the interaction is resolved ``cancelled`` (journaled, controllers
        told) before the cancellation propagates; the connection answers the agent.
        """
        remembered = self.board.memory.recall(params)
        item = self.board.open("permission", params, deadline=self._deadline())
        self._open(item, params)
        if remembered is not None:
            outcome, word = remembered
            item.decide(IInput.REMEMBERED, outcome, word)
            return self._resolved(item).outcome
        reject = policy.outcome_for(policy.Decision.REJECT, item.options)
        return await self._wait(item, fallback=reject, fallback_answer="deny")

    async def ask_elicitation(self, params: dict[str, Any]) -> dict[str, Any]:
        """The connection's elicitation hook: ``decline`` when nobody can answer.

        Cancellation: as :meth:`ask_permission` (resolved ``cancelled``, then propagates).
        """
        item = self.board.open("elicitation", params, deadline=self._deadline())
        self._open(item, params)
        return await self._wait(item, fallback={"action": "decline"}, fallback_answer="decline")

    def elicitation_complete(self, params: dict[str, Any]) -> None:
        """``elicitation/complete`` (a URL flow finished): journaled, controllers told."""
        payload = {"elicitationId": params.get("elicitationId")}
        self.record("elicitation_completed", payload, self.current_request())
        for job in self.controllers():
            job.send({"type": "elicitation_completed", "requestId": job.request_id, **payload})

    def _deadline(self) -> float | None:
        return time.monotonic() + self.timeout if self.timeout > 0 else None

    def _open(self, item: Interaction, params: dict[str, Any]) -> None:
        self._meta[item.id] = question_record(item, params, self.current_request(), self.timeout)

    async def _wait(
        self, item: Interaction, *, fallback: dict[str, Any], fallback_answer: str
    ) -> dict[str, Any]:
        if not self.controllers():
            item.decide(IInput.POLICY, fallback, fallback_answer)
            return self._resolved(item).outcome
        self.record("interaction_opened", self._meta[item.id], self.current_request())
        future: asyncio.Future[Resolution] = asyncio.get_running_loop().create_future()
        self._waiters[item.id] = future
        self._fallbacks[item.id] = (fallback, fallback_answer)
        self._tell("interaction", item)
        try:
            timeout = None if item.deadline is None else max(0.0, item.deadline - time.monotonic())
            async with asyncio.timeout(timeout):
                resolution = await asyncio.shield(future)
        except TimeoutError:
            if item.decide(IInput.DEADLINE, fallback, fallback_answer) is not None:
                return self._resolved(item, opened=True).outcome
            resolution = future.result()  # answered in the same loop pass as the deadline
        except asyncio.CancelledError:
            if item.cancel() is not None:
                self._resolved(item, opened=True)
            raise
        finally:
            self._waiters.pop(item.id, None)
            self._fallbacks.pop(item.id, None)
        return resolution.outcome

    def _resolved(self, item: Interaction, *, opened: bool = False) -> Resolution:
        """Journal and announce ``item``'s resolution (never-asked ones: opened+resolved)."""
        assert item.resolution is not None
        self.board.settle(item)
        if not opened:
            self.record("interaction_opened", self._meta[item.id], self.current_request())
        self.record(
            "interaction_resolved",
            {"id": item.id, **item.resolution.to_json()},
            self.current_request(),
        )
        if opened:
            self._tell("interaction_resolved", item)
        self._forget()
        return item.resolution

    # --- answering --------------------------------------------------------------------

    def answer(
        self,
        interaction_id: str,
        answer: str,
        *,
        content: Any = None,
        by: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """A controller's answer; the first valid one wins and reaches the agent.

        Returns:
            ``{"action": "interaction_resolved", "interaction": {...}}``.

        Raises:
            UnknownInteraction: no such question in this session.
            AlreadyAnswered: it was resolved before; this answer was not sent.
            UsageError: the answer names nothing the agent offered (it stays open).
        """
        self.refuse_agent(by, interaction_id=interaction_id)
        item, _resolution = self.board.answer(interaction_id, answer, content=content, by=by)
        future = self._waiters.get(item.id)
        self.record(
            "interaction_resolved",
            {"id": item.id, **_resolution.to_json()},
            self.current_request(),
        )
        self._tell("interaction_resolved", item)
        if future is not None and not future.done():
            future.set_result(_resolution)
        result = {"action": "interaction_resolved", **self._frame(item)}
        self._forget()
        return result

    def admit_answer(self, job: Job) -> None:
        """Carry out an IPC ``answer`` request: its one terminal frame, at once."""
        job.ack()
        payload = job.env.payload
        try:
            result = self.answer(
                str(payload["interactionId"]),
                str(payload["answer"]),
                content=payload.get("content"),
                by=job.outbox.peer,
            )
        except TetherError as exc:
            job.finish(error=exc)
            return
        job.finish(result)

    def controller_left(self) -> None:
        """A connection went: if no controller is left, every open question goes back to
        the policy at once (as if nobody had been there to ask), not at its deadline."""
        if self.controllers():
            return
        for item in self.board.open_items():
            future = self._waiters.get(item.id)
            fallback = self._fallbacks.get(item.id)
            if future is None or fallback is None or future.done():
                continue
            if item.decide(IInput.POLICY, *fallback) is not None:
                self._resolved(item, opened=True)
                assert item.resolution is not None
                future.set_result(item.resolution)

    def cancel_all(self) -> None:
        """The session is closing: every open question is answered ``cancelled``."""
        for item in self.board.open_items():
            future = self._waiters.get(item.id)
            if item.cancel() is not None:
                self._resolved(item, opened=True)
                if future is not None and not future.done():
                    assert item.resolution is not None
                    future.set_result(item.resolution)

    def pending(self) -> list[dict[str, Any]]:
        """The open questions, as offered to controllers (for ``status``)."""
        return [self._frame(item)["interaction"] for item in self.board.open_items()]


def inside_tree(pid: int, roots: tuple[int, ...]) -> bool:
    """Whether process ``pid`` is one of ``roots`` or below one (its ``/proc`` parent
    chain reaches it). A chain that cannot be read counts as inside (fail closed)."""
    seen = 0
    while pid > 1 and seen < 4096:
        if pid in roots:
            return True
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                raw = f.read()
            pid = int(raw[raw.rfind(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            return True
        seen += 1
    return False


def question_record(
    item: Interaction, params: dict[str, Any], turn: str | None, timeout: float
) -> dict[str, Any]:
    """The public record of a question just opened: what controllers are offered and
    the journal's ``interaction_opened`` holds (its resolution is added once it has one)."""
    meta: dict[str, Any] = {
        "id": item.id,
        "question": item.kind,  # not "kind": that is the journal entry's own
        "turn": turn,
        "openedAt": time.time(),
        "deadline": time.time() + timeout if timeout > 0 else None,
    }
    if item.kind == "permission":
        tool = params.get("toolCall")
        tool = tool if isinstance(tool, dict) else {}
        meta["toolCall"] = {
            k: tool[k] for k in ("toolCallId", "title", "kind", "rawInput") if k in tool
        }
        meta["options"] = item.options
    else:
        keys = ("mode", "message", "requestedSchema", "url", "elicitationId", "toolCallId")
        meta.update({k: params[k] for k in keys if k in params})
    return meta
