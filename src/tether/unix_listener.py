"""A private Unix-socket listener: the gateway's ``--unix`` and a fleet host's agents'
door bind the same way.

A file already at the path is taken over only when it is a socket nobody listens on (a
server that died left it); a live one, or anything that is not a socket, is a usage
error naming the path. The socket is created under a 0177 umask and left 0600: only
this user connects.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat

from tether.errors import UsageError

__all__ = ["bind_private"]


def bind_private(path: str, *, backlog: int, what: str) -> socket.socket:
    """A listening socket at ``path``; ``what`` names it in errors (``--unix PATH``)."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise UsageError(f"{what}: {path} exists and is not a socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # left by a server that died: nobody listens there
            else:
                raise UsageError(f"{what}: another server listens at {path}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError as e:
        sock.close()
        raise UsageError(f"{what}: cannot listen at {path}: {e.strerror or e}") from None
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(backlog)
    return sock
