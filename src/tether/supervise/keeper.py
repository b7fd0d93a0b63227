"""The keeper: a tiny process between a supervisor and the agent it runs.

Theory of operation
-------------------
A supervisor (``tether exec`` or a session owner) never forks an agent itself. It
starts ``python -m tether.supervise.keeper`` with the agent's stdio pipes as the
keeper's own fds 0/1/2 and one end of a socketpair as a control channel. The keeper:

1. makes itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``), so every
   descendant of the agent -- including ones that ``setsid``, double-fork or clear
   their environment -- is reparented to the keeper, never to init;
2. arms ``PR_SET_PDEATHSIG`` and opens a pidfd on its supervisor, and also treats
   EOF on the control channel as the supervisor's death. Three independent signals,
   because each has a hole: pdeathsig follows the forking *thread*, a pidfd needs the
   pid to still be the supervisor when opened (we check ``getppid()`` right after),
   and EOF needs nobody else to hold the socket;
3. forks the agent into its own session and process group (and its cgroup, where the
   supervisor made one), then drops its own copies of the stdio pipes so that the
   supervisor sees EOF when the agent's side closes;
4. keeps the agent root *unreaped* after it exits (``waitid(WNOWAIT)``), which pins
   its pid and therefore its process-group number: ``killpg`` can never hit a
   recycled group while we hold the zombie;
5. on ``terminate`` (or the supervisor's death, or a termination signal): SIGTERM to
   the group, to every descendant and to every cgroup member -- once per process,
   skipping whom an earlier way reached (:mod:`.keeper_signals`); wait one grace
   period, returning early the moment the tree is empty; then SIGKILL (``cgroup.kill``
   first where available) and walk-kill-reap until nothing but the root's zombie is
   left; reap the root; and only when ``waitpid(-1)`` raises ``ECHILD`` -- the proof
   that no descendant is left -- report ``extinct`` and exit.

The keeper decides no policy. Sessions, timeouts and ownership belong to the
supervisor; the keeper only knows "start this", "end everything, with this grace"
and "my supervisor is gone, so end everything with the default grace".

Control protocol (NDJSON over the socketpair). Keeper -> supervisor::

    {"event":"spawned","pid":P,"pgid":P,"starttime":T,"keeper_pid":K,"cgroup":path|null}
    {"event":"spawn-failed","errno":E,"message":"..."}
    {"event":"exited","pid":P,"code":C|null,"signal":S|null}
    {"event":"extinct","mode":"cgroup|subreaper","signalled":N,"escalated":bool,"elapsed_ms":F,
     "escaped":[pid,...]}

Supervisor -> keeper::

    {"cmd":"terminate","grace_ms":G}

``escaped`` lists descendants found outside the run's boundary (seed 003, "Child and
Grandchild Rules") while the keeper walked its tree: with a cgroup, a process that
moved itself out of the run's cgroup; without one, a process in neither the run's
process group nor its session (it ``setsid``-ed away). Being our descendant, such a
process is still signalled and reaped here -- the subreaper catches what the group
and the cgroup lost -- and the supervisor marks the run ``ownership-escape``.

What the keeper knows of the processes below it -- the root, its descendants, who left
the boundary, which signal already reached whom -- is :class:`.keeper_tree.KeeperTree`;
this module is the process: the control channel, the spawn, the loop and the stop.

This module is on the cold path of every agent start, so it imports only the
standard library modules it needs and Tether's dependency-free ``_fastjson`` (no
asyncio, no ``json``/``re``).
"""

from __future__ import annotations

import errno
import os
import select
import sys
import time

from tether._fastjson import dumps as _dumps
from tether._fastjson import loads as _loads
from tether.supervise.keeper_tree import KeeperTree, read_stat

TYPE_CHECKING = False  # typing, re and enum cost the keeper ~1 MiB; mypy reads the name
if TYPE_CHECKING:
    import signal
    from typing import NoReturn
else:  # the C module: `signal` wraps it in enums (enum, functools, collections)
    import _signal as signal

# The platform layer, chosen once at import. It is not tether._os: that package costs
# more to import than the whole keeper (see _keeper_linux's docstring).
if sys.platform.startswith("linux"):
    from tether.supervise import _keeper_linux as _plat
else:  # pragma: no cover - a port adds its module here (docs/platforms.md)
    raise ImportError(f"the keeper has no platform layer for {sys.platform}")

