"""``tether acp``: Tether as an ACP agent, so any ACP client gets warm Tether sessions.

========================  =====================================================  =====
module                    job                                                    I/O
========================  =====================================================  =====
``translate``             Tether's records as ACP frames; errors as JSON-RPC     no
``door``                  :class:`AcpDoor`: the ACP methods on the operations    yes
``attach``                one attached session: its journal followed live        yes
``turns``                 a prompt turn relayed through the owner; controls      yes
``questions``             permission requests put to the client (a controller)   yes
``relays``                the agent's fs/terminal requests served by the client  yes
``stdio``                 ``tether acp``: the door over stdin/stdout             yes
``channel``               the door for HTTP: POST answers, an event stream       yes
========================  =====================================================  =====

The door is transport-independent (bytes in through ``read``, bytes out through
``write``); stdio is one transport; :class:`~tether.acp_door.channel.AcpChannel` is the
core of the other, ``/v1/acp/{serverId}`` over HTTP (POST in, answers and SSE out).
"""

from __future__ import annotations

from tether.acp_door.door import AcpDoor, DoorOptions

__all__ = ["AcpDoor", "DoorOptions"]
