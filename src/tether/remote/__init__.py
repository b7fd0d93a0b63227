"""A remote Tether: a gateway (``tether serve``) or a fleet router, over its HTTP API.

Three layers, as in h11/httpcore:

* :mod:`tether.remote.core` -- no I/O: where a URL points (``http://``, ``https://``,
  ``unix:/abs/path.sock``), each call of the HTTP API as a :class:`~.core.Request`, an
  answer turned into its JSON or into the very :class:`~tether.errors.TetherError` the
  server raised (:func:`tether.errors.error_from_wire`, the one mapping); with
  :mod:`tether.remote.http11` (HTTP/1.1 framing) and :mod:`tether.remote.sse` (a
  Server-Sent Events decoder keeping the cursor a resumed stream starts from), no I/O
  either;
* :mod:`tether.remote.transport` -- blocking I/O with the standard library only
  (``socket``; ``ssl`` for ``https`` alone): where foreign errors become Tether's
  (a refused connection is :class:`~tether.errors.ServerUnreachable`);
* :mod:`tether.remote.client` -- the two together: calls, and an event stream followed
  across dropped connections (``Last-Event-ID``).

The CLI's ``--server`` commands (:mod:`tether.cli._remote`) use the blocking client; an
async client can drive the same core over its own transport.
"""

from __future__ import annotations
