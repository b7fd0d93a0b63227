"""The CLI against a remote Tether (``--server URL`` or ``TETHER_SERVER``).

The same commands as locally -- ``sessions new|ensure|list|show|history|read|watch|
export|close|terminate``, ``prompt``, ``cancel``, ``set-mode``, ``set``, ``status``,
``answer`` -- over a gateway's or a fleet router's HTTP API
(:class:`tether.remote.client.RemoteClient`), with the same output: each command's
result goes through the very function that shows the local one (``show_*`` in the
command modules), and an error the server raised comes back as the same
:class:`~tether.errors.TetherError` subclass, hence the same exit code. ``sessions
rehome`` exists only here (a router moves a session off a lost host).

A session is named as locally (agent, ``--cwd``, ``-s NAME``; or ``--key``) and looked
up in the server's list: a router's ids are its own, not the local key. ``--cwd`` is a
directory on the server. What acts on this machine's Tether home (``exec``, ``reap``,
``doctor``, ``serve``...) is refused with a usage error, and so are the flags the HTTP
API cannot carry (a raw ``--agent`` command, ``--permission-policy``...).

Standard library only (``http.client``): no HTTP stack is imported on this path.
"""

from __future__ import annotations

import os

from tether.errors import NoSession, UsageError

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

    from tether.remote.client import RemoteClient

# Commands that act on this machine's Tether home, and why they cannot run remotely.
_LOCAL_ONLY = {
    "exec": "`exec` starts the agent here, for one prompt",
    "reap": "`reap` reconciles this machine's leases",
    "doctor": "`doctor` checks this machine's state directory",
    "serve": "`serve` is a server itself",
    "acp": "`acp` serves this machine's sessions over stdio",
    "metrics": "`metrics` reads this machine's state (the server's: GET /metrics)",
    "logout": "`logout` signs out this machine's agent",
    "sessions prune": "`sessions prune` prunes this machine's journals",
    "sessions fork": "`sessions fork` is not offered over HTTP",
    "sessions list --agent-sessions": "the agent's own session list is not offered over HTTP",
    "sessions watch --control": "answering from the terminal needs a local owner; use"
    " `tether answer` (or the dashboard) against the server",
}
# Flags that shape what starts here, which the HTTP API does not carry.
_LOCAL_FLAGS = (
    ("agent_cmd", "--agent CMD (a remote Tether starts named agents only)"),
    ("permission_policy", "--permission-policy"),
    ("auth_policy", "--auth-policy"),
    ("non_interactive", "--non-interactive-permissions"),
    ("no_fs", "--no-fs"),
    ("no_terminal", "--no-terminal"),
    ("mcp_bridge", "--mcp-bridge"),
    ("mcp_config", "--mcp-config"),
    ("sandboxed", "--sandboxed"),
    ("resume_session", "--resume-session"),
    ("allowed_tools", "--allowed-tools"),
    ("max_turns", "--max-turns"),
    ("system_prompt", "--system-prompt"),
    ("append_system_prompt", "--append-system-prompt"),
    ("prompt_retries", "--prompt-retries"),
    ("discard", "--discard"),
)


def local_only(what: str) -> UsageError:
    """The usage error of a command that cannot run against a remote Tether."""
    return UsageError(
        f"{_LOCAL_ONLY.get(what, what)}: it runs only locally; drop --server"
        " (and unset TETHER_SERVER) to run it on this machine"
    )


def _check_local_only(inv: Any) -> None:
    what = inv.command
    if what == "sessions":
        what = f"sessions {inv.subcommand}"
        if inv.subcommand == "list" and inv.agent_sessions:
            what = "sessions list --agent-sessions"
        if inv.subcommand == "watch" and inv.control:
            what = "sessions watch --control"
    if what in _LOCAL_ONLY:
        raise local_only(what)
    for attr, flag in _LOCAL_FLAGS:
        if getattr(inv, attr):
            raise UsageError(f"{flag} is not available against a remote Tether (--server)")


