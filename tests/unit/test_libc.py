"""The C library's functions through ``_ctypes`` alone (tether._libc): they work, a
missing one is None, and giving memory back or capping arenas imports no ctypes --
its Python layer was ~0.4 MiB of every owner's private memory after its first trim."""

from __future__ import annotations

import os
import subprocess
import sys

from tether import _libc


def test_a_function_of_the_c_library_is_called_with_integers() -> None:
    getpid = _libc.function("getpid")
    assert getpid is not None
    assert getpid() == os.getpid()
    assert _libc.function("no_such_function_in_any_libc") is None


def test_giving_memory_back_and_one_arena_import_no_ctypes() -> None:
    code = (
        "import sys; from tether import _memory; _memory.one_arena(); "
        "_memory.give_back(freeze=True); print('ctypes' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.strip() == "False"
