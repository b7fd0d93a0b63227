"""The ``tether`` program and the keeper end their processes themselves once their work
is done (issue 23)."""

from __future__ import annotations

import atexit
import os
import sys
import threading

import pytest

from tether import program


class _Exited(Exception):
    """Stands in for ``os._exit`` (which would end the test process)."""


def _as_program(monkeypatch: pytest.MonkeyPatch, calls: list[str]) -> None:
    def fake_exit(code: int) -> None:
        calls.append(f"_exit {code}")
        raise _Exited

    monkeypatch.setattr(sys, "argv", ["tether", "--version"])
    monkeypatch.setattr(os, "_exit", fake_exit)
    # Never run the test process's own atexit functions: record the call instead.
    monkeypatch.setattr(atexit, "_run_exitfuncs", lambda: calls.append("atexit"))


def _single_threaded(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever threads (or coverage tracer) the test runner keeps, the program would
    # have none.
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(sys, "gettrace", lambda: None)
    monkeypatch.setattr(sys, "getprofile", lambda: None)


def test_the_program_runs_atexit_flushes_and_exits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the program, main() runs the atexit functions, flushes, then os._exit(code)."""
    calls: list[str] = []
    _as_program(monkeypatch, calls)
    _single_threaded(monkeypatch)
    with pytest.raises(_Exited):
        program.main()
    assert calls == ["atexit", "_exit 0"]
    assert capsys.readouterr().out.startswith("tether ")


def test_called_with_argv_main_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Called with an argv (in-process, a library's or a test's use), main() returns."""
    calls: list[str] = []
    _as_program(monkeypatch, calls)
    assert program.main(["--version"]) == 0
    assert calls == []


def test_another_thread_takes_the_normal_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread still running: main() returns its code, for the interpreter's own exit."""
    calls: list[str] = []
    _as_program(monkeypatch, calls)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, args=(30,))
    thread.start()
    try:
        assert program.main() == 0
    finally:
        stop.set()
        thread.join(30)
    assert calls == []


def test_stdout_that_cannot_be_flushed_takes_the_normal_way_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """stdout that fails to flush: leave() returns the code (the interpreter reports it)."""
    calls: list[str] = []
    _as_program(monkeypatch, calls)
    _single_threaded(monkeypatch)

    class Broken:
        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Broken())
    assert program.leave(3) == 3
    assert calls == ["atexit"]


def test_the_keeper_flushes_and_exits_without_the_interpreters_teardown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The keeper, its proof sent, flushes stdout and stderr and leaves through os._exit
    (its supervisor reaps it before answering a close: no teardown to wait for)."""
    from tether.supervise import keeper

    calls: list[str] = []

    class Stream:
        def __init__(self, name: str) -> None:
            self.name = name

        def flush(self) -> None:
            calls.append(f"flush {self.name}")

    def fake_exit(code: int) -> None:
        calls.append(f"_exit {code}")
        raise _Exited

    monkeypatch.setattr(sys, "stdout", Stream("stdout"))
    monkeypatch.setattr(sys, "stderr", Stream("stderr"))
    monkeypatch.setattr(os, "_exit", fake_exit)
    with pytest.raises(_Exited):
        keeper._leave(3)
    assert calls == ["flush stdout", "flush stderr", "_exit 3"]


def test_under_a_profiler_main_takes_the_normal_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a profiler (``python -m cProfile -o``, bench/run.py --profile), main()
    returns: the profiler writes its data at the interpreter's exit."""
    calls: list[str] = []
    _as_program(monkeypatch, calls)
    _single_threaded(monkeypatch)
    monkeypatch.setattr(sys, "getprofile", lambda: object())
    assert program.main() == 0
    assert calls == []
