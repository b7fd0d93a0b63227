"""The router's side of requesters: who a request speaks for, and what it may reach.

A user's token speaks for the operator, who sees everything. The fleet credential with
a requester assertion (:mod:`tether.fleet.delegation`) speaks for an agent's session,
proven by the host it runs on; the router checks the assertion against the index and
then applies the configured visibility level and agent-to-agent policy (the same
``[sessions] visibility`` and ``[agentToAgent]`` keys as on one host) with the same
pure functions. Every answer here is a problem document, never a traceback.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tether.errors import FleetError
from tether.fleet import http1
from tether.fleet.delegation import (
    ASSERTION_HEADER,
    action_of,
    check_assertion,
    parse_assertion,
    requester_may_use,
    requester_of,
    row_of,
)
from tether.policy.visibility import Decision, Requester, can_see

if TYPE_CHECKING:
    from tether.fleet.router import Router

__all__ = ["denied", "requester", "target_refused"]


def denied(decision: Decision, **fields: Any) -> bytes:
    """The 403 for a visibility (or assertion) refusal, naming the rule."""
    code = "ASSERTION_REFUSED" if decision.rule.startswith("assertion") else "VISIBILITY_DENIED"
    return http1.problem(403, "Forbidden", decision.why, code=code, retryable=False,
                         rule=decision.rule, **fields)  # fmt: skip


def _index_down(e: FleetError) -> bytes:
    return http1.problem(503, "Service Unavailable", str(e), code="INDEX_UNAVAILABLE",
                         retryable=True)  # fmt: skip


async def requester(
    router: Router, head: http1.RequestHead, fleet_caller: bool
) -> tuple[Requester | None, bytes | None]:
    """``(requester, None)`` -- None for the operator -- or ``(None, problem)``.

    ``fleet_caller``: the request carries the fleet credential (else a user's token).
    """
    raw = head.header(ASSERTION_HEADER)
    if not fleet_caller:
        if raw is None:
            return None, None
        return None, denied(Decision(
            False, "assertion.credential",
            "a requester assertion is accepted only with the fleet credential (from a host's"
            " agents' door), never with a user's token",
        ))  # fmt: skip
    if raw is None:
        return None, denied(Decision(
            False, "assertion.missing",
            "the fleet credential speaks at a router only for a requester a host asserts",
        ))  # fmt: skip
    if not requester_may_use(head.path):
        return None, denied(Decision(
            False, "route",
            f"{head.path} is not open to requesters asserted by a host (the operator's only)",
        ))  # fmt: skip
    assertion = parse_assertion(raw)
    if isinstance(assertion, str):
        return None, denied(Decision(False, "assertion.malformed", assertion))
    try:
        row = await asyncio.to_thread(router.table.session_row, assertion.session_id)
    except FleetError as e:
        return None, _index_down(e)
    decision = check_assertion(assertion, row)
    if not decision.allowed or row is None:
        return None, denied(decision, hostId=assertion.host_id, requester=assertion.session_id)
    return requester_of(assertion, row), None


async def target_refused(
    router: Router, who: Requester, sid: str, head: http1.RequestHead
) -> bytes | None:
    """The 403 when ``who`` may not do what ``head`` asks of session ``sid``; None when it
    may, or when the index has no such session (the route then says so itself)."""
    try:
        row = await asyncio.to_thread(router.table.session_row, sid)
    except FleetError as e:
        return _index_down(e)
    if row is None:
        return None
    settings = router.settings
    action = action_of(head.method, head.path)
    decision = can_see(row_of(row), who, settings.visibility, settings.a2a, action)
    if decision.allowed:
        return None
    return denied(decision, session=sid, requester=who.session_key)
