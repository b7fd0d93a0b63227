"""The one transition-table lookup every state machine uses.

Theory of operation. Each of Tether's state machines (the ACP turn, the agent run,
the lease, the owner's lifecycle, an interaction) keeps its transitions as data: a
``dict[(State, Input), State]`` over enums, where a missing key *is* the error (h11's
``_state.py``). What a miss means is the same everywhere, so it is written once, here:

* the lookup raises :class:`~tether.errors.InvalidTransition` with one message,
  ``"<machine>: no transition from <STATE> on <INPUT>"``, and the fields
  ``machine``, ``state`` and ``input`` (enum *names*), plus any context the caller
  passes (a session id);
* a machine that holds its state moves to the table's ``fail`` state on a miss --
  unless it already sits in a terminal state, which nothing leaves
  (:meth:`Table.after_miss`).

No I/O, no time: this is data and one function over it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from tether.errors import InvalidTransition

__all__ = ["Table"]

S = TypeVar("S", bound=enum.Enum)
I = TypeVar("I", bound=enum.Enum)  # noqa: E741 -- S(tate) and I(nput), as in every table


class Table(Generic[S, I]):
    """One machine's transitions, its name, and where a miss leaves it.

    Args:
        machine: the name in every error (``"turn"``, ``"run"``, ``"lease"``...).
        transitions: ``(state, input) -> next state``; a missing key is illegal.
        fail: the state a miss leaves the machine in (fail closed).
        terminal: states nothing leaves; a miss there leaves the machine where it is.
    """

    __slots__ = ("edges", "fail", "machine", "terminal", "transitions")

    def __init__(
        self,
        machine: str,
        transitions: Mapping[tuple[S, I], S],
        *,
        fail: S,
        terminal: frozenset[S] = frozenset(),
    ) -> None:
        self.machine = machine
        self.transitions = transitions
        self.fail = fail
        self.terminal = terminal
        #: The legal (from, to) steps, derived from the table.
        self.edges: frozenset[tuple[S, S]] = frozenset(
            (src, dst) for (src, _), dst in transitions.items()
        )

    def next(self, state: S, event: I, **context: Any) -> S:
        """The state after ``event`` in ``state``.

        Raises:
            InvalidTransition: the table has no entry for (state, event); its fields
                are ``machine``, ``state``, ``input`` (names) and ``context``.
        """
        try:
            return self.transitions[(state, event)]
        except KeyError:
            raise InvalidTransition(
                f"{self.machine}: no transition from {state.name} on {event.name}",
                machine=self.machine,
                state=state.name,
                input=event.name,
                **context,
            ) from None

    def after_miss(self, state: S) -> S:
        """The state a machine in ``state`` is left in after a miss."""
        return state if state in self.terminal else self.fail
