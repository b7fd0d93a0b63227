"""Submitting a prompt and reading its turn: the one implementation under every door.

Every door -- the CLI, the library, the ACP door, the gateway -- sends a turn to a
session's owner the same way: :func:`prompt_payload` builds the IPC ``prompt`` request
(the only place that does), :func:`submit` sends it on an owner connection (the only
place a ``prompt`` request is sent; the asyncio flavour, :func:`asubmit
<tether.operations.prompting_aio.asubmit>`, sends the same frame), and the turn's frames
are read by one loop, in a blocking flavour here (:func:`run_turn`, for the CLI over
:mod:`tether.ipc.client`) and an asyncio one in :mod:`.prompting_aio` (``AsyncTurn``,
over :mod:`tether.ipc.aio_client`). What differs between doors is presentation only:
how a frame is shown.

The loop
--------
The owner relays the turn's frames (``update`` with its journal ``seq``, questions,
notices...) and ends the request with one terminal frame: ``result`` (the turn's
answer), ``error`` (re-raised as its class), or ``lagged`` (the caller read too slowly
and the owner let go of it; the turn goes on). The owner never slows a turn for a
caller, so the loop finishes a turn it was let go of from the session's journal
(:class:`tether.operations.TurnRest`), after the last ``seq`` it was given:

* ``lagged``: the owner still runs the turn: follow the journal to its end;
* the connection cut after the ack (``OwnerLost``): if the same owner generation still
  serves, a lagged frame was lost with its buffer -- follow; else the owner died --
  read what is stored, and without an end there the turn's outcome is unknown
  (``OwnerLost``).

The journal's frames reach the door as ``update`` frames (``seq``, ``direction``,
``frame``), as if relayed, and the turn ends with its result either way.

The caller-leaves rule
----------------------
A caller that *waits* on its turn (``"wait": true``) and leaves before the turn ended --
Ctrl-C, a cancelled task, an iterator closed early -- cancels that turn: it asks the
owner to cancel the request by its id (:func:`tether.operations.cancel`; a running
turn gets ``session/cancel``, a queued one is removed; bounded by :data:`LEAVE_S`, a
cancel that finds nothing is no failure), then closes its connection. The explicit
cancel is what makes the rule hold in every state of the loop: while the turn is read
on its connection, the owner would also cancel on the connection's close
(``owner/admission.detach``), but only the cancel is acknowledged before the caller
goes on, and once the owner let go of the connection (the journal path) the close says
nothing at all. One option, for a caller that shows the turn's end: ``show_end``
(blocking flavour) reads the cancelled turn's answer after the cancel, bounded, so
``tether prompt`` can print how it ended before it exits 130.

A turn sent without waiting (``"wait": false``: the gateway, ``--no-wait``) belongs to
no connection: leaving never cancels it. To stop it, cancel it by its request id.

The warm path imports no asyncio (``tests/integration/test_import_budget.py``): the
journal path, which needs the follower, is imported only when taken.
"""

from __future__ import annotations

from tether.errors import OwnerLost, WatchLagged

TYPE_CHECKING = False  # typing costs ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from tether.ipc.client import OwnerConnection

    OnFrame = Callable[[dict[str, Any]], None]

__all__ = [
    "LEAVE_S",
    "TurnEnd",
    "admit",
    "cursor",
    "journal_update",
    "leave_turn",
    "owner_kept_turn",
    "prompt_payload",
    "rest_result",
    "run_turn",
    "submit",
]

LEAVE_S = 3.0  # how long a leaving caller waits for its cancel (and, show_end, the answer)
REQUEST_KIND = "prompt"  # the IPC request; sent only by this module and .prompting_aio


