"""Questions for a human, decided with no I/O: the interaction table.

Theory of operation
-------------------
An agent asks before it acts (``session/request_permission``) or asks for input
(``elicitation/create``). When the permission policy does not decide by itself (an
``ask``), the question becomes an *interaction*: it gets an id, is offered to every
attached controller, and stays **open** until exactly one of these inputs arrives:

``ANSWER``    a controller's valid answer -- the first one wins;
``DEADLINE``  ``permissionTimeout`` passed: the non-interactive policy decides;
``CANCEL``    the turn was cancelled or the session is closing: ``cancelled``;
``POLICY``    nobody could be asked (no controller attached): the policy decides at once;
``REMEMBERED`` the same tool call was answered ``always`` / ``deny-always`` before.

Each of them moves it to **resolved** and fixes its :class:`Resolution` (the answer,
the ACP result sent to the agent, who gave it, how). A second answer is not a second
transition: the table has no ``(RESOLVED, ANSWER)`` entry, and the board turns that
miss into :class:`~tether.errors.AlreadyAnswered` carrying the first resolution -- the
late answer never reaches the agent. A deadline or a cancel arriving after the answer
(a timer firing in the same loop pass, a cancel racing the answer) is a legal no-op.
Anything else missing from the table raises :class:`~tether.errors.InvalidTransition`.

Answers are words, mapped onto the options *the agent offered*, by kind, never by
guessing an agent-specific option id: ``allow`` (``allow_once``, else
``allow_always``), ``always`` (``allow_always``, else ``allow_once``), ``deny``
(``reject_once``, else ``reject_always``), ``deny-always`` (``reject_always``, else
``reject_once``), or any offered ``optionId`` as is. An answer that maps onto nothing
the agent offered is refused (:class:`~tether.errors.UsageError`) and the interaction
stays open. Elicitations take ``accept`` (with the form's content), ``decline`` or
``cancel``.

An ``allow_always`` / ``reject_always`` option chosen for a tool call -- or the word
``always`` / ``deny-always``, even where the agent offered no such option -- is
remembered for the session (:class:`Memory`), keyed by the tool call's kind and title:
the same tool call is then decided at once, as the agent offers it.

Time is passed in (``now``, monotonic); wall-clock stamps for the journal are the
shell's business.
"""

from __future__ import annotations

import enum
import os
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any, Final

from tether._table import Table
from tether.errors import AlreadyAnswered, InvalidTransition, UnknownInteraction
from tether.owner.answers import (
    CANCELLED_PERMISSION,
    Memory,
    elicitation_outcome,
    permission_outcome,
)

__all__ = [
    "Board",
    "How",
    "IInput",
    "IState",
    "Interaction",
    "Memory",
    "Resolution",
    "elicitation_outcome",
    "permission_outcome",
]


class IState(enum.Enum):
    OPEN = "open"
    RESOLVED = "resolved"


class IInput(enum.Enum):
    ANSWER = "answer"
    DEADLINE = "deadline"
    CANCEL = "cancel"
    POLICY = "policy"
    REMEMBERED = "remembered"


class How(enum.StrEnum):
    """How an interaction was resolved (the journal's ``how``)."""

    CONTROLLER = "controller"
    POLICY = "policy"
    DEADLINE = "deadline"
    CANCELLED = "cancelled"
    REMEMBERED = "remembered"


_TRANSITIONS: Final[Mapping[tuple[IState, IInput], IState]] = {
    (IState.OPEN, IInput.ANSWER): IState.RESOLVED,
    (IState.OPEN, IInput.DEADLINE): IState.RESOLVED,
    (IState.OPEN, IInput.CANCEL): IState.RESOLVED,
    (IState.OPEN, IInput.POLICY): IState.RESOLVED,
    (IState.OPEN, IInput.REMEMBERED): IState.RESOLVED,
    # A timer or a cancel that lost the race to an answer changes nothing.
    (IState.RESOLVED, IInput.DEADLINE): IState.RESOLVED,
    (IState.RESOLVED, IInput.CANCEL): IState.RESOLVED,
    # (RESOLVED, ANSWER), (RESOLVED, POLICY) and (RESOLVED, REMEMBERED) are missing on
    # purpose: see the essay.
}

# RESOLVED is terminal: a miss (only ever from there) leaves the interaction as it was.
_TABLE: Final = Table(
    "interaction", _TRANSITIONS, fail=IState.RESOLVED, terminal=frozenset({IState.RESOLVED})
)

RECENT_KEPT = 64  # resolved interactions kept to answer a late answer "already answered"


class Resolution:
    """How one interaction was resolved: the answer, the ACP result, who, how."""

    __slots__ = ("answer", "by", "how", "outcome")

    def __init__(
        self, answer: str, outcome: Mapping[str, Any], how: How, by: Mapping[str, int] | None
    ) -> None:
        self.answer = answer
        self.outcome = dict(outcome)
        self.how = how
        self.by = dict(by or {})

    def to_json(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "outcome": self.outcome,
            "how": str(self.how),
            "by": self.by or None,
        }


