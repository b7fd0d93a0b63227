"""What the owner reports: its status snapshot, and the record of an agent run's end."""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any

from tether.ipc import protocol

if TYPE_CHECKING:
    from tether.owner.agent_slot import RunEnd
    from tether.owner.compose import Owner
    from tether.owner.job import Job
    from tether.supervise.runner import ExtinctionReport

__all__ = [
    "attached",
    "end_event",
    "hello_frame",
    "journal_condition",
    "session_end_event",
    "state_error",
    "status_snapshot",
    "terminate_fields",
    "terminate_result",
]


def hello_frame(owner: Owner) -> dict[str, Any]:
    """The owner's first frame on every connection (IPC v2's ``hello``)."""
    return {
        "type": "hello",
        "v": protocol.VERSION,
        "generation": owner.generation,
        "ownerPid": os.getpid(),
        "sessionKey": owner.key,
        # A stopping owner (idle TTL, close, signal) rejects new work: a caller that
        # sees this waits for it to go and starts a new one.
        "stopping": owner.stopping,
        "features": ["relay"],  # v2 additions this owner understands (ipc.protocol)
        # The largest agent frame it relays: callers accept lines this long (plus wrapping).
        "frameMaxBytes": owner.settings.agent_frame_bytes,
        # What is journaled so far: a door orders its own turn after these (acp_door).
        "journalSeq": owner.journal.last_seq if owner.journal is not None else None,
        # One of a session host's owners (tether.sessionhost): gone when its lock is let
        # go and our connection closed, while its process serves other sessions on.
        **({"hosted": True} if owner.hosted else {}),
    }


def status_snapshot(owner: Owner) -> dict[str, Any]:
    """The ``status`` answer of a live owner (the documented keys, always present)."""
    live = owner.slot.live
    active = owner.active
    lease_state = None
    if live is not None:
        lease = owner.registry.lease(live.proc.lease_id)
        lease_state = lease.state if lease else None
    alive = live is not None and live.alive
    return {
        "action": "status_snapshot",
        "status": "running" if active is not None else "idle",
        "ownerPid": os.getpid(),
        "ownerGeneration": owner.generation,
        "uptimeS": round(time.time() - owner.started_at, 3),
        "queueDepth": len(owner.queue),
        "currentRequest": active.request_id if active else None,
        "currentKind": active.kind if active else None,
        "lastPromptTime": owner.runner.last_prompt_at,
        "agentPid": live.proc.pid if live is not None and alive else None,
        "keeperPid": live.proc.keeper_pid if live is not None and alive else None,
        "leaseId": live.proc.lease_id if live is not None else None,
        "leaseState": lease_state,
        "acpSessionId": live.session_id if live is not None else owner.session.acp_session_id,
        "agentConnected": alive,
        "sessionKey": owner.key,
        "stopping": owner.stopping,
        "journalSeq": owner.journal.last_seq if owner.journal is not None else None,
        # A disk that refuses the journal's writes (STATE_FULL): stated, never a hang.
        "stateError": state_error(owner),
        "watchers": len(owner.fanout.watches) if owner.fanout is not None else 0,
        "attached": attached(owner),  # who: each watcher's and controller's pid, uid, door
        "interactions": owner.questions.pending(),
        # Tether's counters are kept for all sessions together (`tether metrics`), not
        # per session: named for what they are, so nobody reads them as this session's.
        "globalCounters": _counters(owner),
        "rateLimit": owner.runner.rate_limit.snapshot(),
        # usage_update / session_info_update: context use, cost, title (issue 14)
        "sessionInfo": owner.slot.session_info.snapshot(),
        # The live agent session's modes and config options, as set since (tether acp
        # answers session/load and resume with them without queueing behind a turn).
        # What this owner goes by: the settings every door builds from one table
        # (tether.operations.settings), as the owner read them.
        "settings": owner.settings.effective(),
        "agentSession": {
            k: live.session_result[k]
            for k in ("modes", "configOptions")
            if live is not None and alive and live.session_result.get(k) is not None
        },
    }


def attached(owner: Owner) -> list[dict[str, Any]]:
    """The session's watchers and controllers: one item per request (a ``watch
    --control`` is both), with the peer's pid and uid as the kernel gave them
    (``SO_PEERCRED``) and the door it named (``cli``, ``http``, ``acp``, ``library``)."""
    parties: dict[int, dict[str, Any]] = {}

    def add(job: Job, role: str) -> None:
        item = parties.get(id(job))
        if item is None:
            door = job.env.payload.get("client")
            item = parties[id(job)] = {
                "pid": job.outbox.peer.get("pid"),
                "uid": job.outbox.peer.get("uid"),
                "door": door[:40] if isinstance(door, str) and door else None,
                "roles": [],
            }
        item["roles"].append(role)

    watches = owner.fanout.watches if owner.fanout is not None else ()
    for watch in watches:
        if not watch.ended and not watch.job.outbox.detached:
            add(watch.job, "watcher")
    for job in owner.questions.controllers():
        add(job, "controller")
    return list(parties.values())


