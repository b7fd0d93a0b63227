"""The C library's functions, called through ``_ctypes`` alone.

Tether calls a handful of them -- ``prctl`` (the keeper, the owner), ``malloc_trim`` and
``mallopt`` (memory given back) -- always with integer arguments. ctypes' Python layer
(its classes, ``struct``) costs a process ~0.4 MiB of private memory for that, and there
is a keeper and an owner per session; its C module does the calls on its own. Where it
cannot (another platform, another interpreter), ctypes itself does. Nothing is imported
until a function is looked up.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # the keeper imports this module: no typing
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["function"]


def function(name: str) -> Callable[..., int] | None:
    """The C library's ``name``, to call with integers; None where there is none."""
    try:
        import _ctypes

        # None: the running program and its libraries (typeshed wants a path).
        address = _ctypes.dlsym(_ctypes.dlopen(None, os.RTLD_NOW), name)  # type: ignore[arg-type]
        call = getattr(_ctypes, "call_function")  # noqa: B009 - not in typeshed
    except (ImportError, AttributeError, OSError):
        return _through_ctypes(name)

    def through_ctypes_module(*args: int) -> int:
        return int(call(address, args))

    return through_ctypes_module


def _through_ctypes(name: str) -> Callable[..., int] | None:
    try:
        import ctypes

        found = getattr(ctypes.CDLL(None), name)
    except (ImportError, AttributeError, OSError):
        return None

    def through_ctypes(*args: int) -> int:
        return int(found(*args))

    return through_ctypes
