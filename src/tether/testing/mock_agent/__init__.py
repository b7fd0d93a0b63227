"""A scriptable ACP agent for tests and benchmarks: ``tether-mock-agent``.

Run it as ``tether-mock-agent [FLAGS]`` or ``python -m tether.testing.mock_agent [FLAGS]``.
It speaks ACP v1 (JSON-RPC 2.0, one JSON object per line) on stdin/stdout, uses the
standard library only and answers ``initialize`` within a few tens of milliseconds of
being started. What it does in a turn is decided by the prompt text: a tiny script.

Script language
===============

The script is the concatenation of every ``text`` content block of the prompt. It is
split into commands at newlines and at ``" ; "`` (space, semicolon, space). Each command
is ``verb args...``; TEXT/TITLE/MSG arguments are the rest of the command verbatim
(inner spacing kept, outer whitespace trimmed).

If the first word of the script is not a known verb, the whole text is echoed back as one
``agent_message_chunk`` and the turn ends ``end_turn`` (so ``hello world`` echoes
``hello world``). If the first word is a verb, the whole script is checked before anything
runs: an unknown verb or a bad argument later on answers the prompt with error ``-32602``.

Commands run in order. Unless stated otherwise the turn ends with stopReason ``end_turn``
after the last one. A ``session/cancel`` is noticed while sleeping and between commands;
the turn then ends at once with stopReason ``cancelled``. Requests the agent sends
(permission, fs) are always waited for: the client must answer them, even after a cancel.

``echo TEXT``
    One ``agent_message_chunk`` with TEXT.
``stream N [TEXT]``
    N ``agent_message_chunk`` notifications; chunk i (0-based) has text ``"TEXT i\\n"``
    (TEXT defaults to ``chunk``). Written in batches of 512 lines; stdin is polled between
    batches, so a cancel stops the stream early.
``sleep MS``
    Wait MS milliseconds. A ``session/cancel`` ends the turn at once (``cancelled``).
``hang``
    Never answer this prompt, not even on cancel or ``$/cancel_request``. The rest of the
    script is not run. The agent keeps serving everything else.
``late MS [TEXT]``
    From now on ignore ``session/cancel``; after MS ms send ``agent_message_chunk`` TEXT
    (default ``late answer``) and answer the prompt ``end_turn``. This ends the turn; the
    rest of the script is not run. (The "answers late after it was cancelled" case.)
``tool KIND [TITLE]``
    ``tool_call`` (toolCallId ``call-<n>``, n counting from 1 per process, kind KIND sent
    as given, status ``pending``, title TITLE, default ``mock KIND``), then
    ``session/request_permission`` with options ``allow`` (allow_once), ``allow-always``
    (allow_always) and ``reject`` (reject_once). Selected allow/allow-always:
    ``tool_call_update`` status ``completed`` and chunk ``permission: allowed``. Selected
    reject: ``tool_call_update`` status ``failed`` and chunk ``permission: denied``
    (an unknown optionId is also treated as denied, chunk
    ``permission: unknown option <id>``). Outcome ``cancelled``: the turn ends
    ``cancelled``. A JSON-RPC error answer: chunk ``permission: error <code>``, continue.
``elicit MODE [TEXT]``
    ``elicitation/create`` (sent whatever the client advertised). MODE ``form``: message
    TEXT (default ``mock question``), a schema asking for a string ``name`` (required).
    MODE ``url``: elicitationId ``elicit-<n>``, url ``https://example.invalid/<TEXT>``;
    once answered ``accept``, an ``elicitation/complete`` notification follows. The
    answer becomes a chunk: ``elicitation: accept {content JSON}``, ``elicitation:
    decline``, ``elicitation: cancel`` or ``elicitation: error <code>``; then continue.
``cancel-request``
    Send a ``session/request_permission`` and immediately a ``$/cancel_request`` naming it.
    When it is answered, chunk ``cancel_request: answered <code>`` for an error answer
    (the client should use -32800), or ``cancel_request: answered result`` for a result.
``read PATH``
    ``fs/read_text_file {sessionId, path}``; chunk with the content, or
    ``fs error <code> <message>``. (Sent whatever the client's capabilities say.)
``write PATH [TEXT...]``
    ``fs/write_text_file`` with content TEXT; chunk ``wrote PATH`` or
    ``fs error <code> <message>``.
``spawn-group``
    Start ``sleep 3600`` in its own process group; chunk ``spawned pid=<pid> kind=group``.
``spawn-setsid``
    Start ``sleep 3600`` in a new session (setsid); chunk ``spawned pid=<pid> kind=setsid``.
``spawn-daemon``
    Classic double fork + setsid daemon; the reported pid is the grandchild's (orphaned,
    re-parented away from the agent): chunk ``spawned pid=<pid> kind=daemon``.
``spawn-envclear``
    ``sleep 3600`` with an empty environment in a new session; chunk
    ``spawned pid=<pid> kind=envclear``.

    Spawned children have stdin, stdout and stderr on ``/dev/null`` (so the client sees
    EOF when the agent itself exits) and outlive the agent. The pid is reported only
    after the child has exec'd ``sleep``, so its group/session is already in place.
    They keep default signal handling, except that ``--ignore-sigterm`` is inherited.
``crash [CODE]``
    One chunk ``crashing``, then exit immediately with CODE (default 1), no answer.
``stderr BYTES``
    Write BYTES bytes to stderr in 64 KiB writes (blocks if nobody drains it), then
    chunk ``stderr done``.
``malformed``
    Write the line ``{this is not json`` to stdout, then continue.
``surrogate``
    One ``agent_message_chunk`` whose text is ``lone \\ud800 surrogate``: valid JSON
    whose string holds a lone surrogate escape, so it decodes to text that is not
    Unicode (what a hostile or broken agent can send); then a ``session_info_update``
    titled ``title \\ud800`` and a ``tool_call`` titled ``tool \\udfff``; then continue.
``oversized BYTES``
    Write one line of BYTES ``x`` bytes (plus the newline) to stdout, then continue.
``big BYTES``
    One ``agent_message_chunk`` whose text is BYTES ``x`` characters (a valid ACP frame
    of about BYTES bytes), then continue.
``unknown-update``
    A ``session/update`` with sessionUpdate ``mock_future_kind`` (and extra fields), a
    ``_mock/notice`` notification, and an ``agent_message_chunk`` (text
    ``unknown field``) carrying an unknown extra field ``mockExtra``; then continue.
``plan``
    A ``plan`` update with 2 entries.
``thought TEXT``
    One ``agent_thought_chunk`` with TEXT.
``usage``
    A ``usage_update`` with used 1234, size 200000.
``session-params``
    One chunk: the JSON of the last ``session/new`` params without ``cwd`` and
    ``mcpServers`` (what else the client sent: ``_meta``, ``systemPrompt``); after a
    ``session/load`` or ``session/resume``, its params (without ``sessionId``) with
    ``"method"`` naming it.
``mode ID``
    A ``current_mode_update`` to ID (and the session's mode becomes ID).
``stop [REASON]``
    End the turn now with stopReason REASON (default ``end_turn``; sent as given).
``error CODE [MSG]``
    End the turn now by answering the prompt with JSON-RPC error CODE, MSG (default
    ``mock error``).
``exit [CODE]``
    Exit with CODE (default 0) right after the prompt is answered (result or error,
    including ``cancelled``); the script goes on until then.

``run CMD...``
    Run CMD (split like a shell would, never run by one) in the agent's directory with
    the agent's environment, stdin on ``/dev/null``, and wait for it (at most 120 s);
    one chunk ``exit=<code>`` followed by a newline and its stdout then stderr. (How
    delegation tests make an agent run ``tether`` commands from inside its own tree.)
``mcp-call SERVER TOOL [JSON]``
    Start the stdio MCP server named SERVER in ``session/new``'s ``mcpServers``, speak
    ``initialize``, ``notifications/initialized`` and ``tools/call`` TOOL with the JSON
    object arguments (default ``{}``), close its stdin and wait for it to exit; one chunk
    with the ``tools/call`` response as JSON, or ``mcp-call failed: <why>``.
``terminal [--limit N] [--cwd DIR] [--env NAME=VALUE]... [--kill|--release|--keep] CMD...``
    Drive the client's ``terminal/*`` methods (create, output, wait_for_exit, kill,
    release) and report in one chunk ``terminal id=<id> exit=<code> signal=<sig>
    truncated=<bool>`` plus the output; see :mod:`tether.testing.mock_terminal`.

Extra words after a verb that takes no arguments are ignored.

Flags
=====

``--ignore-sigterm``
    SIGTERM is ignored (SIG_IGN, inherited by spawned children).
``--hang-on-initialize`` / ``--hang-on-new-session``
    Never answer ``initialize`` / ``session/new``.
``--startup-delay-ms N``
    Sleep N ms before reading stdin.
``--load-session``
    Advertise ``loadSession: true`` and handle ``session/load``: replay a
    ``user_message_chunk`` ``previous prompt`` and an ``agent_message_chunk``
    ``previous answer``, then answer. Without the flag it is -32601.
``--resume-session`` / ``--close-session``
    Advertise ``sessionCapabilities.resume`` / ``.close`` and handle ``session/resume``
    (no replay; like ``session/load``, an id starting with ``gone-`` is a conversation
    the agent no longer has: -32002) / ``session/close`` (cancels running turns like
    ``session/cancel``, then answers ``{}``; later prompts get -32603 ``Session not
    found``). Otherwise -32601.
``--fork-session`` / ``--list-sessions`` / ``--delete-session`` / ``--logout``
    Advertise ``sessionCapabilities.fork`` / ``.list`` / ``.delete`` / ``auth.logout``.
    ``session/fork`` of any id answers a new ``fork-<n>`` session (it announces
    ``forked from <id>`` as an ``agent_message_chunk`` on its first prompt);
    ``session/list`` answers the sessions of this process plus a stored one,
    ``mock-stored-1`` titled ``stored conversation`` (in the request's ``cwd``, or
    ``/``); ``session/delete`` forgets a session and answers ``{}``; ``logout``
    answers ``{}``. Otherwise -32601.
``--modes``
    Session results carry ``modes`` (``default``, ``plan``, ``yolo``; current
    ``default``); ``session/set_mode`` sends ``current_mode_update`` then answers ``{}``.
    Without the flag ``session/set_mode`` is -32601.
``--config-options``
    Session results carry ``configOptions``: select ``model`` (``mock-small``,
    ``mock-large``; category ``model``) and boolean ``fast``;
    ``session/set_config_option`` answers the full new list. Otherwise -32601.
``--system-prompt``
    Advertise ``sessionCapabilities.systemPrompt`` (``{"mode": {"override": {}}}``, as
    claude-agent-acp 0.101.0 does).
``--agent-name NAME``
    Answer ``initialize`` with agentInfo name NAME (e.g. ``claude-agent-acp``, so that a
    client sends what it sends only to that agent).
``--auth-required``
    Advertise authMethods ``[{id: "mock-key", name: "Mock key"}]``; ``session/new``,
    ``session/load`` and ``session/resume`` fail with -32000 ``Authentication required``
    until ``authenticate {methodId: "mock-key"}`` succeeds. ``authenticate`` (with or
    without the flag) succeeds only for ``mock-key`` with env ``MOCK_AGENT_KEY`` set
    non-empty, else -32000.
``--no-exit-on-eof``
    Keep running after stdin EOF (like old claude-agent-acp); exit only on a signal.
``--log-stderr``
    One line per received message on stderr: ``mock-agent <- <the line>``.

Other behaviour
===============

- ``initialize`` answers protocolVersion 1, agentInfo name ``tether-mock-agent``.
- ``session/new`` answers sessionId ``mock-<n>`` (n from 1), then sends an
  ``available_commands_update`` listing the verbs.
- Updates always carry the sessionId of the turn they belong to. Turns of different
  sessions (or several prompts of one session) run concurrently.
- ``$/cancel_request`` naming a running prompt cancels it like ``session/cancel`` but the
  prompt is answered with error -32800. Other names are ignored.
- Unknown methods get -32601; unknown notifications and responses to unknown ids are
  ignored; a line that is not JSON gets -32700 (id null).
- Request ids are echoed back as decoded by ``json`` (strings, integers of any size,
  null). The agent's own request ids are integers counting from 1.
- The agent exits 0 on stdin EOF (default) or when stdout is closed.
"""

