"""Which sessions a requester may see and touch: one pure check, no I/O.

Theory of operation
-------------------
A request comes from the **operator** (a human or an orchestrator outside every agent
tree; ``requester is None``) or from a **requester session**: a supervised agent that ran
``tether ...`` from its own tree, or called a tool Tether handed it (``tether mcp``).
Who is asking is decided elsewhere (:mod:`tether.policy.requester`, against the kernel); this
module only answers "may this requester act on this row?", from the row's ownership
metadata alone. There is no secondary lookup at check time (OpenClaw's
``sessions.list({spawnedBy})`` at visibility time was the source of its one-off bugs):
a spawned child is the requester's because *the row says so*.

The same :func:`can_see` decides every action -- list, history, send (prompting a
session that is not the requester's own), status, watch, cancel, set-mode/set, close
and terminate. The action only changes the wording of a denial, never the outcome, so
a session that is listed is exactly a session that can be read and driven.

Levels (config ``[sessions] visibility``, default ``tree``)::

    self   the requester's own session only
    tree   + rows the requester owns: ownerSessionKey, spawnedBy or parentSessionKey
           equals the requester's key
    agent  + every row of the requester's agent id (same agent)
    all    + cross-agent rows the agent-to-agent policy allows

Decisions taken here, and why:

* **``tree`` is not transitive.** A grandchild (spawned by the requester's child) is
  not in the requester's tree; its parent sees it. Transitivity would need a walk of
  the registry at check time -- the very secondary lookup the seed removes -- or a
  stored lineage that goes stale when rows are reopened. Delegation stays explicit:
  the requester reaches a grandchild's work through the child it asked. The operator
  sees everything, and ``sessions list --tree`` draws the whole forest for it.
  (Closing is different: closing a session closes its children, children first, and
  so transitively -- that is lifetime, not visibility.)
* **``agent`` keeps owned cross-agent children.** The seed says "same agent only,
  unless an explicit owner relationship says the row belongs to the requester";
  OpenClaw's code instead denies owned cross-agent children under ``agent``. We follow
  the seed: then the levels are a chain, ``self ⊆ tree ⊆ agent ⊆ all``, and raising
  visibility never hides anything. With OpenClaw's rule, moving from ``tree`` to
  ``agent`` would hide the Codex reviewer a Claude session spawned -- the very
  ``tree``-versus-``all`` bug class the seed was written to end.
* **``all`` is never less capable than ``tree``**: owned rows are allowed before the
  agent-to-agent policy is consulted, so a requester-owned cross-agent child is
  visible under ``all`` even with agent-to-agent disabled.
* **A sandboxed requester is clamped to at most ``tree``** (``agent``/``all`` become
  ``tree``; ``self`` stays ``self``). OpenClaw's clamp also *raises* ``self`` to
  ``tree``; a clamp that widens is not a clamp, so we do not.
* A requester whose identity was not proven is clamped to ``self`` by
  :mod:`tether.policy.requester` (``Requester.clamp``); the check itself only applies the
  narrowest of the configured level, the clamp and the sandbox.

Agent-to-agent policy (``[agentToAgent] enabled``, ``allow``): the same agent is always
allowed; otherwise it must be enabled and *both* agent ids must match the allow
patterns (an empty list matches every id). A pattern without ``*`` matches exactly and
case-sensitively; one with ``*`` matches case-insensitively by a linear-time matcher,
never a regular expression; a blank pattern matches nothing (:mod:`tether.policy.globs`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from tether.policy.globs import Pattern, glob_match

__all__ = [
    "A2APolicy",
    "Action",
    "Decision",
    "Requester",
    "Row",
    "Visibility",
    "can_see",
    "can_spawn",
    "effective_visibility",
    "glob_match",
    "visible",
]


class Visibility(enum.Enum):
    """How far a requester sees; members are ordered ``SELF < TREE < AGENT < ALL``."""

    SELF = "self"
    TREE = "tree"
    AGENT = "agent"
    ALL = "all"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @classmethod
    def parse(cls, value: str) -> Visibility:
        """The level named by ``value`` (case-insensitive); ``ValueError`` otherwise."""
        try:
            return cls(value.strip().lower())
        except ValueError:
            names = ", ".join(v.value for v in cls)
            raise ValueError(f"visibility must be one of {names}, not {value!r}") from None


_RANK: Final = {Visibility.SELF: 0, Visibility.TREE: 1, Visibility.AGENT: 2, Visibility.ALL: 3}


class Action(enum.Enum):
    """What the requester wants to do with the row (wording only; same rule for all)."""

    LIST = "list"
    HISTORY = "history"
    SEND = "send"
    STATUS = "status"
    WATCH = "watch"
    CANCEL = "cancel"
    SET = "set"
    CLOSE = "close"
    TERMINATE = "terminate"
    ANSWER = "answer"  # a question the session's agent asked (interactions)


@dataclass(frozen=True, slots=True)
class Row:
    """The ownership metadata of one session row (all the check needs)."""

    key: str
    agent_id: str
    owner_session_key: str | None = None
    spawned_by: str | None = None
    parent_session_key: str | None = None


@dataclass(frozen=True, slots=True)
class Requester:
    """A session acting through Tether.

    ``clamp`` caps the level whatever the configuration says (``SELF`` for a claim the
    kernel did not confirm); ``sandboxed`` caps it at ``TREE``.
    """

    session_key: str
    agent_id: str
    sandboxed: bool = False
    clamp: Visibility | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer: allowed or not, a stable ``rule`` code and a sentence saying why."""

    allowed: bool
    rule: str
    why: str


# --- agent-to-agent policy --------------------------------------------------------------


