"""The owner's room for the agent's ``fs/*`` and ``terminal/*`` requests relayed to a client.

Theory of operation
-------------------
An ACP client reached through ``tether acp`` may serve files and terminals itself (it
advertised ``fs.readTextFile``, ``fs.writeTextFile`` or ``terminal``). The door then
prompts with ``relay: {"methods": [...], "client": TOKEN}`` beside ``control: true``:
the methods it can answer, and a token naming the door (the same over every turn it
prompts, each on a connection of its own). While such a turn is the active one, the
agent's request for one of those methods is *relayed*: sent to the prompter as a
``client_request`` frame (``relayId``, ``method``, ``params``), answered by the
prompter's ``relay_answer`` request on the same connection (``relayId`` and the
client's ``result`` or JSON-RPC ``error``), and that answer goes to the agent as is.
Otherwise (no such prompter, a method it did not list) the agent connection handles
the request itself, as without a door: policy-confined fs, supervised terminals.

The same promises as the questions room (:mod:`.questions`):

* *Exactly one answer.* A relay is answered once: by the connection it was sent to
  (another connection's ``relay_answer`` is refused), or by a fallback. A late answer
  is refused (``ALREADY_ANSWERED``) and never reaches the agent.
* *Timeout.* A relayed request waits ``permissionTimeout`` at most (0 = forever) --
  except ``terminal/wait_for_exit``, which lasts as long as the command does; the turn's
  cancel and the client leaving bound it. Then the agent gets a JSON-RPC error: the
  client may have acted (a write), so Tether does not redo the request itself. The
  prompter is told (``relay_expired``), so that its own wait for its client ends too;
  an answer after that is refused.
* *Client gone.* The prompter's connection closes (the door exited, the HTTP client
  left): every relay sent to it is answered with an error at once, never left hanging.

Terminal ids: the client's ids are its own namespace. The agent sees ``client-<hex>``
ids of ours (Tether's own terminals are 32 hex digits: they cannot collide), mapped
to (door token, client id); ``terminal/output``, ``wait_for_exit``, ``kill`` and
``release`` for such an id go to a live turn of the door that created it -- and fail
(the terminal is that client's, and it is gone) when none is.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable
from typing import Any

from tether.acp._agent_requests import FS_METHODS
from tether.acp.terminals import METHODS as TERMINAL_METHODS
from tether.errors import AlreadyAnswered, UnknownInteraction
from tether.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from tether.owner.job import Job, Outbox

__all__ = ["RELAYABLE", "ClientRelays"]

RELAYABLE = frozenset({*FS_METHODS, *TERMINAL_METHODS})  # nothing else is ever relayed
UNBOUNDED = frozenset({"terminal/wait_for_exit"})  # lasts as long as the client's command
ID_PREFIX = "client-"


class _Relay:
    __slots__ = ("future", "job", "method")

    def __init__(self, job: Job, method: str) -> None:
        self.job = job
        self.method = method
        self.future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()


class ClientRelays:
    """The agent's requests relayed to the client that prompted. See the module docstring.

    Args:
        current: the running prompt job, if any.
        timeout: seconds a relayed request waits for its answer (0 = forever).
    """

    def __init__(self, current: Callable[[], Job | None], *, timeout: float = 300.0) -> None:
        self.current = current
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._pending: dict[str, _Relay] = {}
        self._terminals: dict[str, tuple[str, str]] = {}  # our id -> (door token, client's id)
        self._doors: dict[str, Job] = {}  # door token -> its latest live relaying turn

    # --- routing (called by the agent connection, synchronously) ---------------------

    def wants(self, method: str, params: dict[str, Any]) -> bool:
        """Whether the agent's request ``method`` goes to a client rather than to Tether."""
        if _by_terminal_id(method):
            term = params.get("terminalId")
            return isinstance(term, str) and term in self._terminals
        return self._relaying_job(method) is not None

    def _relaying_job(self, method: str) -> Job | None:
        job = self.current()
        if job is None or job.done or job.outbox.detached:
            return None
        relay = job.env.payload.get("relay")
        if job.env.payload.get("control") is not True or not isinstance(relay, dict):
            return None
        methods = relay.get("methods")
        if method not in RELAYABLE or not isinstance(methods, list) or method not in methods:
            return None
        token = relay.get("client")
        if isinstance(token, str):
            self._doors[token] = job
        return job

    # --- relaying -------------------------------------------------------------------

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Relay one request; ``{"result": ...}`` or ``{"error": {code, message}}``.

        Cancellation (the agent's ``$/cancel_request``, the connection closing): the
        relay is dropped; a later answer to it is refused.
        """
        if _by_terminal_id(method):
            job, sent = self._terminal_job(method, params)
        else:
            job, sent = self._relaying_job(method), dict(params)
        if job is None:
            return _error(INTERNAL_ERROR, f"the client that served {method} is gone")
        relay_id = f"x-{next(self._ids)}"
        relay = _Relay(job, method)
        self._pending[relay_id] = relay
        job.send(
            {
                "type": "client_request",
                "requestId": job.request_id,
                "relayId": relay_id,
                "method": method,
                "params": sent,
            }
        )
        timeout = None if method in UNBOUNDED or self.timeout <= 0 else self.timeout
        try:
            async with asyncio.timeout(timeout):
                answer = await asyncio.shield(relay.future)
        except TimeoutError:
            return _error(INTERNAL_ERROR, f"the client did not answer {method} in {timeout:g} s")
        finally:
            self._pending.pop(relay_id, None)
            if not relay.future.done():  # given up: the prompter stops waiting too
                job.send(
                    {"type": "relay_expired", "requestId": job.request_id, "relayId": relay_id}
                )
        if method == "terminal/create" and "result" in answer:
            answer = self._adopt_terminal(job, answer)
        elif method == "terminal/release" and "result" in answer:
            self._terminals.pop(str(params.get("terminalId")), None)
        return answer

    def _terminal_job(
        self, method: str, params: dict[str, Any]
    ) -> tuple[Job | None, dict[str, Any]]:
        """The live turn of the door that created the terminal, and the params it gets."""
        mapped = self._terminals.get(str(params.get("terminalId")))
        if mapped is None:
            return None, params
        token, client_id = mapped
        job = self._doors.get(token)
        current = self.current()
        if current is not None and _token_of(current) == token:
            job = current  # the door's running turn (its earlier turn's connection closed)
        if job is None or job.done or job.outbox.detached:
            if method == "terminal/release":
                self._terminals.pop(str(params.get("terminalId")), None)
            return None, params
        return job, {**params, "terminalId": client_id}

    def _adopt_terminal(self, job: Job, answer: dict[str, Any]) -> dict[str, Any]:
        result = answer["result"]
        client_id = result.get("terminalId") if isinstance(result, dict) else None
        token = _token_of(job)
        if not isinstance(client_id, str) or token is None:
            return _error(INVALID_PARAMS, "the client's terminal/create answer has no terminalId")
        ours = ID_PREFIX + os.urandom(8).hex()
        self._terminals[ours] = (token, client_id)
        return {"result": {**result, "terminalId": ours}}

    # --- answers ----------------------------------------------------------------------

    def admit_answer(self, job: Job) -> None:
        """Carry out an IPC ``relay_answer``: the prompter's answer to one relay."""
        job.ack()
        payload = job.env.payload
        relay_id = str(payload["relayId"])
        relay = self._pending.get(relay_id)
        if relay is None:
            job.finish(error=AlreadyAnswered("this relayed request is no longer waiting"))
            return
        if relay.job.outbox is not job.outbox:
            job.finish(error=UnknownInteraction("this relayed request was sent elsewhere"))
            return
        error = payload.get("error")
        if isinstance(error, dict):
            code = error.get("code")
            answer = _error(
                code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
                str(error.get("message") or "the client refused the request"),
            )
            if "data" in error:
                answer["error"]["data"] = error["data"]
        else:
            answer = {"result": payload.get("result") or {}}
        if not relay.future.done():
            relay.future.set_result(answer)
        job.finish({"action": "relay_answered", "relayId": relay_id})

    def detach(self, outbox: Outbox) -> None:
        """A connection went away: its relays are answered with an error at once."""
        for relay in self._pending.values():
            if relay.job.outbox is outbox and not relay.future.done():
                relay.future.set_result(
                    _error(INTERNAL_ERROR, f"the client that served {relay.method} went away")
                )
        self._doors = {t: j for t, j in self._doors.items() if j.outbox is not outbox}

    def pending(self) -> int:
        return len(self._pending)


def _by_terminal_id(method: str) -> bool:
    """Requests about a terminal go where the terminal is, not to the current turn."""
    return method in TERMINAL_METHODS and method != "terminal/create"


def _token_of(job: Job) -> str | None:
    relay = job.env.payload.get("relay")
    token = relay.get("client") if isinstance(relay, dict) else None
    return token if isinstance(token, str) else None


def _error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
