"""Who is asking: the operator, or a session proven by the kernel.

Theory of operation
-------------------
Every agent Tether starts runs under a keeper (a child subreaper: every descendant,
however it daemonises, stays below it) and gets ``TETHER_SESSION_KEY``,
``TETHER_LEASE_ID`` and ``TETHER_INSTANCE_ID`` in its environment. The lease of that
run records the keeper's pid and start time and, where cgroups are used, the run's
cgroup. So when ``tether ...`` (or a library call) runs, the kernel can say which run
it belongs to, whatever the environment claims:

1. walk the parent chain of the calling process (or of an IPC peer, whose pid comes
   from ``SO_PEERCRED``) through ``/proc``, nearest first;
2. the first ancestor that is the keeper of one of *this* instance's open leases --
   same pid, same start time, same boot -- names the run, and so the session;
3. where the lease has a cgroup, the process must sit in it (or below it).

Then the environment claim is compared with the kernel's answer:

=====================  =====================  =============================================
claim                  kernel                 requester
=====================  =====================  =============================================
none                   no agent tree          the operator: sees and drives everything
``K`` or none          run of session ``K``   ``K``, at the configured visibility
``X``                  run of session ``K``   ``K`` clamped to ``self`` (forged claim)
``X``                  no agent tree          ``X`` clamped to ``self`` (unproven claim)
=====================  =====================  =============================================

**A forged claim gains nothing.** Inside an agent tree the kernel's session wins and
the claim only *narrows* it: claiming another session's key gets the caller its own
session and nothing else -- less than it gets by not lying. Outside every agent tree
the caller is the operator anyway (it could drop the variable and see everything);
with an unproven claim it gets exactly the claimed session and nothing else: its
status, history, prompts, close -- the narrowest level, and never any other row.
A ``/proc`` that cannot be read proves nothing: a claim then counts as unproven. A
claim whose ``TETHER_INSTANCE_ID`` names another install (another ``TETHER_HOME``) is
not a claim here at all: an agent of that install driving this one is this install's
operator unless the kernel places it in one of this install's trees.

**Escapes keep their identity** (issue 20). A process outside every keeper is still an
agent's (:func:`agent_side`, clamped to ``self``, never the operator) when an ancestor
is a session's owner -- the subreaper of last resort, to which a killed keeper's
orphans go (:mod:`tether.supervise.adoption`) -- or when it or an ancestor was recorded
as a run's member while provably inside (:mod:`tether.state._registry_members`). Such a
requester, and every proven member of a run, is its session's *agent side*
(:attr:`Resolved.agent_side`): the owner's gate refuses it an answer to its own
session's questions.

**This is not a sandbox.** It governs cooperative agents running as the same Unix user
as Tether: such an agent can read ``TETHER_HOME`` directly, or ask a service outside
its tree to run commands for it. It keeps honest agents to their lane and makes
delegation explicit; it does not contain a hostile one. An agent that must be contained
runs sandboxed, without access to ``TETHER_HOME``, and reaches sessions only through
the channel Tether hands it (``tether mcp``), whose requester is fixed by construction.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from tether._os import ProcessTable, ProcUnreadable
from tether.policy.visibility import Requester, Visibility

if TYPE_CHECKING:
    from tether.state.registry import Lease, Registry

__all__ = [
    "CLAIM_ENV",
    "Resolved",
    "agent_side",
    "ancestors",
    "peer_environ",
    "peer_pid",
    "resolve",
    "resolve_peer",
]

CLAIM_ENV: Final = "TETHER_SESSION_KEY"
_MAX_DEPTH: Final = 4096  # a parent chain longer than this is a corrupted table, not a tree


@dataclass(frozen=True)
class Resolved:
    """The requester (``None``: the operator) and a sentence saying how it was decided."""

    requester: Requester | None
    proof: str
    lease_id: str | None = None
    # The kernel (a keeper or owner above it) or Tether's record of run members places
    # the process on its session's agent side -- not merely a claim (issue 20): such a
    # requester never answers its own session's questions nor controls it.
    agent_side: bool = False

    def is_agent_of(self, session_key: str) -> bool:
        """Whether the requester is proven to be ``session_key``'s own agent side."""
        return (
            self.agent_side
            and self.requester is not None
            and self.requester.session_key == session_key
        )

    @property
    def is_operator(self) -> bool:
        return self.requester is None

    @property
    def spawner_key(self) -> str | None:
        """What a session this requester creates records as ``spawnedBy``/parent."""
        return self.requester.session_key if self.requester is not None else None


