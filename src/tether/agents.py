"""Built-in agent names (acpx's registry) and how a name or command becomes an argv.

A name from the config's ``agents`` table wins over a built-in of the same name. Any
other token is taken as a raw command and split with shell-like quoting -- never run
through a shell. An installed binary is preferred over ``npx`` where acpx does so.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

TYPE_CHECKING = False  # typing costs milliseconds on the thin CLI path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

# name -> (preferred installed argv, fallback argv)
_BUILTIN: dict[str, tuple[list[str] | None, list[str]]] = {
    "claude": (
        ["claude-agent-acp"],
        ["npx", "-y", "@agentclientprotocol/claude-agent-acp@^0.76.0"],
    ),
    "codex": (["codex-acp"], ["npx", "-y", "@agentclientprotocol/codex-acp@^1.1.5"]),
    "gemini": (None, ["gemini", "--acp"]),
    "opencode": (["opencode", "acp"], ["npx", "-y", "opencode-ai", "acp"]),
    "cursor": (None, ["cursor-agent", "acp"]),
    "copilot": (None, ["copilot", "--acp", "--stdio"]),
    "antigravity": (None, ["agy_acp_server.par", "--uid="]),  # acpx 0.19.1's argv on Linux
    "pi": (None, ["npx", "pi-acp@^0.0.33"]),
    "openclaw": (None, ["openclaw", "acp"]),
    "kilocode": (["kilo", "acp"], ["npx", "-y", "@kilocode/cli", "acp"]),
    "mux": (None, ["npx", "-y", "mux@^0.28.0", "acp"]),
    "fast-agent": (None, ["uvx", "fast-agent-mcp", "acp"]),
    "droid": (None, ["droid", "exec", "--output-format", "acp"]),
    "qoder": (None, ["qodercli", "--acp"]),
    "devin": (None, ["devin", "acp"]),
    "fx": (None, ["fx", "acp"]),
    "grok-build": (None, ["grok", "agent", "stdio"]),
    "iflow": (None, ["iflow", "--experimental-acp"]),
    "junie": (None, ["junie", "--acp=true"]),
    "kimi": (None, ["kimi", "acp"]),
    "kiro": (None, ["kiro-cli-chat", "acp"]),
    "mcode": (None, ["mcode", "acp"]),
    "pool": (None, ["pool", "acp"]),
    "qwen": (None, ["qwen", "--acp"]),
    "trae": (None, ["traecli", "acp", "serve"]),
    "zeroclaw": (None, ["zeroclaw", "acp"]),
}
_ALIASES = {"factory-droid": "droid", "factorydroid": "droid"}

DEFAULT_AGENT = "codex"  # acpx's default


def builtin_names() -> list[str]:
    return sorted([*_BUILTIN, "mock"])


def is_agent_name(token: str, configured: Mapping[str, Any] | None = None) -> bool:
    return token in _BUILTIN or token in _ALIASES or token == "mock" or token in (configured or {})


def resolve(token: str, configured: Mapping[str, Any] | None = None) -> list[str]:
    """Turn an agent name or a raw command into the argv to run."""
    configured = configured or {}
    if token in configured:
        entry = configured[token]
        if isinstance(entry, Mapping):
            if isinstance(entry.get("argv"), list):
                return [str(a) for a in entry["argv"]]
            if isinstance(entry.get("command"), str):
                return [entry["command"], *[str(a) for a in entry.get("args", [])]]
        if isinstance(entry, str):
            return split_command(entry)
        if isinstance(entry, list):
            return [str(a) for a in entry]
    if token == "mock":
        return [sys.executable, "-P", "-m", "tether.testing.mock_agent"]
    name = _ALIASES.get(token, token)
    if name in _BUILTIN:
        installed, fallback = _BUILTIN[name]
        import shutil

        if installed and shutil.which(installed[0]):
            return list(installed)
        return list(fallback)
    return split_command(token)


def split_command(command: str) -> list[str]:
    """Split a command like a POSIX shell would (quotes, escapes), never running one.

    Without quotes or backslashes that is a plain whitespace split, which spares the
    thin path the `shlex` import (and its `re`).
    """
    if not any(c in command for c in "'\"\\#"):
        # shlex splits on these four only (str.split would also split on e.g. U+00A0).
        spaced = command.replace("\t", " ").replace("\r", " ").replace("\n", " ")
        return [word for word in spaced.split(" ") if word]
    import shlex

    return shlex.split(command)