class Interaction:
    """One question: open until answered, expired, cancelled or decided by policy."""

    __slots__ = ("deadline", "id", "kind", "options", "request", "resolution", "state")

    def __init__(
        self,
        interaction_id: str,
        kind: str,
        request: Mapping[str, Any],
        *,
        deadline: float | None,
    ) -> None:
        self.id = interaction_id
        self.kind = kind  # "permission" | "elicitation"
        self.request = dict(request)
        raw = request.get("options")
        self.options: list[dict[str, Any]] = (
            [o for o in raw if isinstance(o, dict)] if isinstance(raw, list) else []
        )
        self.deadline = deadline
        self.state = IState.OPEN
        self.resolution: Resolution | None = None

    def __repr__(self) -> str:
        return f"Interaction({self.id} {self.kind} {self.state.value})"

    @property
    def is_open(self) -> bool:
        return self.state is IState.OPEN

    def _feed(self, event: IInput) -> bool:
        """Apply ``event``; True when it resolved the interaction now."""
        try:
            new = _TABLE.next(self.state, event, interaction_id=self.id)
        except InvalidTransition:
            self.state = _TABLE.after_miss(self.state)
            raise
        was_open = self.state is IState.OPEN
        self.state = new
        return was_open

    def outcome_for(self, answer: str, content: Any = None) -> tuple[dict[str, Any], str]:
        """Validate ``answer`` without resolving anything: (ACP result, option kind)."""
        if self.kind == "elicitation":
            return elicitation_outcome(answer, content), ""
        return permission_outcome(answer, self.options)

    def answer(
        self, answer: str, *, content: Any = None, by: Mapping[str, int] | None = None
    ) -> Resolution:
        """A controller's answer. The first valid one wins.

        Raises:
            AlreadyAnswered: it was resolved before (fields: the first resolution).
            UsageError: the answer names nothing offered; the interaction stays open.
        """
        if self.state is IState.RESOLVED and self.resolution is not None:
            first = self.resolution
            raise AlreadyAnswered(
                f"interaction {self.id} was already answered"
                f" ({first.answer}, {first.how}{_who(first.by)}); this answer was not sent",
                interaction_id=self.id,
                answer=first.answer,
                how=str(first.how),
                by=first.by or None,
            )
        outcome, _kind = self.outcome_for(answer, content)
        self._feed(IInput.ANSWER)
        self.resolution = Resolution(answer.strip(), outcome, How.CONTROLLER, by)
        return self.resolution

    def decide(self, event: IInput, outcome: Mapping[str, Any], answer: str) -> Resolution | None:
        """A deadline, a cancel, the policy or a remembered answer; returns the resolution
        if this resolved it (None: it was resolved before)."""
        if event is IInput.ANSWER:
            raise InvalidTransition("answers go through answer()", machine="interaction")
        if not self._feed(event):
            return None
        how = {
            IInput.DEADLINE: How.DEADLINE,
            IInput.CANCEL: How.CANCELLED,
            IInput.POLICY: How.POLICY,
            IInput.REMEMBERED: How.REMEMBERED,
        }[event]
        self.resolution = Resolution(answer, outcome, how, None)
        return self.resolution

    def cancel(self) -> Resolution | None:
        """The turn was cancelled or the session is closing: ``cancelled`` (the ACP rule)."""
        outcome = {"action": "cancel"} if self.kind == "elicitation" else dict(CANCELLED_PERMISSION)
        return self.decide(IInput.CANCEL, outcome, "cancelled")


def _who(by: Mapping[str, int]) -> str:
    """`` by pid N uid U`` (the answering process, from ``SO_PEERCRED``), or nothing."""
    if not by.get("pid"):
        return ""
    return f" by pid {by['pid']}" + (f" uid {by['uid']}" if "uid" in by else "")


class Board:
    """The interactions of one session: the open ones, and the last few resolved."""

    def __init__(self) -> None:
        self._open: dict[str, Interaction] = {}
        self._recent: OrderedDict[str, Interaction] = OrderedDict()
        self.memory = Memory()

    @staticmethod
    def new_id(kind: str) -> str:
        return ("p-" if kind == "permission" else "e-") + os.urandom(4).hex()

    def open(self, kind: str, request: Mapping[str, Any], *, deadline: float | None) -> Interaction:
        item = Interaction(self.new_id(kind), kind, request, deadline=deadline)
        self._open[item.id] = item
        return item

    def get(self, interaction_id: str) -> Interaction:
        """An open or recently resolved interaction.

        Raises:
            UnknownInteraction: no such id in this session (or long resolved).
        """
        item = self._open.get(interaction_id) or self._recent.get(interaction_id)
        if item is None:
            raise UnknownInteraction(
                f"no question {interaction_id!r} is waiting in this session"
                " (`tether status` lists the open ones)",
                interaction_id=interaction_id,
            )
        return item

    def settle(self, item: Interaction) -> None:
        """Move a resolved interaction from the open set to the recent ones."""
        if item.is_open:
            return
        self._open.pop(item.id, None)
        self._recent[item.id] = item
        while len(self._recent) > RECENT_KEPT:
            self._recent.popitem(last=False)

    def __contains__(self, interaction_id: object) -> bool:
        """Whether the board still holds it (open, or among the recent resolved)."""
        return interaction_id in self._open or interaction_id in self._recent

    def answer(
        self,
        interaction_id: str,
        answer: str,
        *,
        content: Any = None,
        by: Mapping[str, int] | None = None,
    ) -> tuple[Interaction, Resolution]:
        """The first valid answer resolves it; see :meth:`Interaction.answer` for errors."""
        item = self.get(interaction_id)
        resolution = item.answer(answer, content=content, by=by)
        if item.kind == "permission":
            _outcome, kind = item.outcome_for(answer, content)
            self.memory.remember(item.request, kind, answer)
        self.settle(item)
        return item, resolution

    def expired(self, now: float) -> list[Interaction]:
        """Open interactions whose deadline has passed (the shell resolves them)."""
        return [i for i in self._open.values() if i.deadline is not None and i.deadline <= now]

    def open_items(self) -> Iterator[Interaction]:
        return iter(tuple(self._open.values()))

    def __len__(self) -> int:
        return len(self._open)