from __future__ import annotations

import signal
import sys

from tether.testing.mock_agent.agent import MockAgent
from tether.testing.mock_agent.options import USAGE, Options
from tether.testing.mock_agent.script import VERBS, ScriptError, parse_script

# The package, by behaviour family: ``protocol`` (error codes, framing, turns and
# sessions), ``script`` (the verb table and the parser), ``options`` (flags), ``agent``
# (the select loop, dispatch and turn stepping), ``sessions`` (initialize, auth and the
# session methods), ``prompt_verbs`` (what a turn says and how it ends), ``client_calls``
# (permissions, elicitations, fs, terminals), ``misbehaviour`` (hang, late, crash, floods,
# broken framing, escaping children); ``run``/``mcp-call`` live in
# :mod:`tether.testing.mock_delegation`, ``terminal`` in :mod:`tether.testing.mock_terminal`.

__all__ = ["VERBS", "MockAgent", "Options", "ScriptError", "main", "parse_script"]


def main(argv: list[str] | None = None) -> int:
    """Run the mock agent on this process's stdin/stdout; return the exit code."""
    args = sys.argv[1:] if argv is None else argv
    if "-h" in args or "--help" in args:
        sys.stdout.write(USAGE + (__doc__ or ""))
        return 0
    try:
        opts = Options.parse(args)
    except ValueError as e:
        sys.stderr.write(f"tether-mock-agent: {e}\n{USAGE}")
        return 2
    # Die on SIGINT like a plain program instead of printing a KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if opts.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return MockAgent(opts).run()
