"""asyncio without ``ssl``, for a process that never speaks TLS: the session owner.

asyncio imports ``ssl`` at its own import (for TLS transports), and with it OpenSSL's
module state: about 0.9 MiB of private memory (PSS) and 1.4 MiB RSS in every owner
process (``bench/idle_memory.py``, issue 23). An owner talks to its agent over pipes
and to its callers over a Unix socket, never TLS, so its entry points
(``python -m tether.owner``, the owner fork server) import asyncio with ``ssl``
hidden: asyncio then records "no ssl" (as on a Python built without it) and any TLS
transport in that process fails. ``ssl`` itself stays importable afterwards.
"""

from __future__ import annotations

import sys


def import_asyncio_without_ssl() -> None:
    """Import asyncio, without ``ssl`` unless something imported it already."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # makes `import ssl` fail
    try:
        import asyncio  # noqa: F401 -- imported for its side effect
    finally:
        if sys.modules.get("ssl", 0) is None:
            del sys.modules["ssl"]
