"""Starting a run's keeper (:mod:`tether.supervise.keeper`, in an isolated interpreter)
around the agent.

The agent's pipes (or a PTY) are the keeper's stdio, which it hands on to the agent; the
lease marker and who is asking are in the environment; one end of a socketpair is the
control channel (:mod:`tether.supervise.keeper_channel`).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

from tether.errors import SpawnError
from tether.supervise.run_types import SpawnSpec

__all__ = ["launch_keeper"]


def launch_keeper(
    spec: SpawnSpec, argv: list[str], *, lease_id: str, instance_id: str, cgroup: str | None
) -> tuple[subprocess.Popen[bytes], socket.socket, int | None]:
    """Start the keeper of one run: (its Popen, our control socket, the PTY master or None).

    Call it on the event loop's thread, blocking: ``PR_SET_PDEATHSIG`` follows the forking
    thread (a worker thread would kill the keeper when it ended), and asyncio's child
    watcher must not reap the keeper behind our back.

    Raises:
        SpawnError: the keeper could not be started; nothing is left open.
    """
    env = _keeper_env(spec, lease_id=lease_id, instance_id=instance_id)
    parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    keeper_argv = _keeper_argv(spec, argv, control_fd=child_sock.fileno(), cgroup=cgroup)
    master_fd: int | None = None
    # Ours to close once the keeper has it (or failed to start); set only once opened, so
    # a failing PTY open surfaces as the SpawnError, not as a KeyError from the cleanup.
    slave_fd: int | None = None
    stdio: dict[str, Any] = {}
    try:
        if spec.pty:
            master_fd, slave_fd = _open_pty()
            stdio = {"stdin": slave_fd, "stdout": slave_fd, "stderr": slave_fd}
        else:
            stdio = {
                "stdin": subprocess.PIPE,
                "stdout": subprocess.PIPE,
                "stderr": subprocess.STDOUT if spec.merge_stderr else subprocess.PIPE,
            }
        keeper = subprocess.Popen(
            keeper_argv,
            cwd=spec.cwd,
            env=env,
            pass_fds=(child_sock.fileno(),),
            start_new_session=True,
            close_fds=True,
            **stdio,
        )
    except OSError as exc:
        child_sock.close()
        parent_sock.close()
        if master_fd is not None:
            os.close(master_fd)
        raise SpawnError(f"cannot start the keeper: {exc}", argv=argv) from exc
    finally:
        child_sock.close()
        if slave_fd is not None:
            os.close(slave_fd)
    return keeper, parent_sock, master_fd


def _keeper_env(spec: SpawnSpec, *, lease_id: str, instance_id: str) -> dict[str, str]:
    """The keeper's (and so the agent's) environment: the lease marker and who asks."""
    env = dict(os.environ if spec.env is None else spec.env)
    env["TETHER_LEASE_ID"] = lease_id
    env["TETHER_INSTANCE_ID"] = instance_id
    # Who is asking, when this agent runs `tether ...` (tether.policy.requester checks it).
    if spec.session_key:
        env["TETHER_SESSION_KEY"] = spec.session_key
    else:
        env.pop("TETHER_SESSION_KEY", None)
    # On a fleet host, where its agents reach the fleet (tether.fleet.door): an address,
    # not a claim -- the door proves who calls by the caller's pid.
    door = env.get("TETHER_FLEET_DOOR")
    if door:
        env["TETHER_SERVER"] = f"unix:{door}"
    return env


# The keeper's interpreter is isolated (-I: no PYTHON* variables, no user site, and
# neither the agent's cwd nor a script's directory on the path -- a project holding a
# `tether` package of its own must not run code in the process that holds its tree) and
# runs no site (-S: no .pth files, ~0.9 MiB of private memory per session). It finds
# Tether where this process found it, the path given as its first argument.
_KEEPER_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from tether.supervise.keeper import run; run()"
)
# The directory holding the `tether` package (this file is tether/supervise/...).
_TETHER_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _keeper_argv(
    spec: SpawnSpec, argv: list[str], *, control_fd: int, cgroup: str | None
) -> list[str]:
    """The keeper (:data:`_KEEPER_BOOT`) with its options, then ``--`` and the agent."""
    keeper_argv = [
        sys.executable,
        "-I",
        "-S",
        "-c",
        _KEEPER_BOOT,
        _TETHER_ROOT,
        "--supervisor-pid",
        str(os.getpid()),
        "--control-fd",
        str(control_fd),
        "--grace-ms",
        str(int(spec.grace * 1000)),
        "--cgroup",
        cgroup or "",
    ]
    if spec.pty:
        keeper_argv += ["--pty", "1"]
    return [*keeper_argv, "--", *argv]


def _open_pty() -> tuple[int, int]:
    """A PTY for the agent, without echo: ``(master fd, slave fd)``."""
    import pty
    import termios

    master_fd, slave_fd = pty.openpty()
    try:
        # We are a program, not a person at a keyboard: without this the line
        # discipline would echo everything we write back into the agent's stdout.
        attrs = termios.tcgetattr(slave_fd)
        attrs[3] &= ~termios.ECHO
        termios.tcsetattr(slave_fd, termios.TCSANOW, attrs)
    except (OSError, termios.error) as exc:
        # termios.error is no OSError: translate it, and leave no descriptor open.
        os.close(master_fd)
        os.close(slave_fd)
        raise OSError(f"cannot set up the agent's PTY: {exc}") from exc
    return master_fd, slave_fd