class TurnEnd:
    """How a turn ended, as the loop read it: the typed result of :func:`run_turn` (and
    :attr:`AsyncTurn.end <tether.operations.prompting_aio.AsyncTurn.end>`).

    Attributes:
        request_id: the turn's IPC request id.
        stop_reason: the agent's ``stopReason`` (``end_turn``, ``cancelled``...).
        result: the owner's whole ``result`` payload (``permissionDenied``, ``cancel``...).
        last_seq: the journal seq of the last frame of the turn the caller was given
            (0: none was journaled); with the ack's ``seq``, the turn's entries.
        from_journal: the owner let go of the caller mid-turn; the rest was read from
            the journal.
    """

    __slots__ = ("from_journal", "last_seq", "request_id", "result", "stop_reason")

    def __init__(
        self, request_id: str, result: dict[str, Any], last_seq: int, *, from_journal: bool
    ) -> None:
        self.request_id = request_id
        self.result = result
        self.stop_reason = str(result.get("stopReason") or "")
        self.last_seq = last_seq
        self.from_journal = from_journal

    def __repr__(self) -> str:
        return (
            f"TurnEnd({self.request_id!r}, {self.stop_reason!r}, last_seq={self.last_seq},"
            f" from_journal={self.from_journal})"
        )


def prompt_payload(
    blocks: list[dict[str, Any]],
    *,
    client: str,
    wait: bool = True,
    control: bool = False,
    updates: bool = True,
    permission_mode: str | None = None,
    permission_policy: str | None = None,
    relay: dict[str, Any] | None = None,
    hello: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The IPC ``prompt`` request's payload: the one place it is built.

    Args:
        blocks: the ACP content blocks of the prompt.
        client: which door sends it (``cli``, ``library``, ``acp``, ``http``), journaled.
        wait: the caller waits on the turn (leaving cancels it); False: the turn runs
            for nobody's connection (the gateway, ``--no-wait``).
        control: the caller is a controller of the turn: the agent's questions the
            policy leaves open come to it as ``interaction`` frames.
        updates: False: the owner relays none of the turn's frames on this connection
            (the caller follows the journal instead: the gateway's 202 route).
        permission_mode / permission_policy: override the session's, for this turn only;
            None keeps the session's.
        relay: the client methods this caller serves (the ACP door's fs and terminals),
            asked for only of an owner whose ``hello`` lists the ``relay`` feature (an
            older owner serves them itself, as it would anyway).
    """
    payload: dict[str, Any] = {"prompt": blocks, "wait": wait, "client": client}
    if permission_mode:
        payload["permissionMode"] = permission_mode
    if permission_policy:
        payload["permissionPolicy"] = permission_policy
    if control:
        payload["control"] = True
    if not updates:
        payload["updates"] = False
    if relay is not None and hello is not None:
        features = hello.get("features")
        if isinstance(features, list) and "relay" in features:
            payload["relay"] = relay
    return payload


def submit(
    conn: OwnerConnection,
    payload: dict[str, Any],
    *,
    deadline_ms: int | None = None,
    max_bytes: int | None = None,
) -> str:
    """Send the ``prompt`` request on ``conn``; returns its request id.

    Raises:
        UsageError: the request is over ``max_bytes`` (config ``promptMaxBytes``);
            nothing was sent.
    """
    return conn.send(REQUEST_KIND, payload, deadline_ms=deadline_ms, max_bytes=max_bytes)


def admit(
    conn: OwnerConnection,
    payload: dict[str, Any],
    *,
    deadline_ms: int | None = None,
    max_bytes: int | None = None,
) -> tuple[str, dict[str, Any]]:
    """Submit a turn nobody waits on and read its ack: (request id, ack frame).

    Raises:
        UsageError: over ``max_bytes``. TetherError subclasses: the owner refused it.
    """
    rid = submit(conn, payload, deadline_ms=deadline_ms, max_bytes=max_bytes)
    return rid, conn.wait(rid, until_ack=True)


def cursor(hello: dict[str, Any]) -> int:
    """The journal seq before any entry of a turn sent after this ``hello``."""
    seq = hello.get("journalSeq")
    return seq if isinstance(seq, int) else 0


def journal_update(seq: int, direction: object, frame: dict[str, Any]) -> dict[str, Any]:
    """A turn's journaled ACP frame, shaped as the owner relays it (an ``update``)."""
    return {"type": "update", "seq": seq, "direction": direction, "frame": frame}


def owner_kept_turn(key: str, generation: object) -> bool:
    """Whether the owner that ran a turn (its hello's ``generation``) still serves: a
    cut connection then lost a lagged frame, and the turn goes on (see the loop)."""
    from tether.operations.connecting import serving_generation

    serving = serving_generation(key)
    return serving is not None and serving == generation


def run_turn(
    conn: OwnerConnection,
    key: str,
    rid: str,
    on_frame: OnFrame,
    *,
    deadline_ms: int | None = None,
    door: str | None = None,
) -> TurnEnd:
    """Read turn ``rid`` (submitted on ``conn``) to its end; returns how it ended.

    Each frame of the turn after the ack goes to ``on_frame``, its terminal one
    excepted; frames read from the journal come as ``update`` frames (see the module
    docstring). ``door`` names the reader to the journal's follower.

    Raises:
        TetherError subclasses: the turn's error; ``OwnerLost`` when its outcome is
        unknown; ``CallTimeout`` when ``deadline_ms`` passed without an answer.

    Cancellation (KeyboardInterrupt): propagates as is; the caller applies the
    caller-leaves rule (:func:`leave_turn`).
    """
    seen = [cursor(conn.hello)]  # the journal seq of the last frame relayed to us

    def relay(frame: dict[str, Any]) -> None:
        seq = frame.get("seq")
        if isinstance(seq, int) and seq > seen[0]:
            seen[0] = seq
        on_frame(frame)

    try:
        result = conn.wait(rid, on_frame=relay, deadline_ms=deadline_ms)
        return TurnEnd(rid, result, seen[0], from_journal=False)
    except WatchLagged as exc:
        # We read too slowly and the owner let go of us; the turn went on. Its frames
        # are all in the journal: the rest of it comes from there.
        last = exc.fields.get("last_seq")
        seen[0] = max(seen[0], last if isinstance(last, int) else 0)
        follow = True
    except OwnerLost:
        follow = owner_kept_turn(key, conn.generation)
    result = _rest_from_journal(key, rid, seen, relay, follow=follow, door=door)
    return TurnEnd(rid, result, seen[0], from_journal=True)


def _rest_from_journal(
    key: str, rid: str, seen: list[int], relay: OnFrame, *, follow: bool, door: str | None
) -> dict[str, Any]:
    """The rest of turn ``rid`` after ``seen[0]`` from the journal (blocking): its frames
    to ``relay`` as relayed ones, and its result (or its error, raised)."""
    from tether.operations.turn_rest import TurnRest

    rest = TurnRest(key, rid, seen[0], follow=follow, door=door)
    rest.read(lambda seq, direction, frame: relay(journal_update(seq, direction, frame)))
    return rest_result(rest)


def rest_result(rest: Any) -> dict[str, Any]:
    """The ``result`` of a turn read to its end from the journal (a ``TurnRest``).

    Raises:
        TetherError: the turn's error; SessionClosed; OwnerLost (no end stored).
    """
    result: dict[str, Any] = {"stopReason": rest.stop_reason()}
    if "cancel" in rest.outcome:
        result["cancel"] = rest.outcome["cancel"]
    return result


def leave_turn(
    conn: OwnerConnection,
    key: str,
    rid: str,
    *,
    on_frame: OnFrame | None = None,
    show_end: bool = False,
) -> dict[str, Any] | None:
    """The caller-leaves rule, blocking flavour: cancel turn ``rid``, bounded.

    With ``show_end``, the cancelled turn's answer is then read on ``conn`` (its frames
    to ``on_frame``) for at most :data:`LEAVE_S` and returned; else None. The caller
    closes ``conn``.

    Raises:
        TetherError / OSError: the cancel or the answer failed (the turn's outcome no
        longer matters to a caller that leaves: callers may drop it).
    """
    from tether.operations.live import cancel

    conn.sock.settimeout(LEAVE_S)  # bounds the answer below too
    cancel(key, rid)
    if not show_end:
        return None
    return conn.wait(rid, on_frame=on_frame)
