"""A session's process tree as Tether owns it, read from ``/proc``: read-only, no signal.

The tree is what the lease proves: the owner (from its status snapshot), the keeper
(the run's subreaper), the agent and every descendant of the keeper, and the members of
the run's cgroup when it has one. A pid whose start time differs from the lease's is
not ours any more (the pid was reused) and is shown as such, never as the agent.
"""

from __future__ import annotations

from typing import Any, Final

from tether import _os
from tether._os import ProcessTable

MAX_PROCESSES: Final = 256  # a fork bomb's tree is summarised, not listed
CMDLINE_CHARS: Final = 240


def _describe(table: ProcessTable, pid: int, role: str) -> dict[str, Any] | None:
    try:
        stat = table.stat(pid)
        argv = table.cmdline(pid) if stat is not None else None
    except Exception:  # /proc unreadable or raced: report what we know
        return None
    if stat is None:
        return None
    command = b" ".join(argv or []).decode("utf-8", "replace")[:CMDLINE_CHARS]
    return {
        "pid": pid,
        "ppid": stat.ppid,
        "pgid": stat.pgid,
        "state": stat.state,
        "role": role,
        "comm": stat.comm.decode("utf-8", "replace"),
        "command": command,
        "starttime": stat.starttime,
    }


def _ours(table: ProcessTable, pid: int | None, starttime: int | None) -> bool:
    if not pid:
        return False
    if starttime is None:
        return True  # the live owner's own report: it is its child
    try:
        stat = table.stat(pid)
    except Exception:
        return False
    return stat is not None and stat.starttime == starttime


def process_tree(status: dict[str, Any], lease: Any) -> dict[str, Any]:
    """The session's processes: owner, keeper, agent, descendants and the cgroup.

    Args:
        status: the session's status snapshot (live owner or registry view).
        lease: its latest lease row, or None.
    """
    try:
        table = _os.current()
    except NotImplementedError:
        return {"supported": False, "processes": []}
    out: dict[str, Any] = {
        "supported": True,
        "leaseId": lease.lease_id if lease else None,
        "leaseState": lease.state if lease else None,
        "pgid": lease.pgid if lease else None,
        "cgroup": lease.cgroup_path if lease else None,
        "killMode": lease.kill_mode if lease else None,
        "processes": [],
        "truncated": False,
    }
    procs: list[dict[str, Any]] = out["processes"]
    seen: set[int] = set()

    def add(pid: int, role: str) -> None:
        if pid in seen or len(procs) >= MAX_PROCESSES:
            out["truncated"] = out["truncated"] or len(procs) >= MAX_PROCESSES
            return
        seen.add(pid)
        info = _describe(table, pid, role)
        if info is not None:
            procs.append(info)

    owner = status.get("ownerPid")
    if isinstance(owner, int):
        add(owner, "owner")
    live = lease is not None and lease.state in ("open", "closing")
    keeper = status.get("keeperPid") or (lease.keeper_pid if live else None)
    keeper_start = None if status.get("keeperPid") else (lease.keeper_starttime if lease else None)
    agent = status.get("agentPid") or (lease.root_pid if live else None)
    agent_start = None if status.get("agentPid") else (lease.starttime if lease else None)
    if isinstance(keeper, int) and _ours(table, keeper, keeper_start):
        add(keeper, "keeper")
    if isinstance(agent, int) and _ours(table, agent, agent_start):
        add(agent, "agent")
    # Descendants of the keeper (the subreaper: orphans of the tree land there).
    frontier = [keeper] if isinstance(keeper, int) and keeper in seen else []
    while frontier and len(procs) < MAX_PROCESSES:
        pid = frontier.pop(0)
        try:
            children = table.children(pid)
        except Exception:
            children = []
        for child in children:
            if child not in seen:
                add(child, "descendant")
                frontier.append(child)
    cgroup = out["cgroup"]
    if cgroup and live:
        try:
            members = table.cgroup_procs(cgroup)
        except Exception:
            members = []
        for pid in members:
            add(pid, "cgroup")
    return out
