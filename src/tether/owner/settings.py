"""The owner's settings: what the session's options (and the config file) say."""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from tether import config
from tether.acp.policy import PermissionMode, PermissionPolicy, PolicyInvalid, load_policy
from tether.errors import TetherError
from tether.ipc import protocol
from tether.journal.entry import Retention
from tether.terminals import TerminalSettings

__all__ = ["OwnerSettings"]

logger = logging.getLogger("tether.owner")


@dataclass
class OwnerSettings:
    """Policy knobs of one owner, from the session's stored options."""

    idle_ttl: float = 3600.0
    turn_timeout: float | None = 1800.0
    max_lifetime: float = 0.0
    queue_max_depth: int = protocol.MAX_QUEUE_DEPTH
    max_frame_bytes: int = protocol.DEFAULT_MAX_FRAME_BYTES
    # The largest frame the agent may send (config frameMaxBytes, never below the
    # prompt limit); a longer one fails the turn it arrives in.
    agent_frame_bytes: int = protocol.DEFAULT_AGENT_FRAME_BYTES
    liveness_interval: float = 30.0
    handshake_timeout: float = 30.0
    abandoned_turn_grace: float = 10.0  # see tether.acp._turns (seed 002)
    cancel_grace: float = 10.0  # a cancel the agent ignores this long retires it
    rate_limit_hold: float = 18000.0  # longest wait for a known rate-limit reset; 0 = never
    connection_idle_timeout: float = 5.0  # a silent caller with nothing in flight
    unresponsive_after: float = 30.0  # heartbeat silence after which callers may fence us
    permission_mode: str = "approve-reads"
    # A policy file (or preset name) that replaces the mode's preset; None: the mode's.
    permission_policy: str | None = None
    permission_timeout: float = 300.0  # how long a question waits for a human (0 = forever)
    fs: bool = True
    auth: dict[str, str] = field(default_factory=dict)
    auth_policy: str = "skip"  # --auth-policy: no credential for advertised methods -> fail?
    retention: Retention = field(default_factory=Retention)
    journal_frames: bool = True  # False: control records only, no ACP frames stored
    # Agents' terminals (terminal/*); None: not offered (--no-terminal).
    terminals: TerminalSettings | None = field(default_factory=TerminalSettings)

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> OwnerSettings:
        s = cls()
        for name in (
            "idle_ttl",
            "turn_timeout",
            "max_lifetime",
            "liveness_interval",
            "handshake_timeout",
            "connection_idle_timeout",
            "abandoned_turn_grace",
            "cancel_grace",
            "unresponsive_after",
            "rate_limit_hold",
        ):
            if options.get(name) is not None:
                setattr(s, name, float(options[name]))
        for name in ("queue_max_depth", "max_frame_bytes"):
            if options.get(name) is not None:
                setattr(s, name, int(options[name]))
        if options.get("permission_mode"):
            s.permission_mode = str(options["permission_mode"])
        if options.get("permission_policy"):
            s.permission_policy = str(options["permission_policy"])
        if options.get("permission_timeout") is not None:
            s.permission_timeout = float(options["permission_timeout"])
        if "fs" in options:
            s.fs = bool(options["fs"])
        if options.get("auth_policy") in ("skip", "fail"):
            s.auth_policy = str(options["auth_policy"])
        s.terminals = TerminalSettings.from_options(options)
        if isinstance(options.get("auth"), dict):
            s.auth = {str(k): str(v) for k, v in options["auth"].items()}
        if s.turn_timeout is not None and s.turn_timeout <= 0:
            s.turn_timeout = None
        return s

    def load_config(self, cwd: str, options: dict[str, Any]) -> None:
        """What the owner reads from config itself: credentials (never stored in the
        DB), the journal's retention and, unless the session's options set it, the
        request size limit."""
        with contextlib.suppress(TetherError, ValueError, TypeError):
            cfg = config.load(cwd)
            if not self.auth:
                auth = cfg.get("auth") or {}
                self.auth = {str(k): str(v) for k, v in auth.items()}
            for key, name in (
                ("abandonedTurnGrace", "abandoned_turn_grace"),
                ("cancelGrace", "cancel_grace"),
            ):
                grace = cfg.get(key)
                if options.get(name) is None and isinstance(grace, int | float):
                    setattr(self, name, float(grace))
            if options.get("max_frame_bytes") is None:
                self.max_frame_bytes = protocol.prompt_max_bytes(cfg)
            self.agent_frame_bytes = max(protocol.agent_frame_max_bytes(cfg), self.max_frame_bytes)
            self.retention = Retention.from_config(cfg)
            if cfg.get("journalFrames") is False:
                self.journal_frames = False
            if options.get("permission_timeout") is None and cfg.get("permissionTimeout"):
                self.permission_timeout = float(cfg["permissionTimeout"])
            if not options.get("permission_policy") and cfg.get("permissionPolicy"):
                # A relative path in a config file is relative to the session's cwd.
                value = str(cfg["permissionPolicy"])
                presets = {m.value for m in PermissionMode}
                self.permission_policy = value if value in presets else os.path.join(cwd, value)

    def policy(
        self, mode: str | None = None, file: str | None = None
    ) -> PermissionMode | PermissionPolicy:
        """The permission policy of a turn: an explicit ``mode`` or policy ``file`` (a flag
        on this prompt) first; else the session's policy file, else its mode's preset. A
        policy file that no longer loads falls back to the mode's preset (logged)."""
        if mode in {m.value for m in PermissionMode}:
            return PermissionPolicy.preset(str(mode))
        spec = file or self.permission_policy
        if spec:
            try:
                return load_policy(spec)
            except PolicyInvalid as exc:
                logger.warning("%s; using %s", exc, self.permission_mode)
        return PermissionPolicy.preset(self.permission_mode)
