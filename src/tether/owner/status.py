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
    from tether.supervise.runner import ExtinctionReport

__all__ = [
    "end_event",
    "hello_frame",
    "session_end_event",
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
        "watchers": len(owner.fanout.watches) if owner.fanout is not None else 0,
        "interactions": owner.interactions.pending(),
        "counters": _counters(owner),
        "rateLimit": owner.runner.rate_limit.snapshot(),
        # usage_update / session_info_update: context use, cost, title (issue 14)
        "sessionInfo": owner.slot.session_info.snapshot(),
        # The live agent session's modes and config options, as set since (tether acp
        # answers session/load and resume with them without queueing behind a turn).
        "agentSession": {
            k: live.session_result[k]
            for k in ("modes", "configOptions")
            if live is not None and alive and live.session_result.get(k) is not None
        },
    }


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
    return {
        "reason": outcome,
        "terminatedBy": "agent" if end.by_agent else "daemon",
        "message": f"agent run ended: {report.reason}"
        + (f" ({stop_reason})" if not end.by_agent and stop_reason else ""),
        "exitCode": code,
        "signal": report.exit_signal,
        "stderrTail": report.stderr_tail[-2000:],
        "leaseId": end.lease_id,
        "survivors": list(report.survivors),
        "killMode": report.mode,
        "escaped": list(report.escaped),
    }


def session_end_event(report: ExtinctionReport | None, *, generation: int | None) -> dict[str, Any]:
    """The one ``session_ended`` record of a session closed through its owner."""
    return {
        "reason": "closed",
        "terminatedBy": "daemon",
        "message": "the session was closed",
        "agentWasRunning": report is not None,
        "survivors": list(report.survivors) if report else [],
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
        "killMode": report.mode if report else None,
        "teardownMs": report.elapsed_ms if report else 0.0,
        "agentWasRunning": report is not None,
        "exitCode": event.get("exitCode"),
    }
