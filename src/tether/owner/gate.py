"""The owner's door check: who is at the other end of the socket, and may it do this?

Theory of operation
-------------------
The CLI and the library check visibility before they connect (:func:`tether.policy.access.
authorize`), but an owner's socket is a file any process of the user can open: a
client from inside an agent tree that speaks IPC itself would skip that check. So the
owner checks again, with what the kernel says about its peer rather than what the
peer says about itself:

1. the peer's pid comes from ``SO_PEERCRED``, taken when the connection was accepted
   (:attr:`tether.owner.job.Outbox.peer`);
2. *the cheap question first*: could that process be inside an agent tree at all --
   does it or any ancestor carry ``TETHER_SESSION_KEY``/``TETHER_LEASE_ID`` in its
   environment (:func:`tether.policy.access.could_be_agent`, ``/proc`` only; ancestors once
   found clean are remembered, so an operator's shell is walked once)? A keeper's
   environment carries its lease id and an agent cannot change it, so every process
   of an agent tree answers yes. No: the peer is the operator, who sees everything --
   decided without touching the registry, so the operator's warm prompt stays cheap;
3. yes: the proof (:func:`tether.policy.requester.resolve` on the peer's pid, with the claim
   its environment started with) names the requester -- the session whose keeper it
   descends from, or an unproven claim clamped to ``self``, or the operator after all;
4. the one rule (:func:`tether.policy.access.check_session`) decides, with the configuration
   of the session's own directory; a denial is the request's terminal error,
   ``VisibilityDenied`` naming the rule, and the request never runs.

Every kind is checked, as the action it is: ``prompt`` (send), ``set_mode``/
``set_config_option`` (set), ``cancel``, ``close``, ``watch``, ``answer``, ``terminate``,
``status`` -- and any kind added later as ``send`` until it is given its own. A peer
the kernel cannot name (no ``SO_PEERCRED``) is refused: the check fails closed.

What it does not do: it is no sandbox. The journal and the registry are files the same
user can read; the owner guards what only the owner can do -- drive the agent, answer
its questions, end the session, stream its live entries.
"""

from __future__ import annotations

from typing import Any, Final

from tether import config
from tether.errors import VisibilityDenied
from tether.ipc import protocol
from tether.policy import access
from tether.policy.requester import peer_environ, resolve
from tether.state.registry import Registry

__all__ = ["ACTIONS", "OWN_SIDE_REFUSED", "PeerGate"]

# IPC request kind -> the visibility check's action. A kind not listed (one added later)
# is checked as "send": every request reads or drives the session, so none goes unchecked.
ACTIONS: Final = {
    "prompt": "send",
    "set_mode": "set",
    "set_config_option": "set",
    "cancel": "cancel",
    "close": "close",
    "watch": "watch",
    "answer": "answer",
    "terminate": "terminate",
    "status": "status",
    "start_agent": "send",  # start (warm) the agent without a prompt
    "relay_answer": "send",  # a prompter's answer to an fs/terminal request relayed to it
}
_DEFAULT_ACTION: Final = "send"
# Actions a session's own agent side may never take on it, whatever the visibility rules.
OWN_SIDE_REFUSED: Final = frozenset({"answer"})


class PeerGate:
    """The door check of one session's owner (see the module docstring).

    Args:
        key: the session this owner serves.
        registry: the owner's registry (read only for peers inside an agent tree).
        cwd: the session's directory: its configuration holds the policy.
    """

    def __init__(self, key: str, registry: Registry, cwd: str) -> None:
        self.key = key
        self.registry = registry
        self.cwd = cwd
        self._clean: dict[int, int] = {}  # processes known to be outside every agent tree

    def check(self, env: protocol.Envelope, peer: dict[str, int]) -> None:
        """Return if the peer may make request ``env``; raise otherwise.

        Raises:
            VisibilityDenied: the rules forbid it (or the peer cannot be named).
            NoSession: the session's row is gone.
            ConfigError: the configuration is malformed.
        """
        action = ACTIONS.get(env.kind, _DEFAULT_ACTION)
        pid = peer.get("pid") or 0
        if pid <= 0:
            raise VisibilityDenied(
                f"{env.kind} refused: the kernel did not name the connected process",
                rule="peer-unknown",
                session_key=self.key,
            )
        if not access.could_be_agent(pid, clean=self._clean):
            return  # the operator: no registry read on this path
        self._prove(env, pid, action)

    def _prove(self, env: protocol.Envelope, pid: int, action: str) -> None:
        from tether.errors import NoSession

        resolved = resolve(self.registry, pid=pid, environ=peer_environ(pid))
        if resolved.requester is None:
            return
        if action in OWN_SIDE_REFUSED and resolved.is_agent_of(self.key):
            # Issue 20: the agent's tree, its terminals, what a killed keeper left, and a
            # recorded member wherever it moved -- none answers its own session's questions.
            raise VisibilityDenied(
                f"an agent cannot answer the questions of its own session ({resolved.proof})",
                rule="own-agent-tree",
                session_key=self.key,
            )
        session = self.registry.session(self.key)
        if session is None:
            raise NoSession("no such session", session_key=self.key)
        cascade = env.payload.get("cascadeFrom")
        cfg: dict[str, Any] = config.load(self.cwd, warn=lambda _msg: None)
        access.check_session(
            self.registry,
            session,
            resolved,
            action,
            cfg=cfg,
            cascade_from=cascade if isinstance(cascade, str) else None,
        )