# Signals that ask the keeper to end its tree (forwarded, then escalated).
_TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Keeper:
    """One agent run's keeper; see the module docstring."""

    def __init__(
        self,
        argv: list[str],
        *,
        supervisor_pid: int,
        control_fd: int,
        default_grace: float,
        cgroup: str | None,
        pty: bool = False,
    ) -> None:
        self.argv = argv
        self.pty = pty
        self.supervisor_pid = supervisor_pid
        self.control = control_fd
        self.default_grace = default_grace
        self.cgroup = cgroup
        self.tree = KeeperTree(cgroup, self.send)  # the root, its descendants, the boundary
        self.escalated = False
        self._control_buf = b""
        self._wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wake_w = wake_w
        self._pending_signals: list[int] = []

    # --- plumbing -----------------------------------------------------------------

    def send(self, event: dict[str, object]) -> None:
        data = (_dumps(event) + "\n").encode()
        try:
            os.write(self.control, data)
        except OSError:
            pass  # supervisor gone: nobody to tell, the teardown goes on regardless

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._pending_signals.append(signum)

    def install_signals(self) -> None:
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in (*_TERMINATION_SIGNALS, signal.SIGCHLD):
            signal.signal(sig, self._on_signal)

    def _drain_wakeups(self) -> list[int]:
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass
        sigs, self._pending_signals = self._pending_signals, []
        return sigs

    # --- spawning -----------------------------------------------------------------

    def spawn(self) -> bool:
        """Fork and exec the agent root; report ``spawned`` (or ``spawn-failed``)."""
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # the agent, between fork and exec
            self._exec_agent(err_r, err_w)
        os.close(err_w)
        report = b""
        while chunk := os.read(err_r, 1024):
            report += chunk
        os.close(err_r)
        if report:
            code, _, message = report.decode(errors="replace").partition(":")
            # The child already exited: reap it so nothing is left, then report.
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            self.send({"event": "spawn-failed", "errno": int(code or 0), "message": message})
            return False
        self.tree.set_root(pid)
        st = read_stat(pid)
        # Drop our copies of the agent's stdio so the supervisor sees EOF when the agent
        # side closes; the keeper itself never reads or writes them.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        self.send(
            {
                "event": "spawned",
                "pid": pid,
                "pgid": pid,
                "starttime": st[2] if st else None,
                "keeper_pid": os.getpid(),
                "cgroup": self.cgroup,
            }
        )
        return True

    def _exec_agent(self, err_r: int, err_w: int) -> NoReturn:
        """In the forked child: become the agent (async-signal-safe work only).

        Never returns: it execs, or writes why it could not to ``err_w`` and exits 127.
        """
        try:
            os.close(err_r)
            for sig in (*_TERMINATION_SIGNALS, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            os.setsid()
            if self.pty:
                # A new session has no controlling terminal: take the PTY on fd 0.
                import fcntl
                import termios

                fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            if self.cgroup:
                _plat.enter_cgroup(self.cgroup)
            # If the keeper dies (it should never die first), the root goes too.
            _plat.die_with_parent(signal.SIGKILL)
            os.close(self.control)
            os.execvp(self.argv[0], self.argv)  # noqa: S606 -- running the agent is the job
        except OSError as exc:
            os.write(err_w, f"{exc.errno or 0}:{exc.strerror or exc}".encode())
        except BaseException as exc:  # never return into the keeper's code
            os.write(err_w, f"0:{exc}".encode())
        os._exit(127)

    def _wait(self, timeout: float | None, fds: list[int]) -> list[int]:
        # poll, not select: the control fd keeps the number it had in the supervisor
        # (pass_fds), and a session host's supervisor holds more than select's 1024.
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN | select.POLLPRI)
        try:
            events = poller.poll(None if timeout is None else timeout * 1000)
        except InterruptedError:
            return []
        return [fd for fd, _ in events]

    def run(self, supervisor_pidfd: int | None) -> int:
        """Serve until the tree is extinct; return the keeper's exit status."""
        watch = [self._wake_r, self.control]
        if supervisor_pidfd is not None:
            watch.append(supervisor_pidfd)
        while True:
            self.tree.reap_others()
            self.tree.check_root()
            if self.tree.root_exit is not None and not self.tree.live_descendants():
                return self.finish(mode_hint="exit")
            ready = self._wait(None, watch)
            for sig in self._drain_wakeups():
                if sig in _TERMINATION_SIGNALS:
                    return self.terminate(self.default_grace)
            if supervisor_pidfd is not None and supervisor_pidfd in ready:
                return self.terminate(self.default_grace)  # supervisor died
            if self.control in ready:
                try:
                    data = os.read(self.control, 65536)
                except OSError:
                    data = b""
                if not data:
                    return self.terminate(self.default_grace)  # supervisor died
                self._control_buf += data
                while b"\n" in self._control_buf:
                    line, self._control_buf = self._control_buf.split(b"\n", 1)
                    outcome = self._command(line)
                    if outcome is not None:
                        return outcome

    def _command(self, line: bytes) -> int | None:
        try:
            cmd = _loads(line.decode("utf-8", "replace"))
        except ValueError:
            return None
        if not isinstance(cmd, dict):
            return None
        if cmd.get("cmd") == "terminate":
            grace = cmd.get("grace_ms")
            seconds = grace / 1000 if isinstance(grace, int | float) else self.default_grace
            return self.terminate(max(0.0, seconds))
        return None

    def terminate(self, grace: float) -> int:
        """SIGTERM the tree, wait up to ``grace``, SIGKILL what is left, prove extinction."""
        started = time.monotonic()
        if not self.tree.is_empty():
            self.tree.signal_tree(signal.SIGTERM)
            deadline = started + grace
            while not self.tree.is_empty():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                # SIGCHLD wakes us the moment something exits; cap the wait because a
                # grandchild's exit is reported to its parent, not to us.
                self._wait(min(remaining, 0.02), [self._wake_r])
                self._drain_wakeups()
        if not self.tree.is_empty():
            self.escalated = True
            self.tree.cgroup_kill()
            # Walk, kill, reap until nothing but the root's zombie is left: members may
            # reparent to us between walks.
            while not self.tree.is_empty():
                self.tree.signal_tree(signal.SIGKILL)
                self._wait(0.005, [self._wake_r])
                self._drain_wakeups()
        return self.finish(mode_hint="cgroup" if self.cgroup else "subreaper", started=started)

    def finish(self, mode_hint: str, started: float | None = None) -> int:
        """Reap the root last, prove ECHILD, clean the cgroup, report, exit."""
        self.tree.check_root()
        self.tree.reap_root()
        # ECHILD from waitpid(-1) is the proof: we are the subreaper of the whole tree,
        # so no child means no descendant at all.
        while True:
            try:
                pid, _ = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if pid == 0:
                break
        if self.cgroup:
            for _ in range(50):
                if _plat.cgroup_remove(self.cgroup) != "busy":
                    break
                time.sleep(0.002)  # the kernel frees the cgroup just after the last exit
        elapsed = (time.monotonic() - started) * 1000 if started is not None else 0.0
        self.send(
            {
                "event": "extinct",
                "mode": mode_hint,
                "signalled": self.tree.signalled,
                "escalated": self.escalated,
                "elapsed_ms": round(elapsed, 3),
                "escaped": sorted(self.tree.escaped),
            }
        )
        return 0


