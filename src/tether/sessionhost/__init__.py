"""Session hosts: several sessions' owners in one process (issue 23; opt-in, off by default).

Theory of operation
-------------------
One owner process per session pays, per turn, for a cold process: a hundred sessions
prompted at once are a hundred interpreters each paging its own copy of the same hot
code back in (measured: an owner's CPU per turn doubles after a 50 ms pause, and a
hundred sessions prompted round-robin cost what the same hundred prompted at once).
A *session host* (``python -m tether.owner.host FD PER_HOST``) runs up to ``PER_HOST``
owners on one event loop instead: the same :class:`tether.owner.compose.Owner`, started
by the same :func:`tether.owner.daemon.run_owner`, so what one owner guarantees each
hosted owner still does:

* **the session lock**: each hosted owner takes its session's ``flock`` (a lock of one
  open file description: two owners of one session in one host exclude each other as
  two processes do) and binds the session's own socket; callers connect to it exactly
  as to an owner of its own process;
* **the tree**: each run still has its keeper, which ends the agent's tree when its
  owner lets go -- a hosted owner's teardown ends its run with proof as a solo owner's
  does, and one whose teardown failed lets go of its keeper's channel (EOF: the keeper
  ends everything, as on its supervisor's death). The host is the subreaper of last
  resort for all its runs (:mod:`tether.supervise.adoption`): it starts no process but
  keepers, so a child that is not a keeper of its is still provably the agents';
* **the end, once, with its reason**: a session closed, terminated or retired (idle
  TTL) ends its owner, not the host; the host ends as soon as its last owner has (the
  launcher starts another when it needs one), and one the launcher let go of before
  any start ends at once;
* **fencing**: the host is the recorded owner pid of each of its sessions, with its
  start time and boot id. A host silent past a session's ``unresponsive_after`` is
  silent for all of them (they beat from threads of one process); fencing it ends
  every hosted session's owner, and each is told ``owner-lost`` by the fence
  (:mod:`tether.owner_fence`): nothing a per-session call decides ever signals a host.

What changes: a host's log (``logs/host-PID.log``) gets what no session's task
logged; each hosted owner's lines still go to its session's log. ``ownerPid`` of a
hosted session is its host's pid. The environment: an owner's environment is its
process's, so a host serves only starts whose environment is its own (bar the
``TETHER_OWNER_OF`` hint); any other start gets a host of its own environment.

The launcher side (:mod:`~tether.sessionhost.client`, the gateway's with
``serve --session-hosts N``) places each owner start on the first host with room,
starts a host when none has, and execs the owner when a host fails. It never signals
a host: it only stops offering it work.

Wire (one ``SOCK_SEQPACKET`` datagram each way per request, as the fork server's)::

    host -> launcher, once at start: {"hello": true, "pid": P}
    launcher -> host: {"key": K, "env": {...}} + fds [ready_w, err_w]
    host -> launcher: {"ok": true, "sessions": N}
                    | {"ok": false, "full": true} | {"ok": false, "retiring": true}
                    | {"ok": false, "refused": true, "error": "..."}
"""

from __future__ import annotations

#: TETHER_OWNER_OF's value in a host's exec'd environment (see tether.policy.access).
OWNER_MARKER = "session-host"
#: The largest request (an environment is a few KiB; see tether.forkserver).
MAX_REQUEST = 128 * 1024
#: How long a request may wait for a host's answer, its first hello included.
REPLY_TIMEOUT_S = 10.0


def environment_id(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """What of an owner's environment a host must share with it: all of it, bar the
    per-session requester hint."""
    return tuple(sorted((k, v) for k, v in env.items() if k != "TETHER_OWNER_OF"))