def token(inv: Any, server: str) -> str | None:
    """The bearer token: ``--token-file``, else ``TETHER_TOKEN``, else -- for a server on
    this machine only (loopback, a Unix socket) -- this home's ``serve-token``."""
    if inv.token_file:
        try:
            with open(os.path.expanduser(inv.token_file), encoding="utf-8") as f:
                return f.read().strip()
        except OSError as exc:
            raise UsageError(f"--token-file {inv.token_file}: {exc.strerror or exc}") from None
    if os.environ.get("TETHER_TOKEN"):
        return os.environ["TETHER_TOKEN"].strip()
    from tether.remote.core import parse_url

    target = parse_url(server)
    if target.scheme == "unix" or target.host in ("127.0.0.1", "localhost", "::1"):
        from tether import paths

        try:
            with open(os.path.join(paths.home_path(), "serve-token"), encoding="utf-8") as f:
                return f.read().strip()
        except OSError:
            return None
    return None


def run(ctx: Any) -> int:
    """Run ``ctx``'s command on the remote Tether ``ctx.server``; its exit status."""
    inv = ctx.inv
    _check_local_only(inv)
    from tether.remote.client import RemoteClient

    with RemoteClient(ctx.server, token(inv, ctx.server)) as client:
        if inv.command == "prompt":
            from tether.cli import _remote_turns, _retry

            _retry.creation_only(ctx)
            from tether.cli import _read_prompt

            return _remote_turns.prompt(ctx, client, _read_prompt(inv))
        if inv.command == "sessions":
            return _sessions(ctx, client)
        return _control(ctx, client)


def _control(ctx: Any, client: RemoteClient) -> int:
    from tether.cli import _control_cmds
    from tether.remote import core

    command = ctx.inv.command
    if command == "answer":
        from tether.cli import _questions

        qid, word, content = _questions.answer_args(ctx)
        result = client.call(core.answer(resolve(ctx, client), qid, word, content))
        return _questions.show_answered(ctx, result)
    if command == "set-mode":
        mode = _control_cmds.mode_word(ctx)
        return _control_cmds.show_set(ctx, client.call(core.set_mode(resolve(ctx, client), mode)))
    if command == "set":
        config_id, raw = _control_cmds.config_words(ctx)
        result = client.call(core.set_config(resolve(ctx, client), config_id, raw))
        return _control_cmds.show_set(ctx, result)
    if command == "status":
        return _control_cmds.show_status(ctx, _status(ctx, client))
    sid = resolve(ctx, client)
    if command == "cancel":
        result = client.call(core.cancel(sid, ctx.inv.request, wait=True))  # as locally
        return _control_cmds.show_cancel(ctx, result)
    raise UsageError(f"unknown command {command!r}")


def _status(ctx: Any, client: RemoteClient) -> dict[str, Any]:
    """The session's status snapshot; as locally, a session nobody has is ``no-session``."""
    from tether.remote import core

    try:
        sid = resolve(ctx, client)
    except NoSession:
        if ctx.inv.key is not None:
            raise
        from tether.cli._session_flags import _key
        from tether.operations.session_status import no_session_status

        return no_session_status(_key(ctx))
    snapshot: dict[str, Any] = client.call(core.get_session(sid))["status"]
    return snapshot