def ancestors(table: ProcessTable, pid: int) -> list[tuple[int, int]]:
    """``(pid, starttime)`` of ``pid`` and each of its ancestors, nearest first.

    Raises:
        ProcUnreadable: the chain cannot be read.
    """
    chain: list[tuple[int, int]] = []
    while pid > 0 and len(chain) < _MAX_DEPTH:
        st = table.stat(pid)
        if st is None:
            break
        chain.append((pid, st.starttime))
        if st.ppid == pid:
            break
        pid = st.ppid
    return chain


def _in_cgroup(table: ProcessTable, pid: int, path: str) -> bool:
    """Whether ``pid`` sits in the cgroup at ``path`` or one below it."""
    if pid in table.cgroup_procs(path):
        return True
    try:
        subdirs = [e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return False
    return any(_in_cgroup(table, pid, sub) for sub in subdirs)


def _kernel_lease(
    registry: Registry, table: ProcessTable, pid: int, chain: list[tuple[int, int]] | None = None
) -> tuple[Lease | None, str | None]:
    """The open lease whose keeper is the nearest keeper above ``pid``, or None.

    The second item, when set, says why the membership is doubtful (the process left
    the run's cgroup): it is still that run's, but clamped to ``self``.
    """
    leases = registry.leases(states=("open", "closing"))
    if not leases:
        return None, None
    boot = table.boot_id()
    by_keeper = {lease.keeper_pid: lease for lease in leases if lease.boot_id == boot}
    for ancestor, starttime in (ancestors(table, pid) if chain is None else chain)[1:]:
        lease = by_keeper.get(ancestor)
        if lease is None or lease.keeper_starttime != starttime:
            continue
        # A cgroup that no longer exists (or never did) proves nothing either way.
        cgroup = lease.cgroup_path
        in_use = cgroup is not None and table.cgroup_populated(cgroup) is not None
        if in_use and cgroup is not None and not _in_cgroup(table, pid, cgroup):
            return lease, "it left the run's cgroup"
        return lease, None
    return None, None


def agent_side(
    registry: Registry, table: ProcessTable, chain: list[tuple[int, int]]
) -> tuple[str, str | None, str] | None:
    """For a process outside every keeper: ``(session key, lease id, how)`` if it is still
    an agent's, by the kernel or by Tether's record, else None.

    ``chain``: the process and its ancestors, nearest first (:func:`ancestors`). It is
    the agent's side when an ancestor is a session's owner (the subreaper of last
    resort: a killed keeper's orphans are re-parented to it; nothing else is below an
    owner), or when it or an ancestor is a recorded member of a run
    (:mod:`tether.state._registry_members`) -- wherever it has moved since.
    """
    boot = table.boot_id()
    owner_key = registry.owner_in(boot, chain[1:])
    if owner_key is not None:
        return owner_key, None, f"is below the owner of session {owner_key}, outside its keepers"
    member = registry.member_in(boot, chain)
    if member is not None:
        key = member.session_key or f"exec:{member.lease_id}"
        how = (
            f"was recorded as a member of run {member.lease_id} ({member.how})"
            if member.pid == chain[0][0]
            else f"descends from pid {member.pid}, a recorded member of run {member.lease_id}"
        )
        return key, member.lease_id, how
    return None


def _record_chain(
    registry: Registry, table: ProcessTable, lease: Lease, chain: list[tuple[int, int]]
) -> None:
    """Record the caller and its ancestors below ``lease``'s keeper as members of the run."""
    below = []
    for ident in chain:
        if ident[0] == lease.keeper_pid:
            break
        below.append(ident)
    # A record is best effort: the answer stands without it.
    with contextlib.suppress(Exception):
        registry.record_members(
            lease.lease_id, lease.session_key, table.boot_id(), below, "requester"
        )


def _requester(registry: Registry, key: str, clamp: Visibility | None) -> Requester:
    session = registry.session(key)
    agent_id = (session.agent_id or session.agent_label) if session is not None else ""
    sandboxed = bool(session.sandboxed) if session is not None else False
    return Requester(session_key=key, agent_id=agent_id, sandboxed=sandboxed, clamp=clamp)


def resolve(
    registry: Registry,
    *,
    pid: int | None = None,
    environ: Mapping[str, str] | None = None,
    table: ProcessTable | None = None,
    record: bool = False,
) -> Resolved:
    """Decide who is asking: the process ``pid`` (default: us) with claim ``environ``.

    See the module docstring for the table of outcomes. ``record``: a caller proven
    below a keeper is recorded (with its ancestors up to the keeper) as a member of
    that run, so it stays that run's agent wherever it moves.
    """
    if table is None:
        from tether._os import current

        table = current()
    pid = os.getpid() if pid is None else pid
    env = os.environ if environ is None else environ
    claim = (env.get(CLAIM_ENV) or "").strip() or None
    other_instance = env.get("TETHER_INSTANCE_ID")
    if claim is not None and other_instance and other_instance != registry.instance_id:
        # A claim made for another Tether install (another TETHER_HOME): an agent of that
        # install operating this one. It names no session here; the kernel still decides.
        claim = None
    why_not: str | None = None
    chain: list[tuple[int, int]] = []
    side: tuple[str, str | None, str] | None = None
    try:
        chain = ancestors(table, pid)
        lease, doubt = _kernel_lease(registry, table, pid, chain)
        if lease is None:
            side = agent_side(registry, table, chain)
        elif record and doubt is None:
            _record_chain(registry, table, lease, chain)
    except ProcUnreadable as exc:
        lease, doubt, why_not = None, None, f"/proc unreadable ({exc})"
    if side is not None:
        # Issue 20: it left its keeper (killed it) or moved away, but Tether saw it inside
        # an agent's run: that agent's, never the operator -- and, escaped, self only.
        key, side_lease, how = side
        return Resolved(
            _requester(registry, key, Visibility.SELF),
            f"pid {pid} {how}: clamped to self",
            side_lease,
            agent_side=True,
        )
    if lease is not None:
        kernel_key = lease.session_key or f"exec:{lease.lease_id}"
        where = f"pid {pid} descends from keeper {lease.keeper_pid} of lease {lease.lease_id}"
        if doubt is not None:
            return Resolved(
                _requester(registry, kernel_key, Visibility.SELF),
                f"{where}, but {doubt}: clamped to self",
                lease.lease_id,
                agent_side=True,
            )
        if claim is None or claim == kernel_key:
            return Resolved(
                _requester(registry, kernel_key, None), f"{where}", lease.lease_id, agent_side=True
            )
        return Resolved(
            _requester(registry, kernel_key, Visibility.SELF),
            f"{where}, but claims {claim}: clamped to self",
            lease.lease_id,
            agent_side=True,
        )
    if claim is None:
        note = f" ({why_not})" if why_not else ""
        return Resolved(None, f"pid {pid} is outside every agent tree: the operator{note}")
    return Resolved(
        _requester(registry, claim, Visibility.SELF),
        f"claim {claim} unproven ({why_not or f'pid {pid} is in no agent tree'}): clamped to self",
    )


def peer_pid(sock: socket.socket) -> int:
    """The pid of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", creds)
    return int(pid)


_PEER_KEYS: Final = (CLAIM_ENV, "TETHER_INSTANCE_ID")


def peer_environ(pid: int) -> dict[str, str]:
    """The claim-related variables of process ``pid``'s environment, as it was exec'd.

    ``/proc/PID/environ`` is the environment the process started with: for a ``tether``
    command (or any client) that is the claim it makes. Unreadable: no claim -- the
    kernel's answer decides alone.
    """
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            block = f.read()
    except OSError:
        return {}
    found: dict[str, str] = {}
    for item in block.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name.decode(errors="replace") in _PEER_KEYS:
            found[name.decode()] = value.decode(errors="replace")
    return found


def resolve_peer(
    registry: Registry,
    sock: socket.socket,
    claim: str | None,
    *,
    table: ProcessTable | None = None,
) -> Resolved:
    """:func:`resolve` for the process at the other end of ``sock``, claiming ``claim``."""
    return resolve(registry, pid=peer_pid(sock), environ={CLAIM_ENV: claim or ""}, table=table)
