"""The owner's settings: what the session's stored options say.

Every door builds those options from one table (:func:`tether.operations.settings`); the
owner reads them under the same names and reports what it made of them in ``status``
(:meth:`OwnerSettings.effective`). From the config file it reads only the credentials
(never stored with a session) and, for sessions recorded before the doors stored the
whole table, the settings it read there then.
"""

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
from tether.process_terminals import TerminalSettings
from tether.state.journal.entry import Retention

__all__ = ["OwnerSettings"]

logger = logging.getLogger("tether.owner")

_SECONDS = (
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
    "permission_timeout",
)
# Read from config when a session's options lack them (recorded before the table).
_LEGACY_SECONDS = (
    ("abandonedTurnGrace", "abandoned_turn_grace"),
    ("cancelGrace", "cancel_grace"),
)


def _retention(options: dict[str, Any], default: Retention) -> Retention:
    """The journal's bounds from the options (``journal_max_*``), else ``default``."""
    entries, size, age = (options.get(f"journal_max_{n}") for n in ("entries", "bytes", "age"))
    return Retention(
        max_entries=int(entries) if entries is not None else default.max_entries,
        max_bytes=int(size) if size is not None else default.max_bytes,
        max_age_s=float(age) if age is not None else default.max_age_s,
    )


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

    # The MCP servers the agent is handed (tether.mcp_servers.servers_for reads them
    # from the options): shown in status.
    mcp_bridge: bool = False
    mcp_servers: list[str] = field(default_factory=list)  # names: specs may hold secrets

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> OwnerSettings:
        """The settings of the session's stored ``options`` (the names
        :data:`tether.operations.settings_table.TABLE` gives them)."""
        s = cls()
        for name in _SECONDS:
            if options.get(name) is not None:
                setattr(s, name, float(options[name]))
        for name in ("queue_max_depth", "max_frame_bytes", "agent_frame_bytes"):
            if options.get(name) is not None:
                setattr(s, name, int(options[name]))
        if options.get("permission_mode"):
            s.permission_mode = str(options["permission_mode"])
        if options.get("permission_policy"):
            s.permission_policy = str(options["permission_policy"])
        if "fs" in options:
            s.fs = bool(options["fs"])
        if options.get("auth_policy") in ("skip", "fail"):
            s.auth_policy = str(options["auth_policy"])
        if options.get("journal_frames") is False:
            s.journal_frames = False
        s.retention = _retention(options, s.retention)
        s.terminals = TerminalSettings.from_options(options)
        s.mcp_bridge = bool(options.get("mcp_bridge"))
        servers = options.get("mcp_servers")
        if isinstance(servers, list):
            s.mcp_servers = [str(x.get("name")) for x in servers if isinstance(x, dict)]
        if isinstance(options.get("auth"), dict):
            s.auth = {str(k): str(v) for k, v in options["auth"].items()}
        if s.turn_timeout is not None and s.turn_timeout <= 0:
            s.turn_timeout = None
        return s

    def load_config(self, cwd: str, options: dict[str, Any]) -> None:
        """What the owner reads from config itself: credentials (never stored in the
        DB); and, for a session recorded before every door stored the whole table, the
        settings it then read here. A relative policy file is the session cwd's."""
        with contextlib.suppress(TetherError, ValueError, TypeError):
            cfg = config.load(cwd)
            if not self.auth:
                auth = cfg.get("auth") or {}
                self.auth = {str(k): str(v) for k, v in auth.items()}
            for key, name in _LEGACY_SECONDS:
                grace = cfg.get(key)
                if options.get(name) is None and isinstance(grace, int | float):
                    setattr(self, name, float(grace))
            if options.get("permission_timeout") is None and cfg.get("permissionTimeout"):
                self.permission_timeout = float(cfg["permissionTimeout"])
            if options.get("max_frame_bytes") is None:
                self.max_frame_bytes = protocol.prompt_max_bytes(cfg)
            if options.get("agent_frame_bytes") is None:
                self.agent_frame_bytes = protocol.agent_frame_max_bytes(cfg)
            if options.get("journal_max_entries") is None:
                self.retention = Retention.from_config(cfg)
            if "journal_frames" not in options and cfg.get("journalFrames") is False:
                self.journal_frames = False
            if not options.get("permission_policy") and cfg.get("permissionPolicy"):
                self.permission_policy = str(cfg["permissionPolicy"])
        self.agent_frame_bytes = max(self.agent_frame_bytes, self.max_frame_bytes)
        presets = {m.value for m in PermissionMode}
        if self.permission_policy and self.permission_policy not in presets:
            # A relative path in a config file is relative to the session's cwd.
            self.permission_policy = os.path.join(cwd, self.permission_policy)

    def effective(self) -> dict[str, Any]:
        """What this owner goes by, under the names it received (``status`` shows it):
        MCP servers by name, credentials not at all."""
        terminals = self.terminals
        return {
            "idle_ttl": self.idle_ttl,
            "permission_mode": self.permission_mode,
            "permission_policy": self.permission_policy,
            "permission_timeout": self.permission_timeout,
            "auth_policy": self.auth_policy,
            "turn_timeout": self.turn_timeout,
            "max_lifetime": self.max_lifetime,
            "queue_max_depth": self.queue_max_depth,
            "liveness_interval": self.liveness_interval,
            "handshake_timeout": self.handshake_timeout,
            "max_frame_bytes": self.max_frame_bytes,
            "agent_frame_bytes": self.agent_frame_bytes,
            "abandoned_turn_grace": self.abandoned_turn_grace,
            "cancel_grace": self.cancel_grace,
            "rate_limit_hold": self.rate_limit_hold,
            "unresponsive_after": self.unresponsive_after,
            "journal_max_entries": self.retention.max_entries,
            "journal_max_bytes": self.retention.max_bytes,
            "journal_max_age": self.retention.max_age_s,
            "journal_frames": self.journal_frames,
            "terminal": terminals is not None,
            "terminal_output_limit": terminals.output_limit if terminals else None,
            "terminal_pty": terminals.pty if terminals else None,
            "mcp_bridge": self.mcp_bridge,
            "mcp_servers": list(self.mcp_servers),
            "fs": self.fs,
        }

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