def _parse_args(args: list[str]) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    i = 0
    while i < len(args):
        if args[i] == "--":
            return opts, args[i + 1 :]
        key = args[i].lstrip("-")
        opts[key] = args[i + 1]
        i += 2
    return opts, []


def main(args: list[str] | None = None) -> int:
    opts, argv = _parse_args(sys.argv[1:] if args is None else args)
    supervisor_pid = int(opts["supervisor-pid"])
    control_fd = int(opts["control-fd"])
    keeper = Keeper(
        argv,
        supervisor_pid=supervisor_pid,
        control_fd=control_fd,
        default_grace=float(opts.get("grace-ms", "1500")) / 1000,
        cgroup=opts.get("cgroup") or None,
        pty=opts.get("pty") == "1",
    )
    _plat.become_subreaper()
    keeper.install_signals()
    _plat.die_with_parent(signal.SIGTERM)
    # The pdeathsig race: if the supervisor died before prctl ran, no signal will ever
    # come. getppid() tells us; and it makes the pidfd below refer to the right process.
    if os.getppid() != supervisor_pid:
        keeper.send({"event": "spawn-failed", "errno": 0, "message": "supervisor died"})
        return 1
    supervisor_pidfd = _plat.watch_process(supervisor_pid)
    if os.getppid() != supervisor_pid:
        return 1
    if not argv:
        keeper.send({"event": "spawn-failed", "errno": errno.EINVAL, "message": "no command"})
        return 2
    if not keeper.spawn():
        return 1
    return keeper.run(supervisor_pidfd)


def _leave(code: int) -> None:
    """Exit with ``code`` now: the tree is extinct and the proof sent, so the
    interpreter's teardown would only make the supervisor -- which reaps us before it
    answers a close -- wait for nothing (issue 23). stdout and stderr are flushed
    first; we run no threads and register no ``atexit`` functions."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass  # nobody reads them any more: the exit status is what counts
    os._exit(code)


def run() -> NoReturn:
    """The keeper process: :func:`main`, then :func:`_leave` (how
    :mod:`tether.supervise.keeper_launch` starts it)."""
    _leave(main())
    raise AssertionError("unreachable")  # os._exit returned


if __name__ == "__main__":
    run()
