"""The mock agent's misbehaviour: turns that hang, ignore a cancel, crash, flood, break
framing, or leave children that escape its process group.

``hang``, ``late``, ``crash``, ``stderr``, ``malformed``, ``oversized``, ``surrogate`` and
``spawn-group``/``-setsid``/``-daemon``/``-envclear`` (see the package docstring).
"""

from __future__ import annotations

import json
import os
import signal
import time

from tether.testing.mock_agent.protocol import HANG, Outcome, Session, Sleep, Turn
from tether.testing.mock_agent.script import ints

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.testing.mock_agent.agent import MockAgent
    from tether.testing.mock_agent.protocol import Step

STDERR_BLOCK = 64 * 1024
WRITE_BLOCK = 1024 * 1024


def _late(agent: MockAgent, turn: Turn, rest: str) -> Step:
    (ms,), text = ints(rest, 1)
    turn.ignore_cancel = True
    yield Sleep(time.monotonic() + ms / 1000, False)
    agent.chunk(turn.session, text or "late answer")
    return Outcome("end_turn")


def _hang(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    return HANG


def _crash(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    (code,), _ = ints(rest, 1) if rest else ([1], "")
    agent.chunk(session, "crashing")
    os._exit(code)


def _stderr(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    (size,), _ = ints(rest, 1)
    block = (b"x" * 1023 + b"\n") * (STDERR_BLOCK // 1024)
    left = size
    try:
        while left > 0:
            left -= os.write(2, block[: min(left, STDERR_BLOCK)])
    except OSError:
        pass
    agent.chunk(session, "stderr done")
    return None


def _malformed(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    agent.write(b"{this is not json\n")
    return None


LONE = "LONE-SURROGATE"  # replaced by an escaped lone surrogate in the written line


def _surrogate(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    # Valid JSON, but not Unicode text: a lone surrogate escaped in a string. What a reader
    # decodes from it is a str UTF-8 cannot encode. In a chunk, and in what the owner
    # itself reads: the session's title, a tool call's title.
    text = {"type": "text", "text": f"lone {LONE} surrogate"}
    for update, escape in (
        ({"sessionUpdate": "agent_message_chunk", "content": text}, "\\ud800"),
        ({"sessionUpdate": "session_info_update", "title": f"title {LONE}"}, "\\ud800"),
        ({"sessionUpdate": "tool_call", "toolCallId": "s1", "title": f"tool {LONE}"}, "\\udfff"),
    ):
        params = {"sessionId": session.sid, "update": update}
        line = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params})
        agent.write(line.replace(LONE, escape).encode() + b"\n")
    return None


def _oversized(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    (size,), _ = ints(rest, 1)
    block = b"x" * min(size, WRITE_BLOCK)
    left = size
    while left > 0:
        piece = block[: min(left, WRITE_BLOCK)]
        agent.write(piece)
        left -= len(piece)
    agent.write(b"\n")
    return None


def _v_spawn(
    agent: MockAgent, turn: Turn, session: Session, rest: str, kind: str
) -> Outcome | None:
    try:
        pid = spawn_detached(agent, kind)
    except OSError as e:
        agent.chunk(session, f"spawn failed kind={kind}: {e}")
        return None
    agent.chunk(session, f"spawned pid={pid} kind={kind}")
    return None


def spawn_detached(agent: MockAgent, kind: str) -> int:
    """Start ``sleep 3600`` detached in the way ``kind`` names; return its pid.

    The pid is returned only once the child has exec'd: a close-on-exec pipe reaches
    EOF at the exec (or carries the error if it failed). For a daemon the middle
    process writes the grandchild's pid into the same pipe before it exits.
    """
    argv = _sleep_argv()
    env = {} if kind == "envclear" else dict(os.environ)
    r, w = os.pipe()  # both ends are close-on-exec (PEP 446)
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            if kind == "group":
                os.setpgid(0, 0)
            else:
                os.setsid()
            if kind == "daemon":
                if os.fork() != 0:
                    os._exit(0)  # the middle process: leave the grandchild orphaned
                os.write(w, b"%d\n" % os.getpid())
            _exec_detached(argv, env)
        except BaseException as e:
            try:
                os.write(w, f"!{e}".encode())
            finally:
                os._exit(127)
    os.close(w)
    if kind == "group":
        try:
            os.setpgid(pid, pid)  # also from the parent: no window where it is unset
        except OSError:
            pass  # already exec'd (EACCES) or already done: fine
    chunks = []
    while True:
        data = os.read(r, 4096)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    report = b"".join(chunks).decode(errors="replace")
    if kind == "daemon":
        os.waitpid(pid, 0)  # reap the middle process
        head, _, rest = report.partition("\n")
        if rest.startswith("!") or not head.isdigit():
            raise OSError(f"daemon spawn failed: {report.strip()}")
        return int(head)
    if report.startswith("!"):
        raise OSError(f"spawn failed: {report[1:]}")
    agent.children.append(pid)
    return pid


def _exec_detached(argv: list[str], env: dict[str, str]) -> None:
    """In a forked child: stdio on /dev/null, default SIGPIPE/SIGINT, then exec."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)
    # Python ignores SIGPIPE, and that would be inherited through exec. SIGTERM keeps
    # whatever the agent has (SIG_IGN under --ignore-sigterm), as the flag promises.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execve(argv[0], argv, env)  # noqa: S606 -- a fixed argv (sleep 3600), no shell


def _sleep_argv() -> list[str]:
    for d in os.get_exec_path():
        path = os.path.join(d, "sleep")
        if os.access(path, os.X_OK):
            return [path, "3600"]
    return ["/bin/sleep", "3600"]


def _spawner(kind: str) -> Callable[[MockAgent, Turn, Session, str], Outcome | None]:
    def verb(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
        return _v_spawn(agent, turn, session, rest, kind)

    return verb


STEP_VERBS: dict[str, Callable[[MockAgent, Turn, str], Step]] = {"late": _late}
PLAIN_VERBS: dict[str, Callable[[MockAgent, Turn, Session, str], Outcome | None]] = {
    "hang": _hang,
    "spawn-group": _spawner("group"),
    "spawn-setsid": _spawner("setsid"),
    "spawn-daemon": _spawner("daemon"),
    "spawn-envclear": _spawner("envclear"),
    "crash": _crash,
    "stderr": _stderr,
    "malformed": _malformed,
    "oversized": _oversized,
    "surrogate": _surrogate,
}