@dataclass(frozen=True)
class A2APolicy:
    """The agent-to-agent policy: ``enabled`` and ``allow`` patterns (see the module doc)."""

    enabled: bool = False
    allow: Sequence[str] = ()
    _compiled: tuple[Pattern, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", tuple(Pattern.compile(p) for p in self.allow))

    def matches(self, agent_id: str) -> bool:
        """Whether ``agent_id`` matches the allow list (an empty list matches every id)."""
        if not self._compiled:
            return True
        return any(pattern.matches(agent_id) for pattern in self._compiled)

    def allows(self, requester_agent: str, target_agent: str) -> bool:
        """Whether a session of ``requester_agent`` may reach one of ``target_agent``."""
        if requester_agent == target_agent:
            return True
        return self.enabled and self.matches(requester_agent) and self.matches(target_agent)


# --- the check --------------------------------------------------------------------------


def effective_visibility(visibility: Visibility, requester: Requester) -> Visibility:
    """The narrowest of the configured level, the requester's clamp and the sandbox."""
    levels = [visibility]
    if requester.clamp is not None:
        levels.append(requester.clamp)
    if requester.sandboxed:
        levels.append(Visibility.TREE)
    return min(levels, key=lambda v: v.rank)


def _owned(row: Row, key: str) -> bool:
    return key in (row.owner_session_key, row.spawned_by, row.parent_session_key)


def _deny(action: Action, row: Row, rule: str, reason: str) -> Decision:
    return Decision(False, rule, f"{action.value} of session {row.key} denied: {reason}")


def can_see(
    row: Row,
    requester: Requester | None,
    visibility: Visibility,
    a2a: A2APolicy,
    action: Action = Action.LIST,
) -> Decision:
    """Whether ``requester`` may perform ``action`` on ``row``, and why (see the module doc)."""
    if requester is None:
        return Decision(True, "operator", "the operator (outside every agent tree) sees all")
    me = requester.session_key
    if row.key == me:
        return Decision(True, "self", "the requester's own session")
    level = effective_visibility(visibility, requester)
    clamp_note = ""
    if level is not visibility:
        clamp_note = (
            " (the requester is sandboxed, clamped to tree)"
            if requester.sandboxed and level is Visibility.TREE
            else " (the requester's identity is unproven, clamped to self)"
        )
    if level is Visibility.SELF:
        return _deny(
            action, row, "visibility=self", f"visibility is self: own session only{clamp_note}"
        )
    if _owned(row, me):
        return Decision(True, "owned", "the row names the requester as owner, spawner or parent")
    if level is Visibility.TREE:
        return _deny(
            action,
            row,
            "visibility=tree",
            "visibility is tree: the requester's own session and the sessions it spawned"
            f" or owns{clamp_note}",
        )
    target = row.agent_id
    if target and target == requester.agent_id:
        return Decision(True, "same-agent", f"same agent ({target})")
    if level is Visibility.AGENT:
        return _deny(
            action,
            row,
            "visibility=agent",
            f"visibility is agent: only {requester.agent_id!r} sessions, and this is"
            f" {target or 'of unknown agent'!r}",
        )
    if not target:
        return _deny(action, row, "agent-unknown", "the row's agent is unknown")
    if not a2a.enabled:
        return _deny(
            action,
            row,
            "agentToAgent.enabled",
            f"cross-agent access ({requester.agent_id!r} -> {target!r}) needs"
            " [agentToAgent] enabled = true",
        )
    if not a2a.allows(requester.agent_id, target):
        return _deny(
            action,
            row,
            "agentToAgent.allow",
            f"[agentToAgent] allow does not match both {requester.agent_id!r} and {target!r}",
        )
    return Decision(True, "agentToAgent", f"agent-to-agent allowed ({target})")


def can_spawn(requester: Requester | None, target_agent: str, a2a: A2APolicy) -> Decision:
    """Whether ``requester`` may start a session of agent ``target_agent``, and why.

    Spawning a session of *another* agent is agent-to-agent delegation, so the
    agent-to-agent policy decides it, exactly as it decides reaching another agent's
    session under ``all``: the same agent is always allowed; another agent needs
    ``[agentToAgent] enabled = true`` and both agent ids matching ``allow``. The
    visibility level does not enter: whatever it is, the spawned session is the
    requester's own (owned rows are visible at every level above ``self``), so the
    policy is the only thing that can say "not that agent". A requester whose own agent
    is unknown (an ``exec`` run) is cross-agent to every agent. The operator spawns
    anything.
    """
    if requester is None:
        return Decision(True, "operator", "the operator (outside every agent tree) may start any")
    mine = requester.agent_id
    if mine and mine == target_agent:
        return Decision(True, "same-agent", f"same agent ({target_agent})")
    what = f"session {requester.session_key} ({mine or 'agent unknown'!r}) may not spawn"
    if not a2a.enabled:
        return Decision(
            False,
            "agentToAgent.enabled",
            f"{what} a {target_agent!r} session: spawning another agent's session needs"
            " [agentToAgent] enabled = true",
        )
    if not mine or not a2a.allows(mine, target_agent):
        return Decision(
            False,
            "agentToAgent.allow",
            f"{what} a {target_agent!r} session: [agentToAgent] allow does not match both"
            f" {mine!r} and {target_agent!r}",
        )
    return Decision(True, "agentToAgent", f"agent-to-agent allowed ({mine} -> {target_agent})")


def visible(
    rows: Iterable[Row], requester: Requester | None, visibility: Visibility, a2a: A2APolicy
) -> list[Row]:
    """The rows ``requester`` may list, in order."""
    return [r for r in rows if can_see(r, requester, visibility, a2a).allowed]