def state_error(owner: Owner) -> dict[str, Any] | None:
    """The journal's storage condition: None while it stores, else the error's code,
    message and how many entries were given up so far (each run recorded in the journal
    by a ``journal_gap`` record once the disk takes writes again)."""
    journal = owner.journal
    if journal is None or journal.failure is None:
        return None
    return {
        "code": journal.failure.detail_code,
        "message": journal.failure.message,
        "droppedEntries": journal.dropped,
    }


def journal_condition(owner: Owner, job: Job | None = None) -> None:
    """Tell the turn's caller how the journal's storage is (``job``: a turn that is
    starting, told only while the disk fails; None: the condition just changed)."""
    journal = owner.journal
    current = job or owner._current_prompt()
    if journal is None or current is None or (job is not None and journal.failure is None):
        return
    error = state_error(owner)
    if error is not None:
        notice: dict[str, Any] = {"action": "state_error", **error}
        message = (
            f"{error['code']}: {error['message']} The turn goes on; what cannot be stored"
            " is dropped and recorded as lost in the journal."
        )
    else:
        notice = {"action": "state_recovered", "droppedEntries": journal.dropped}
        message = f"the state database takes writes again ({journal.dropped} entries were lost)"
    current.send(
        {"type": "notice", "requestId": current.request_id, "notice": notice, "message": message}
    )


def _counters(owner: Owner) -> dict[str, int]:
    with contextlib.suppress(Exception):
        counters: dict[str, int] = owner.registry.counters()
        return counters
    return {}


def end_event(end: RunEnd, *, stop_reason: str) -> dict[str, Any]:
    """The event recording how one agent run ended."""
    report = end.report
    code = report.exit_code
    outcome = ("completed" if code == 0 else "error") if end.by_agent else "terminated"
    if report.escaped:
        # Seed 003: a descendant left the run's boundary -- the run failed, whatever
        # its root's exit code (it was still reaped under the lease).
        outcome = "error"
    by_agent = end.by_agent
    message = f"agent run ended: {report.reason}" + (
        f" ({stop_reason})" if not by_agent and stop_reason else ""
    )
    if report.lease_stolen:
        # Issue 20, item 6: the SIGTERM the root died of came from the supervisor that
        # stole our lapsed lease, not from the agent: tell the thief's story, not ours.
        outcome, by_agent = "terminated", False
        message = "agent run ended: another supervisor took over its lapsed lease and ended it"
    return {
        "reason": outcome,
        "terminatedBy": "agent" if by_agent else "daemon",
        "message": message,
        "exitCode": code,
        "signal": report.exit_signal,
        "stderrTail": report.stderr_tail[-2000:],
        "leaseId": end.lease_id,
        "survivors": list(report.survivors),
        "killMode": report.mode,
        "escaped": list(report.escaped),
        # Marker carriers not proven members of the run: reported, never signalled
        "unproven": list(report.unproven),
        **({"leaseStolen": True} if report.lease_stolen else {}),
    }


def session_end_event(report: ExtinctionReport | None, *, generation: int | None) -> dict[str, Any]:
    """The one ``session_ended`` record of a session closed through its owner."""
    return {
        "reason": "closed",
        "terminatedBy": "daemon",
        "message": "the session was closed",
        "agentWasRunning": report is not None,
        "survivors": list(report.survivors) if report else [],
        "unproven": list(report.unproven) if report else [],
        "ownerGeneration": generation,
    }


def terminate_fields(report: ExtinctionReport | None, by: dict[str, Any]) -> dict[str, Any]:
    """What a terminate adds to the ``session_ended`` record (seed 004's fields)."""
    return {
        "reason": "terminated",
        "terminatedBy": "daemon",
        "message": "the session was terminated"
        + (f" (agent tree ended: {report.mode})" if report is not None else ""),
        "exitCode": report.exit_code if report is not None else None,
        "signal": report.exit_signal if report is not None else None,
        "stderr": report.stderr_tail[-2000:] if report is not None else "",
        "requestedBy": by,
    }


def terminate_result(
    key: str, event: dict[str, Any], report: ExtinctionReport | None
) -> dict[str, Any]:
    """The answer to a ``terminate`` request that ended the session now."""
    return {
        "action": "session_terminated",
        "terminated": True,
        "reason": event["reason"],
        "terminatedBy": event["terminatedBy"],
        "alreadyEnded": False,
        "sessionKey": key,
        "survivors": event["survivors"],
        "unproven": event.get("unproven", []),
        "killMode": report.mode if report else None,
        "teardownMs": report.elapsed_ms if report else 0.0,
        "agentWasRunning": report is not None,
        "exitCode": event.get("exitCode"),
    }
