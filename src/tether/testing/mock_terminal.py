"""The mock agent's ``terminal`` verb: it drives the client's ``terminal/*`` methods.

``terminal [--limit N] [--cwd DIR] [--env NAME=VALUE]... [--kill|--release|--keep] CMD [ARG...]``

The words are split like a shell would (never run by one). ``terminal/create`` with
``command`` CMD and ``args`` (when there are ARGs; a quoted CMD alone is a command line),
``outputByteLimit`` N, ``cwd`` DIR and ``env``. Then, by mode:

* default: ``terminal/wait_for_exit``, ``terminal/output``, ``terminal/release``;
* ``--kill``: poll ``terminal/output`` (every 20 ms, at most 10 s) until it shows output
  or an exit, ``terminal/kill``, ``terminal/wait_for_exit``, ``terminal/output``,
  ``terminal/release``;
* ``--release``: poll as for ``--kill``, then ``terminal/release`` while it may still
  run, then ``terminal/output`` again (which should now be an error);
* ``--keep``: poll as for ``--kill`` and leave the terminal running (never released).

One chunk reports it: ``terminal id=<id> exit=<code> signal=<sig> truncated=<bool>``,
a newline, and the output of the last ``terminal/output``; with ``--release`` the first
line also says ``after-release=<code of the error, or "ok">``. Any error answer ends the
verb with chunk ``terminal error <method> <code> <message>``. (Sent whatever the client
advertised, so a client without terminals answers ``-32601``.)
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Generator
    from typing import Any

    Step = Generator[Any, object, Any]

POLL_S = 0.02
POLL_FOR_S = 10.0


class _Failed(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def parse(rest: str) -> tuple[dict[str, Any], str]:
    """``(terminal/create params without sessionId, mode)``; ValueError if malformed."""
    import shlex  # here, not at import: the mock agent's start-up stays lean

    words = shlex.split(rest)
    params: dict[str, Any] = {}
    env: list[dict[str, str]] = []
    mode = "wait"
    while words and words[0].startswith("--"):
        flag = words.pop(0)
        if flag in ("--kill", "--release", "--keep"):
            mode = flag[2:]
        elif flag in ("--limit", "--cwd", "--env") and words:
            value = words.pop(0)
            if flag == "--limit":
                params["outputByteLimit"] = int(value)
            elif flag == "--cwd":
                params["cwd"] = value
            else:
                name, _, val = value.partition("=")
                env.append({"name": name, "value": val})
        else:
            raise ValueError(f"terminal: bad flag {flag!r}")
    if not words:
        raise ValueError("terminal: missing command")
    params["command"] = words[0]
    if words[1:]:
        params["args"] = words[1:]
    if env:
        params["env"] = env
    return params, mode


def run(
    agent: Any,
    session: Any,
    rest: str,
    awaiting: Callable[[str], object],
    sleeping: Callable[[float], object],
) -> Step:
    """The verb as a turn step (``awaiting(key)`` / ``sleeping(seconds)`` are yielded)."""
    sid = session.sid

    def call(method: str, params: dict[str, Any]) -> Step:
        _, key = agent.request(method, {"sessionId": sid, **params})
        response = yield awaiting(key)
        assert isinstance(response, dict)
        if "error" in response:
            err = response["error"]
            code = err.get("code") if isinstance(err, dict) else err
            message = err.get("message") if isinstance(err, dict) else ""
            raise _Failed(f"terminal error {method} {code} {message}")
        result = response.get("result")
        return result if isinstance(result, dict) else {}

    try:
        params, mode = parse(rest)
    except ValueError as exc:
        agent.chunk(session, f"terminal error parse {exc}")
        return None
    try:
        created = yield from call("terminal/create", params)
        ref = {"terminalId": created.get("terminalId")}
        after = ""
        if mode == "wait":
            status = yield from call("terminal/wait_for_exit", ref)
            output = yield from call("terminal/output", ref)
            yield from call("terminal/release", ref)
        else:
            deadline = time.monotonic() + POLL_FOR_S
            while True:
                output = yield from call("terminal/output", ref)
                if output.get("output") or output.get("exitStatus"):
                    break
                if time.monotonic() > deadline:
                    break
                yield sleeping(POLL_S)
            status = output.get("exitStatus") or {}
            if mode == "kill":
                yield from call("terminal/kill", ref)
                status = yield from call("terminal/wait_for_exit", ref)
                output = yield from call("terminal/output", ref)
                yield from call("terminal/release", ref)
            elif mode == "release":
                yield from call("terminal/release", ref)
                try:
                    yield from call("terminal/output", ref)
                    after = " after-release=ok"
                except _Failed as exc:
                    after = f" after-release={exc.text.split()[3]}"
    except _Failed as exc:
        agent.chunk(session, exc.text)
        return None
    agent.chunk(
        session,
        f"terminal id={ref['terminalId']} exit={status.get('exitCode')} "
        f"signal={status.get('signal')} truncated={str(output.get('truncated')).lower()}"
        f"{after}\n{output.get('output', '')}",
    )
    return None
