"""A sans-IO JSON-RPC 2.0 core over NDJSON: bytes in, events out, no I/O and no clock.

``LineFramer`` splits the agent's stdout into bounded lines; ``JsonRpcConnection`` turns
lines into events and calls into bytes, and keeps the pending-request table that makes late
answers harmless. See the module docstrings of ``framing`` and ``connection`` for the theory
of operation.
"""

from __future__ import annotations

from tether.jsonrpc.connection import JsonRpcConnection, PendingRequest, Stats
from tether.jsonrpc.framing import DEFAULT_MAX_FRAME_BYTES, LineFramer, Oversized
from tether.jsonrpc.messages import (
    EOF,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NEED_DATA,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    Event,
    Notification,
    ProtocolViolation,
    Request,
    RequestId,
    Response,
    ViolationReason,
    encode,
    is_valid_id,
)

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "EOF",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "NEED_DATA",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "Event",
    "JsonRpcConnection",
    "LineFramer",
    "Notification",
    "Oversized",
    "PendingRequest",
    "ProtocolViolation",
    "Request",
    "RequestId",
    "Response",
    "Stats",
    "ViolationReason",
    "encode",
    "is_valid_id",
]
