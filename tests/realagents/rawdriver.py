"""A tiny raw NDJSON / JSON-RPC driver for probing real ACP agents from tests.

Deliberately independent of Tether's own client: it owns the child the way the runtime
must (own session/process group, stderr drained concurrently, deadlines on every read,
the whole group killed by the pgid *we* created while the leader is still unreaped, then
reaped), and it checks frames against the canonical schema:

- every frame the driver **sends** is validated against ``shared/acp/schema.json``
  (envelope ``ClientRequest``/``ClientNotification``/``ClientResponse`` plus the
  per-method ``$defs`` found by ``x-method``/``x-side``); an invalid one raises, because
  that would be our bug;
- every frame the agent sends is validated the same way (``Agent*`` envelopes), and
  problems are *collected* in ``invalid_received`` for the test to report.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tests.acp_schema import schema_errors

Frame = dict[str, Any]


@dataclass
class Received:
    frame: Frame
    at: float  # time.monotonic() when the line was read


class RawAgent:
    """One agent process driven over NDJSON stdio. Use as a context manager."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stderr_limit: int = 256 * 1024,
    ) -> None:
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        self.started_at = 0.0
        self.received: list[Received] = []
        self.invalid_received: list[tuple[Frame, list[str]]] = []
        self.non_json_lines: list[bytes] = []
        self.sent: list[Frame] = []
        self.exit_after_eof_s: float | None = None
        self.returncode: int | None = None
        self._stderr: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0
        self._stderr_limit = stderr_limit
        self._q: queue.Queue[Received | None] = queue.Queue()
        self._next_id = 0
        self._our_methods: dict[Any, str] = {}  # our request id -> method
        self._their_methods: dict[Any, str] = {}  # agent request id -> method
        self._threads: list[threading.Thread] = []
        self._write_lock = threading.Lock()
        self._stdout_closed = False

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> RawAgent:
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,  # its own session and process group: pgid == pid
        )
        self.pgid = self.proc.pid
        for target in (self._read_stdout, self._read_stderr):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __enter__(self) -> RawAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _leader_exited(self) -> bool:
        """Has the leader exited? Checked with WNOWAIT, so it stays unreaped."""
        assert self.proc is not None
        if self.proc.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def close(self, eof_grace_s: float = 3.0) -> None:
        """EOF on stdin, a grace for a clean exit, then SIGKILL the whole group, then reap.

        The group is signalled while the leader is still unreaped, so its pgid cannot have
        been recycled: the signal can only reach processes this driver started (and any
        they left in the group, e.g. codex-acp's native binary).
        """
        proc = self.proc
        if proc is None or self.pgid is None:
            return
        t0 = time.monotonic()
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        deadline = t0 + eof_grace_s
        while not self._leader_exited() and time.monotonic() < deadline:
            time.sleep(0.005)
        if self._leader_exited() and self.exit_after_eof_s is None:
            self.exit_after_eof_s = time.monotonic() - t0
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the whole group is gone already
        self.returncode = proc.wait(10)
        for t in self._threads:
            t.join(5)
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
        self.proc = None

    # -- readers ---------------------------------------------------------------------------

    def _read_stdout(self) -> None:
        assert self.proc is not None
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            at = time.monotonic()
            s = line.strip()
            if not s:
                continue
            try:
                frame = json.loads(s)
            except ValueError:
                self.non_json_lines.append(s[:500])
                continue
            if not isinstance(frame, dict):
                self.non_json_lines.append(s[:500])
                continue
            self._q.put(Received(frame, at))
        self._q.put(None)

    def _read_stderr(self) -> None:
        assert self.proc is not None
        assert self.proc.stderr is not None
        while True:
            chunk = self.proc.stderr.read1(65536)
            if not chunk:
                return
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size > self._stderr_limit and len(self._stderr) > 1:
                self._stderr_size -= len(self._stderr.popleft())

    @property
    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode(errors="replace")[-4000:]

    # -- sending ---------------------------------------------------------------------------

    def send(self, frame: Frame) -> None:
        answered = self._their_methods.get(frame["id"]) if "method" not in frame else None
        errs = schema_errors(frame, "client", answered)
        if errs:
            raise AssertionError(f"driver would send an invalid frame {frame}: {errs}")
        assert self.proc is not None
        assert self.proc.stdin is not None
        data = json.dumps(frame, separators=(",", ":")).encode() + b"\n"
        with self._write_lock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        self.sent.append(frame)

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        rid = self._next_id
        self._next_id += 1
        frame: Frame = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            frame["params"] = params
        self._our_methods[rid] = method
        self.send(frame)
        return rid

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        frame: Frame = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            frame["params"] = params
        self.send(frame)

    def respond(self, rid: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": rid, "result": result})

    def respond_error(self, rid: Any, code: int, message: str) -> None:
        self.send({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})

    # -- receiving -------------------------------------------------------------------------

    def next_frame(self, timeout: float) -> Frame:
        """The next frame from the agent; raises TimeoutError / EOFError."""
        try:
            item = self._q.get(timeout=max(0.0, timeout))
        except queue.Empty:
            raise TimeoutError(
                f"no frame within {timeout:.1f}s; stderr tail:\n{self.stderr_tail}"
            ) from None
        if item is None:
            self._q.put(None)  # stay at EOF for later readers
            raise EOFError(f"agent closed stdout; stderr tail:\n{self.stderr_tail}")
        self._note(item)
        return item.frame

    def _note(self, item: Received) -> None:
        frame = item.frame
        self.received.append(item)
        if "method" in frame and "id" in frame:
            self._their_methods[frame["id"]] = frame["method"]
            answered = None
        else:
            answered = self._our_methods.get(frame.get("id")) if "method" not in frame else None
        errs = schema_errors(frame, "agent", answered)
        if errs:
            self.invalid_received.append((frame, errs))

    def wait_for(self, pred: Callable[[Frame], bool], timeout: float) -> Frame:
        deadline = time.monotonic() + timeout
        while True:
            frame = self.next_frame(deadline - time.monotonic())
            if pred(frame):
                return frame

    def wait_response(self, rid: int, timeout: float) -> Frame:
        return self.wait_for(lambda f: "method" not in f and f.get("id") == rid, timeout)

    def call(self, method: str, params: dict[str, Any] | None, timeout: float) -> Frame:
        """Request and wait for its response (result or error frame)."""
        return self.wait_response(self.request(method, params), timeout)

    def drain(self, quiet_s: float = 0.2) -> list[Frame]:
        """Collect whatever arrives until ``quiet_s`` passes without a frame."""
        got = []
        with contextlib.suppress(TimeoutError, EOFError):
            while True:
                got.append(self.next_frame(quiet_s))
        return got

    # -- views -----------------------------------------------------------------------------

    def frames(self) -> list[Frame]:
        return [r.frame for r in self.received]

    def updates(self, kind: str | None = None) -> Iterator[dict[str, Any]]:
        for f in self.frames():
            if f.get("method") == "session/update":
                upd = f.get("params", {}).get("update", {})
                if kind is None or upd.get("sessionUpdate") == kind:
                    yield upd

    def agent_text(self) -> str:
        return "".join(
            u.get("content", {}).get("text", "") for u in self.updates("agent_message_chunk")
        )
