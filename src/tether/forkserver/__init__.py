"""The owner fork server: small idle sessions for the HTTP gateway (issue 23, item 3).

Theory of operation
-------------------
Every session owner started as a fresh interpreter (``python -m tether.owner``) pays
for its own copy of the same ~250 modules: ~15 MiB of private memory per idle session,
almost all of it code and module state identical in every owner. The gateway, where
hundreds of sessions of one host live, instead starts one *fork server* beside it: a
fresh, single-threaded interpreter (``python -m tether.owner.fork_server FD``) that imports the
owner's modules once, freezes them out of the collector (``gc.freeze()``: a collection
in a forked owner then never writes to those pages, so they stay shared) and forks an
owner per request. An idle owner forked this way costs a few MiB of its own.

What does not change (:mod:`tether.owner_launch` keeps one caller-side logic):

* the readiness handshake: the caller's readiness pipe and stderr pipe reach the fork
  server by ``SCM_RIGHTS`` with the request; the forked owner says its line there, and
  ``busy``, the stderr tail and the deadline are handled by the caller as for an exec;
* the session lock: the forked owner takes it exactly as an exec'd one
  (:func:`tether.owner.daemon.serve`), so two racing starts still give one owner;
* detachment: the fork server's child ``setsid()``s and forks again, so the owner is
  nobody's child (not the fork server's, not the gateway's), in a session of its own,
  as an exec'd owner after its own second fork;
* nothing of the fork server or the gateway is left in the owner: the request socket
  and every fd but the readiness pipe and stdio are closed, signal dispositions and
  the signal mask reset, the environment replaced by the request's (the one
  ``spawn_owner_daemon`` builds for an exec), the working directory the caller's;
* the requester hint: ``/proc/<owner>/environ`` is the environment the *fork server*
  was exec'd with (a forked process cannot change it), so the fork server is exec'd
  with ``TETHER_OWNER_OF`` set (:data:`OWNER_MARKER`) -- what a killed keeper leaves
  re-parented to an owner is still seen as the agent's side (:mod:`tether.policy.access`).

The fork server is the gateway's child, on a ``SOCK_SEQPACKET`` socketpair (no socket
file, no peer to prove): it ends on EOF, i.e. when the gateway closes its end at
shutdown or dies in any way; at shutdown the gateway also waits for it and, past a
grace, kills it -- its own unreaped child, through the ``Popen`` it holds. Anything
wrong with it (dead, refused, silent past :data:`REPLY_TIMEOUT_S`) makes that one
start an exec (logged), and the gateway starts a new fork server on a later request.
The CLI and the library keep the exec path.

Wire (one datagram each way per request)::

    fork server -> gateway, once at start: {"hello": true, "pid": P}
    gateway -> fork server: {"key": K, "env": {...}, "cwd": D} + fds [ready_w, err_w]
    fork server -> gateway: {"ok": true} | {"ok": false, "error": "...", "refused": bool}

``refused`` means the request, not the fork server, was the problem (an environment
that would change what the preloaded modules read at import): the caller execs that
owner and keeps the fork server.

Rooms: :mod:`tether.owner.fork_server` (the fork server process, and the forked
child's setup: it runs owners, so it lives with them, below the gateway),
:mod:`~tether.forkserver.client` (the gateway's handle: start, the
launcher with its fallback, stop).
"""

from __future__ import annotations

#: TETHER_OWNER_OF's value in the fork server's exec'd environment (see above).
OWNER_MARKER = "fork-server"
#: The largest request: an environment is a few KiB; a SEQPACKET datagram must fit the
#: socket's buffer (about 200 KiB by default), so a larger one is exec'd instead.
MAX_REQUEST = 128 * 1024
#: How long a request may wait for the fork server's answer, its first hello included
#: (its imports: ~0.3 s on an idle machine, several seconds on a loaded CI box).
REPLY_TIMEOUT_S = 10.0
