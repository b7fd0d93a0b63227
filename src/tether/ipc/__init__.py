"""IPC protocol v2 between callers and session owners (see :mod:`tether.ipc.protocol`)."""
