"""Requesters across hosts: a host's assertion, checked against the index (no I/O).

Theory of operation
-------------------
Who is asking is a kernel fact, and kernel facts stay local: only the host an agent
runs on can prove, from ``SO_PEERCRED`` and ``/proc``, that a process belongs to one of
its agent trees (:mod:`tether.policy.requester`). So an agent reaches the fleet through its
host's agents' door (:mod:`tether.fleet.door`), which proves the caller and forwards
the request to a router with the fleet credential and an **assertion**: one header,
:data:`ASSERTION_HEADER`, naming the asserting host, the requester's fleet session id,
its agent id, whether it is sandboxed and the clamp its proof carries.

The router believes an assertion only when both hold (:func:`check_assertion`):

- it came with the fleet credential (a user's token never carries one: a forged header
  from a user is refused, never ignored);
- the index says the asserting host owns the asserted session, open. A host speaks
  for its own sessions only; it cannot speak for another host's.

Then the very functions that decide on one host decide here --
:func:`tether.policy.visibility.can_see`, :func:`~tether.policy.visibility.can_spawn` and
:func:`~tether.policy.visibility.visible` -- over index rows mapped by :func:`row_of`; there is
no second policy. The index row may only narrow what the host asserts: a row that says
sandboxed makes the requester sandboxed whatever the assertion says.

The fleet credential is one secret shared by every host: a host that holds it could
name another host id in its assertion. Binding the asserting host to the credential it
presents is the work of per-host credentials; until then the check stops an honest
host's door from ever speaking for a session that is not its own, and a user's token
from speaking for anyone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from tether.fleet.rows import Ownership, SessionRow
from tether.policy.visibility import Action, Decision, Requester, Row, Visibility

__all__ = [
    "ASSERTION_HEADER",
    "Assertion",
    "action_of",
    "check_assertion",
    "parse_assertion",
    "requester_may_use",
    "requester_of",
    "row_of",
    "spawn_ownership",
]

ASSERTION_HEADER: Final = b"x-tether-requester"
_MAX_ASSERTION: Final = 4096  # bytes; an id, an agent id and two flags fit many times over


@dataclass(frozen=True, slots=True)
class Assertion:
    """What a host asserts about the requester of a request it forwards."""

    host_id: str
    session_id: str
    agent_id: str
    sandboxed: bool = False
    clamp: Visibility | None = None

    def encode(self) -> bytes:
        """The header's value (compact JSON)."""
        doc: dict[str, Any] = {
            "host": self.host_id,
            "session": self.session_id,
            "agent": self.agent_id,
            "sandboxed": self.sandboxed,
            "clamp": None if self.clamp is None else self.clamp.value,
        }
        return json.dumps(doc, separators=(",", ":")).encode()


def parse_assertion(raw: bytes) -> Assertion | str:
    """The assertion in a header's value, or a sentence saying why it is not one."""
    if len(raw) > _MAX_ASSERTION:
        return f"the requester assertion is over {_MAX_ASSERTION} bytes"
    try:
        doc = json.loads(raw)
    except ValueError:
        return "the requester assertion is not JSON"
    if not isinstance(doc, dict):
        return "the requester assertion is not a JSON object"
    host, session, agent = doc.get("host"), doc.get("session"), doc.get("agent", "")
    if not isinstance(host, str) or not host or not isinstance(session, str) or not session:
        return "the requester assertion needs a host and a session (non-empty strings)"
    if not isinstance(agent, str):
        return "the requester assertion's agent must be a string"
    sandboxed = doc.get("sandboxed", False)
    if not isinstance(sandboxed, bool):
        return "the requester assertion's sandboxed must be true or false"
    clamp_raw = doc.get("clamp")
    clamp: Visibility | None = None
    if clamp_raw is not None:
        try:
            clamp = Visibility.parse(str(clamp_raw))
        except ValueError as e:
            return f"the requester assertion's clamp: {e}"
    return Assertion(host, session, agent, sandboxed, clamp)


def row_of(row: SessionRow) -> Row:
    """An index row as the visibility check takes it (the same fields as on one host)."""
    return Row(
        key=row.session_id,
        agent_id=row.agent,
        owner_session_key=row.owner_session_id,
        spawned_by=row.spawned_by,
        parent_session_key=row.parent_session_id,
    )


def check_assertion(assertion: Assertion, row: SessionRow | None) -> Decision:
    """Whether the index (``row``: the asserted session's, None if it has none) lets the
    asserting host speak for the asserted session."""
    sid, host = assertion.session_id, assertion.host_id
    if row is None:
        return Decision(False, "assertion.session", f"the index has no session {sid}")
    if row.state != "open":
        return Decision(False, "assertion.session", f"session {sid} is {row.state}")
    if row.host_id != host:
        return Decision(
            False,
            "assertion.host",
            f"host {host} cannot speak for session {sid}: the index says host {row.host_id}"
            " owns it",
        )
    return Decision(True, "assertion", f"host {host} owns session {sid}")


def requester_of(assertion: Assertion, row: SessionRow) -> Requester:
    """The requester an accepted assertion stands for (``row``: its session's index
    row, which may make it sandboxed, never less so)."""
    return Requester(
        session_key=assertion.session_id,
        agent_id=assertion.agent_id or row.agent,
        sandboxed=assertion.sandboxed or row.sandboxed,
        clamp=assertion.clamp,
    )


def spawn_ownership(requester: Requester | None) -> Ownership:
    """The ownership fields of a session ``requester`` creates: the requester is its
    owner, spawner and parent (the operator's sessions name none); a sandboxed
    requester's sessions are sandboxed too."""
    if requester is None:
        return Ownership()
    key = requester.session_key
    return Ownership(
        owner_session_id=key,
        spawned_by=key,
        parent_session_id=key,
        sandboxed=requester.sandboxed,
    )


# What a request does to the session its path names, for the denial's wording (the
# rule is the same for every action). Matched on the path's last segment.
_POST_ACTIONS: Final = {
    "prompt": Action.SEND,
    "cancel": Action.CANCEL,
    "terminate": Action.TERMINATE,
    "mode": Action.SET,
    "set": Action.SET,
    "config": Action.SET,
    "rehome": Action.CLOSE,
    "answer": Action.ANSWER,
}
_GET_ACTIONS: Final = {
    "events": Action.WATCH,
    "history": Action.HISTORY,
    "transcript": Action.HISTORY,
    "export": Action.HISTORY,
}


# The router's routes a requester may use, all checked here: the sessions (listing,
# creating, each one's routes) and what holds no session data. Anything else -- a
# route the router gains later, say -- is refused to requesters until it is checked.
_REQUESTER_PATHS: Final = frozenset(
    {"/v1/sessions", "/v1/health", "/v1/fleet/hosts", "/v1/agents", "/v1/openapi.json"}
)


def requester_may_use(path: str) -> bool:
    """Whether a requester may use the router's route ``path`` at all (its session
    routes are then checked session by session)."""
    return path in _REQUESTER_PATHS or path.startswith("/v1/sessions/")


def action_of(method: bytes, path: str) -> Action:
    """The action a request on ``/v1/sessions/{id}[/...]`` performs."""
    parts = [p for p in path.split("/") if p]
    tail = parts[3:]  # after v1, sessions, {id}
    if method == b"DELETE" and not tail:
        return Action.CLOSE
    if method in (b"GET", b"HEAD"):
        return _GET_ACTIONS.get(tail[-1], Action.STATUS) if tail else Action.STATUS
    if "questions" in tail or "interactions" in tail:
        return Action.ANSWER
    return _POST_ACTIONS.get(tail[-1], Action.SEND) if tail else Action.SEND
