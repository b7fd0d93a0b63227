"""``tether serve``: the HTTP gateway (JSON API, Server-Sent Events, a dashboard at /ui).

Theory of operation
-------------------
The gateway is one more front door over :mod:`tether.operations`: every handler checks
its input, runs the one blocking operation in a thread and answers JSON or a problem
document. It keeps no session state of its own -- records come from the registry,
snapshots from the owners, events from the journal -- so restarting it loses nothing
and two gateways on one ``TETHER_HOME`` are safe.

Rooms:

* :mod:`~tether.serve.command` -- the CLI command: bind, announce, run uvicorn;
* :mod:`~tether.serve.serving` -- uvicorn with our signal handling, and what a stop
  releases (the socket, a Unix socket file still ours, the owner fork server);
* :mod:`~tether.serve.auth` -- the bearer token (generated into the home, 0600) and
  the bind rules (non-loopback needs an explicit token);
* :mod:`~tether.serve.app` -- the ASGI app: authentication, problem documents, the
  route table (where the ACP door and questions mount their routes);
* :mod:`~tether.serve.bodies` -- request bodies checked against declarative specs;
* :mod:`~tether.serve.problems` -- Tether's errors as ``application/problem+json``;
* :mod:`~tether.serve.sessions_api`, :mod:`~tether.serve.events_api`,
  :mod:`~tether.serve.system_api` -- the handlers;
* :mod:`~tether.serve.creating` -- a session's creation over HTTP (its fleet id too);
* :mod:`~tether.serve.stream` -- SSE: one journal follower per session, a bounded ring,
  per-client cursors, ``lagged`` for clients that fall behind;
* :mod:`~tether.serve.procs` -- a session's process tree, read-only from ``/proc``;
* ``ui/`` -- the dashboard: plain HTML, CSS and JavaScript, no build step.

Starlette and uvicorn come with the ``serve`` extra and are imported only here; the
CLI imports this package only for ``tether serve``.
"""