def _sessions(ctx: Any, client: RemoteClient) -> int:
    from tether.cli import _sessions_cmd
    from tether.remote import core

    sub = ctx.inv.subcommand
    if sub in ("new", "ensure"):
        return _ensure(ctx, client)
    if sub == "list":
        records = client.call(core.list_sessions("all" if ctx.inv.all else "open"))["sessions"]
        return _sessions_cmd.show_list(ctx, [_listed(r) for r in records])
    if sub in ("history", "read", "watch", "export"):
        from tether.cli import _remote_turns

        return _remote_turns.journal(ctx, client, resolve(ctx, client))
    if sub == "rehome" and _is_id(ctx.inv.session) and ctx.inv.key is None:
        ctx.inv.key, ctx.inv.session = ctx.inv.session, None  # `sessions rehome ID`
    sid = resolve(ctx, client)
    if sub == "show":
        record = client.call(core.get_session(sid))
        info = {k: v for k, v in record.items() if k not in ("status", "processes")}
        return _sessions_cmd.show_session(ctx, sid, info)
    if sub == "close":
        return _sessions_cmd.show_closed(ctx, client.call(core.close(sid)))
    if sub == "terminate":
        return _sessions_cmd.show_terminated(ctx, client.call(core.terminate(sid)))
    if sub == "rehome":
        return _rehome(ctx, client, sid)
    raise UsageError(f"unknown sessions command {sub}")


def _is_id(word: str | None) -> bool:
    """Whether ``word`` reads as a session id (or a prefix of one): 8+ hex digits."""
    return bool(word) and len(word or "") >= 8 and all(c in "0123456789abcdef" for c in word or "")


def _listed(record: dict[str, Any]) -> dict[str, Any]:
    """A listed record with the fields the local list shows (a router lists fewer)."""
    record.setdefault("key", record.get("id"))
    record.setdefault("agentId", record.get("agent"))
    return record


def _ensure(ctx: Any, client: RemoteClient) -> int:
    from tether.cli import _sessions_cmd
    from tether.remote import core

    inv = ctx.inv
    name = inv.session or ""
    call = core.ensure(
        ctx.agent_label,
        str(ctx.cwd),
        name,
        fresh=inv.subcommand == "new",
        permissions=inv.permissions,
        ttl=inv.ttl,
    )
    result = client.call(call)
    sid = str(result.get("id") or result.get("sessionKey"))
    if inv.model:  # select the model now (locally: stored with a new session)
        client.call(core.set_config(sid, "model", inv.model))
        ctx.output.banner(f"model set: {inv.model}")
    return _sessions_cmd.show_ensured(
        ctx,
        sid,
        str(result.get("name", name)),
        bool(result.get("created")),
        result.get("ownerPid"),
        result.get("ownerGeneration"),
        {},
    )


def _rehome(ctx: Any, client: RemoteClient, sid: str) -> int:
    from tether.remote import core

    answer = client.call(core.rehome(sid, ctx.inv.to_host, ctx.inv.replay))
    replay = answer.get("replayRequestId")
    ctx.output.control(
        {"action": "session_rehomed", **answer},
        text=(
            f"session {sid[:12]} re-homed from {answer.get('fromHost')} as"
            f" {str(answer.get('id'))[:12]} on {answer.get('hostId')}"
            f" (journal durable up to {answer.get('durableSeq')})"
            + (f" · conversation replayed as {replay}" if replay else "")
        ),
        quiet=str(answer.get("id")),
    )
    return 0


def resolve(ctx: Any, client: RemoteClient) -> str:
    """The server's id of the session the flags name.

    Raises:
        NoSession: none (with the local hint: which session, how to create it).
        UsageError: a ``--key`` prefix that names several.
    """
    from tether.remote import core

    given = ctx.inv.key
    if given is not None and len(given) == 64:
        return str(given).lower()  # a whole id: no lookup
    records = client.call(core.list_sessions("all"))["sessions"]
    if given is not None:
        ids = sorted({str(r.get("id")) for r in records if str(r.get("id")).startswith(given)})
        if len(ids) > 1:
            raise UsageError(f"--key {given} names {len(ids)} sessions: give more of it")
        if ids:
            return ids[0]
    else:
        record = core.pick_session(records, ctx.agent_label, str(ctx.cwd), ctx.inv.session or "")
        if record is not None:
            return str(record.get("id"))
    from tether.cli._session_flags import _no_session_hint

    hint: NoSession = _no_session_hint(ctx)
    raise hint
