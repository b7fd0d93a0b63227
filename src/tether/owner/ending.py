"""How a session ends through its owner: recorded once, told to everyone, then answered.

On ``close`` the owner, after the agent tree is proven gone, records the session's one
``session_ended`` event, broadcasts it to every connected caller, and only then sends
the terminal frames it held back: ``SESSION_CLOSED`` to a prompter whose turn the close
superseded (so it sees ``session_ended`` first), and the proof to the closer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tether.errors import SessionClosed
from tether.owner.status import session_end_event, terminate_fields, terminate_result

if TYPE_CHECKING:
    from tether.owner.agent_slot import RunEnd
    from tether.owner.job import Job
    from tether.owner.server import IpcServer

__all__ = ["end_session"]


def end_session(
    record: Callable[[str, dict[str, Any]], object],
    server: IpcServer,
    key: str,
    *,
    generation: int,
    end: RunEnd | None,
    superseded: list[Job],
    closer: Job | None,
    terminated_by: dict[str, Any] | None = None,
    discarded: bool | None = None,
) -> None:
    """Record the session's end once (in its journal, through ``record``), tell every
    caller, then answer the held requests.

    ``terminated_by`` (who asked) marks a terminate (seed 004): the record says
    ``terminated`` with the run's exit code and stderr, and the terminator's answer is
    ``{terminated: true, reason, terminatedBy, ...}``.
    """
    report = end.report if end is not None else None
    event = session_end_event(report, generation=generation)
    if terminated_by is not None:
        event.update(terminate_fields(report, terminated_by))
    elif closer is not None and closer.outbox.peer:
        event["closedBy"] = closer.outbox.peer
    record("session_ended", event)
    server.broadcast({"type": "session_ended", "requestId": None, "event": event})
    how = "closed" if terminated_by is None else "terminated"
    for job in superseded:
        job.finish_superseded(SessionClosed(f"the session was {how} while this request ran"))
    if closer is not None and terminated_by is not None:
        closer.finish(terminate_result(key, event, report))
    elif closer is not None:
        closer.finish(
            {
                "action": "session_closed",
                "sessionKey": key,
                "survivors": event["survivors"],
                "unproven": event.get("unproven", []),
                "killMode": report.mode if report else None,
                "teardownMs": report.elapsed_ms if report else 0.0,
                "agentWasRunning": report is not None,
                **({"stateError": closer.state_error} if closer.state_error else {}),
                **({"stateErrorCode": closer.state_error_code} if closer.state_error_code else {}),
                # close --discard: whether the agent deleted its session (session/delete)
                **({"discarded": discarded} if discarded is not None else {}),
            }
        )
