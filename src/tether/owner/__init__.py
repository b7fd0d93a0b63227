"""The session owner: one detached process per active session that keeps the agent warm.

Theory of operation
-------------------
A caller that finds no live owner starts one as a fresh interpreter
(``python -m tether.owner KEY READY_FD``; never ``fork()`` of a process running a loop)
and waits for its readiness line under a deadline. The owner:

1. takes an exclusive ``flock`` on the session's lock file and holds it for its whole
   life -- the kernel releases it on any death, so "lock free" means "no owner", and two
   racing starters produce exactly one owner (the loser reports ``busy`` and exits);
2. increments the owner generation in the registry, binds the session's Unix socket
   (0600, in a 0700 directory), reconciles its session's leftover leases (a previous
   owner may have been SIGKILLed), and only then reports ready;
3. serves IPC v2 (see :mod:`tether.ipc.protocol`): ``status`` and ``cancel`` at once,
   ``prompt`` / ``set_mode`` / ``set_config_option`` / ``start_agent`` in strict FIFO
   order (depth bounded; beyond it a retryable ``QUEUE_OVERLOADED``), ``close`` by
   shutting down, ``terminate`` (the operator's immediate end, seed 004) by shutting
   down with the agent's tree ended at once -- no ``session/cancel``, no
   ``session/close``, no grace but the keeper's own TERM -> KILL -- and the end
   recorded ``terminated``;
4. starts the agent lazily on the first request that needs it, through the supervisor
   (keeper + lease), and keeps it warm across turns;
5. shuts down on close, idle TTL, max lifetime, a fatal error, SIGTERM, SIGINT or
   SIGHUP: stop admitting, cancel the active turn, give every waiting caller a terminal
   error, tear the agent tree down and prove it gone, record its end, release socket
   and lock, record the final status. The signal handlers stay installed until that
   cleanup has finished (acpx's §8.1 defect was removing them first).

Every request gets exactly one terminal frame (``Job.finish``), whatever happens.

One room per job:

========================  =====================================================  =====
module                    job                                                    I/O
========================  =====================================================  =====
``daemon``                ``python -m tether.owner``: detach, readiness, run     yes
``lock``                  the session flock, socket bind and unlink              yes
``server``                IPC connections: hello, bounded lines, parse, admit    yes
``gate``                  who the IPC peer is (SO_PEERCRED), and may it do this  yes
``job``                   one admitted request; per-connection output (Outbox)   yes
``admission``             the queue carried out: answers, expiry timer, cancel   yes
``queue``                 the FIFO: depth limit, deadlines, cancel, expiry       no
``lifecycle``             starting/idle/running/stopping/stopped; TTL, lifetime  no
``agent_slot``            ensure the agent, replay mode/config, watch, end a run yes
``agent_jobs``            running prompt / set_mode / set_config_option /        yes
                          start_agent (fork, --resume-session: the agent now)
``session_info``          the agent's usage_update / session_info_update        no
``heartbeat``             heartbeat, status row and kept metrics, from a thread  yes
``state_watch``           state.db removed/replaced under us: stop, from a thread yes
``memory``                a burst's memory given back once idle (malloc_trim)    yes
``status``                the status snapshot, the run-end record                no
``ending``                a session's end: recorded once, broadcast, answered    yes
``teardown``              how the owner ends (close/terminate) and its shutdown  yes
``settings``              the owner's settings from the session's options        no
``questions``             questions for a human: offered to controllers, answers yes
``question_table``        a question's table: open -> resolved, first answer   no
``answers``               what an answer means (ACP results); always-answers     no
``relays``                the agent's fs/terminal requests relayed to a client   yes
``dispatch``              one request: answered at once, queued, or refused      yes
``retirement``            the idle TTL / max lifetime timer (policy: lifecycle)  yes
``journaling``            the journal this owner writes, and its watchers        yes
``job_wait``              the FIFO's wait for a request, cut short by shutdown   yes
``compose``               :class:`Owner`: the thin composition and FIFO loop     yes
``host``                  ``python -m tether.owner.host``: a session host, many  yes
                          owners on one loop (:mod:`tether.sessionhost`)
``host_logs``             a host's lines, each to its session's log              yes
``hosting``               what a host's owners share: one trim, one state watch  no
========================  =====================================================  =====
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.owner.compose import Owner
    from tether.owner.settings import OwnerSettings

__all__ = ["Owner", "OwnerSettings"]


def __getattr__(name: str) -> object:
    # Lazy: `python -m tether.owner` imports this package before its __main__, which
    # must run before anything imports asyncio (tether._nossl).
    if name == "Owner":
        from tether.owner.compose import Owner

        return Owner
    if name == "OwnerSettings":
        from tether.owner.settings import OwnerSettings

        return OwnerSettings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
